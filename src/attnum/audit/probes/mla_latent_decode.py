"""MLA decode: every head reads one latent cache whose first dv dims are also the values (DeepSeek-V2/V3).

Multi-head latent attention in its absorbed decode form (DeepSeek-V2, arXiv 2405.04434, Sec. 2.1; vLLM's
and SGLang's MLA backends) attends all H query heads to ONE cached head per token: a key of d = dv + r
dims (the compressed latent c_kv, dv = 512, and the decoupled rope key, r = 64: d = 576) whose first dv
dims are the value (v = k[..., :dv]). Kernels read the latent once and split the score into two dot
products, latent and rope (vLLM's ``triton_decode_attention`` with ``is_mla``: BLOCK_DMODEL = 512 plus
BLOCK_DPE = 64, and 256 + 32 for d = 288). A kernel that drops or misplaces the rope part, reads the
value from the wrong dims, or sums the two parts out of range gives wrong rows; the generic decode probes
(d = dv, G = H or 2, V apart from K) never reach that path, and an MLA kernel may refuse them (vLLM's
reads V from the latent). Cases: H = 16 heads (one 16-head block), G = 1, (dv, r) = (512, 64) and
(256, 32), lengths (1, 37, 200) and (0, 16) (a padding slot beside a live sequence), contiguous and
paged (P = 16), one and four splits. Only targets declaring ``attnum_mla = True``
(attnum.kernels.conventions) are asked.
"""

from __future__ import annotations

from attnum.attention.serving.paged import to_pages
from attnum.audit.features import undeclared
from attnum.audit.harness import Case, Probe, ProbeContext
from attnum.audit.serving import decode_case, missing

H, S = 16, 200
LENS = ((1, 37, 200), (0, 16))  # a batch of live sequences; one with a padding slot (L = 0) beside a live one
DIMS = ((512, 64), (256, 32))  # (dv, rope): d = 576 (DeepSeek-V2/V3), 288


def latent_inputs(ctx: ProbeContext, dv: int, rope: int, lens: tuple[int, ...], salt: int):
    """q (B, H, 1, dv + rope), k (B, 1, S, dv + rope), v = k[..., :dv] in ctx.dtype, and the lengths."""
    import torch

    B, d = len(lens), dv + rope
    q, k = ctx.cast(ctx.randn(B, H, 1, d, salt=salt), ctx.randn(B, 1, S, d, salt=salt + 1))
    for b, L in enumerate(lens):
        k[b, :, L:] = 0.0
    return q, k, k[..., :dv].contiguous(), torch.tensor(lens)


def run(ctx: ProbeContext) -> list[Case]:
    no_decode = missing(ctx, "decode")
    if no_decode:
        return [no_decode]
    not_mla = undeclared(ctx, "mla", "one latent KV head, v = k[..., :dv]", sdpa=False)
    if not_mla is not None:
        return [not_mla]
    cases = []
    for i, (dv, rope) in enumerate(DIMS):
        for j, L in enumerate(LENS):
            cases += _cases(ctx, dv, rope, L, salt=140 + 4 * i + 2 * j)
    return cases


def _cases(ctx: ProbeContext, dv: int, rope: int, lens: tuple[int, ...], salt: int) -> list[Case]:
    q, k, v, lens_t = latent_inputs(ctx, dv, rope, lens, salt)
    kp, table = to_pages(k, 16, cache_seqlens=lens_t)
    vp = kp[..., :dv].contiguous()  # the same pages: the values are the latent's first dv dims
    cases = []
    for splits in (1, 4):
        tag = f"d={dv}+{rope} H={H} G=1 L={lens} splits={splits}"
        cases.append(decode_case(ctx, tag, q, k, v, cache_seqlens=lens_t, num_splits=splits))
        cases.append(decode_case(ctx, f"{tag} paged P=16", q, k, v, cache_seqlens=lens_t, block_table=table,
                                 pages=(kp, vp), num_splits=splits))
    return cases


PROBE = Probe(
    name="mla-latent-decode",
    summary="MLA decode: one latent KV head, keys = latent + rope, values = the latent's first dv dims",
    refs=("arXiv 2405.04434",),
    run=run,
)
