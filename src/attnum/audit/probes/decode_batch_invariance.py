"""A decode's output for one request must not depend on the rest of the batch (when the target says so).

Serving kernels choose the split-KV factor from the whole batch (flash-attn's ``num_splits_heuristic``,
SGLang's ``get_num_kv_splits``, vLLM's 2D/3D switch), so a request's bits can change with its neighbours:
Dao-AILab/flash-attention#1897 ("not batch invariant unless you fix the split-KV size"),
vllm-project/vllm#53257 (1-2 bf16 ulp with batch composition), sgl-project/sglang#10425 and
flashinfer-ai/flashinfer#1675 (fixed split sizes that make it invariant). Request 0 alone is compared
bit for bit with request 0 inside batches that vary one knob at a time: the batch size (copies of its
own length), the other requests' lengths (which move the host's ``max_seqlen``), and a batch past
vLLM's 3D threshold (160 short requests). ``num_splits`` is left at the target's default (its own
heuristic).

A target claims invariance with a plain attribute, on itself or its ``decode``:
``attnum_batch_invariant = True`` (no attnum import needed). With the claim a difference fails; without
it the difference is a note giving its size (a fail under --strict). The request alone is also judged
against golden, so invariance cannot be met by a constant.
"""

from __future__ import annotations

import math

import torch

from attnum.audit.harness import Case, Probe, ProbeContext, check_tensor, raised
from attnum.audit.serving import decode_case, decode_inputs, missing
from attnum.audit.verdict import Verdict
from attnum.kernels.serving import entry

L0, H, G, D = 700, 4, 2, 64
MIXES = (("batch size 4, equal lengths", (L0,) * 3),
         ("batch size 8, lengths 5..1024", (1024, 16, 1000, 64, 300, 900, 5)),
         ("batch size 160, short neighbours", tuple(1 + (7 * i) % 8 for i in range(159))))


def claims_invariance(target) -> bool:
    """The target's (or its decode entry's) ``attnum_batch_invariant`` attribute, False when absent."""
    fn = entry(target, "decode")
    # either place counts: a class adapter's claim lands on the target, a function's on its decode
    return bool(getattr(target, "attnum_batch_invariant", False)) or bool(getattr(fn, "attnum_batch_invariant", False))


def _decode_row0(ctx: ProbeContext, label: str, q, k, v, lens) -> torch.Tensor:
    fn, dev = entry(ctx.target, "decode"), ctx.device
    o = ctx.call_entry(fn, label, q.to(dev), k.to(dev), v.to(dev),
                       cache_seqlens=torch.tensor(lens, dtype=torch.int32, device=dev))
    check_tensor(o, "decode output", (*q.shape[:-1], v.shape[-1]), q.dtype, dev)
    return o[0].detach().to("cpu", torch.float64)


def _with_neighbours(req, others):
    """Request 0 (1, ., S0, d) followed by the neighbours (B - 1, ., S1, d), padded with 0 to one S."""
    S = max(req.shape[2], others.shape[2])
    pad = [torch.nn.functional.pad(x, (0, 0, 0, S - x.shape[2])) for x in (req, others)]
    return torch.cat(pad)


def run(ctx: ProbeContext) -> list[Case]:
    no_decode = missing(ctx, "decode")
    if no_decode:
        return [no_decode]
    claim = claims_invariance(ctx.target)
    judge_ctx = ctx if claim else ctx.as_behaviour()
    q0, k0, v0, lens0 = decode_inputs(ctx, B=1, H=H, G=G, N=1, S=L0, d=D, lens=(L0,), salt=23)
    cases = [decode_case(ctx, f"request alone, L={L0}", q0, k0, v0, cache_seqlens=lens0)]
    try:
        alone = _decode_row0(ctx, "alone", q0, k0, v0, [L0])
    except Exception as exc:  # noqa: BLE001 - any exception from the kernel is its verdict
        return cases + [ctx._case("alone", raised(exc))]
    for i, (label, others) in enumerate(MIXES):
        qn, kn, vn, _ = decode_inputs(ctx, B=len(others), H=H, G=G, N=1, S=max(others), d=D, lens=others,
                                      salt=31 + 3 * i)
        try:
            row = _decode_row0(ctx, label, torch.cat([q0, qn]), _with_neighbours(k0, kn), _with_neighbours(v0, vn),
                               [L0, *others])
        except Exception as exc:  # noqa: BLE001
            cases.append(ctx._case(label, raised(exc)))
            continue
        same = bool(torch.equal(row, alone))
        diff = float((row - alone).abs().nan_to_num(nan=math.inf).max())
        scale = float(alone.abs().max()) or 1.0
        note = "" if same else (f"request 0 changes by {diff:.3g} ({diff / scale:.2e} of its scale) in a batch: "
                                + ("the target claims attnum_batch_invariant" if claim else "no invariance claimed"))
        verdict = Verdict(status="pass" if same else "fail", target_error=diff, baseline_error=0.0, bound=0.0,
                          note=note)
        cases.append(judge_ctx.finish(f"{label} vs alone, bitwise", verdict))
    return cases


PROBE = Probe(
    name="decode-batch-invariance",
    summary="one request's decode output bitwise independent of the batch around it (fails if claimed)",
    refs=("Dao-AILab/flash-attention#1897", "vllm-project/vllm#53257", "flashinfer-ai/flashinfer#1675",
          "sgl-project/sglang#10425"),
    run=run,
    kind="behaviour",
)
