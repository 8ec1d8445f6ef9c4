"""A decode step with ``is_causal=True`` must see its whole cache (bottom-right), N = 1 and N > 1.

Models pytorch/pytorch#144858: SDPA's ``is_causal`` is top-left aligned, so a single new query against a
KV cache attends to key 0 alone; karpathy/nanochat#452 / #456 keep ``is_causal=False`` at Tq = 1 for
that reason, and HuggingFace switches causal off at q_len = 1 (``is_causal = q_len > 1``). With N > 1
(speculative verify, chunked prefill) the new queries are the last N positions: query i sees keys
j <= i + L - N (flash-attn >= 2.1, vLLM, FlashInfer). Each shape is judged against golden with
bottom-right alignment; at N = 1 causal must also equal non-causal.
"""

from __future__ import annotations

from attnum.audit.harness import Case, Probe, ProbeContext
from attnum.audit.serving import decode_case, decode_inputs, missing

SHAPES = ((1, (37, 5, 1)), (4, (37, 5, 4)))  # (N, lengths)


def run(ctx: ProbeContext) -> list[Case]:
    no_decode = missing(ctx, "decode")
    if no_decode:
        return [no_decode]
    cases = []
    for n, lens in SHAPES:
        q, k, v, lens_t = decode_inputs(ctx, B=3, H=4, G=2, N=n, S=40, d=32, lens=lens, salt=n)
        cases.append(decode_case(ctx, f"N={n} L={lens} causal", q, k, v, cache_seqlens=lens_t, is_causal=True))
        if n == 1:
            cases.append(decode_case(ctx, f"N={n} L={lens} not causal", q, k, v, cache_seqlens=lens_t,
                                     is_causal=False))
    return cases


PROBE = Probe(
    name="decode-causal-alignment",
    summary="is_causal in decode is bottom-right: N = 1 sees the whole cache, N = 4 the last-N diagonal",
    refs=("pytorch/pytorch#144858", "karpathy/nanochat#456"),
    run=run,
)
