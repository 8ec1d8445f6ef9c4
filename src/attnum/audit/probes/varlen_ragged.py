"""Variable-length prefill: ragged lengths in one batch, zero-length sequences, rows with no key.

A varlen kernel (flash-attn's ``flash_attn_varlen_func``, vLLM's ``unified_attention``, SGLang's
``context_attention_fwd``, fla's ``parallel_attn`` with ``cu_seqlens``) finds each sequence's rows by its
cumulative lengths. The bugs live at the seams: a tile that runs past its sequence into the next one's
keys, a zero-length sequence (a padding slot) that shifts every later offset or is never written, a
sequence whose queries outnumber its keys (bottom-right causal: its first rows see no key), and the last
tile reading past the end of the packed tensors. Models Dao-AILab/flash-attention#2573 (a varlen split-KV
path wrote into other sequences' rows) and vllm-project/vllm#53658 (sequences past the batch in dummy
runs); the SDPA entry point cannot reach any of them (one N for the whole batch).

One call per case packs every sequence; each sequence's rows are then judged on their own against the
golden over its own keys (bottom-right causal), with the ``empty_rows`` the target declares for
``varlen``. The packed K and V are prefixes of buffers whose remaining storage holds NaN, so a read past
the last key shows (in-process only: a kernel server receives the tensors' values, not their storage).
Targets with a ``varlen`` entry point (attnum.kernels.serving) are asked; a kernel taking one
``cu_seqlens`` for queries and keys refuses the unequal cases (``unsupported``).

Then the kernel's limits: 70 sequences of 0 to 12 tokens (more than one block of 64 sequences, 408 packed
tokens: more than a tile of 128), and a batch whose longest sequence (300 keys) spans three tiles of 128,
causal and not; each of these calls is one case, its worst sequence (a kernel that dropped the packed keys
past 128 or the sequences past the 6th passed the small batches above). Last, one sequence's keys hold NaN,
in K and then in V, causal and not: its own rows are not judged, every other sequence must come out right
-- one request's NaN must never reach another's rows (the memory a tile past its sequence's end reads).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from attnum.audit.construct import behind_nan, plant, poisons
from attnum.audit.harness import Case, Probe, ProbeContext, check_tensor, raised
from attnum.audit.serving import missing, unsupported
from attnum.audit.verdict import SEVERITY
from attnum.kernels.serving import empty_rows_of

H, G, D = 4, 2, 64
# (label, query lengths, key lengths, causal); every length list is one batch
CASES = (
    ("ragged", (5, 0, 19, 1, 64, 33), (5, 0, 19, 1, 64, 33), False),
    ("ragged causal", (5, 0, 19, 1, 64, 33), (5, 0, 19, 1, 64, 33), True),
    ("empty first and last", (0, 6, 70, 0), (0, 6, 70, 0), True),
    ("queries the last of their keys", (1, 4, 7, 16), (9, 2, 7, 80), True),
    ("a sequence with no keys", (3, 2, 5), (0, 5, 5), False),
)


# more sequences than a block of 64, more keys than a tile of 128 (issue-42's kernel dropped packed keys past
# 128 and sequences past the 6th), one sequence past two tiles of 128: (label, lengths (queries = keys), causal)
MANY = tuple((7 * b) % 13 for b in range(70))  # 0..12, zeros included: 70 sequences, 408 tokens
SCALED = (
    ("70 sequences", MANY, True),
    ("long and short", (300, 3, 129, 0, 17), False),
    ("long and short causal", (300, 3, 129, 0, 17), True),
)
POISONED = ((7, 40, 0, 25, 130), 1)  # (lengths, the sequence whose keys hold NaN)


def packed(ctx: ProbeContext, q_lens, k_lens, salt: int):
    """q (Tq, H, d), k (Tk, G, d), v (Tk, G, d) in ctx.dtype (5x and 3x scaled: tail garbage shows), and
    cu_seqlens_q, cu_seqlens_k (B + 1,) int32."""
    Tq, Tk = sum(q_lens), sum(k_lens)
    q, k, v = ctx.cast(5 * ctx.randn(Tq, H, D, salt=salt), 3 * ctx.randn(Tk, G, D, salt=salt + 1),
                       ctx.randn(Tk, G, D, salt=salt + 2))

    def cu(lens):
        return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)

    return q, behind_nan(k), behind_nan(v), cu(q_lens), cu(k_lens)


def run(ctx: ProbeContext) -> list[Case]:
    no_varlen = missing(ctx, "varlen")
    if no_varlen:
        return [no_varlen]
    # the varlen protocol: bottom-right causal, the empty rows declared for this entry point
    vctx = replace(ctx, causal_alignment="bottom_right", empty_rows=empty_rows_of(ctx.target, "varlen"))
    cases = []
    for i, (label, q_lens, k_lens, causal) in enumerate(CASES):
        cases += _case(vctx, label, q_lens, k_lens, causal, salt=160 + 3 * i)
    for i, (label, lens, causal) in enumerate(SCALED):
        cases += _case(vctx, label, lens, lens, causal, salt=190 + 3 * i, one_case=True)
    for which in poisons():
        for causal in (False, True):
            cases += _case(vctx, f"NaN in {which} of sequence {POISONED[1]}" + (" causal" if causal else ""),
                           POISONED[0], POISONED[0], causal, salt=200, poison=(POISONED[1], which))
    return cases


def _case(ctx: ProbeContext, label: str, q_lens, k_lens, causal: bool, salt: int, *, one_case: bool = False,
          poison: tuple[int, str] | None = None) -> list[Case]:
    """One call packing every sequence; each sequence's rows judged on their own (``one_case``: the worst
    sequence is the case). ``poison`` = (b, "K" / "V"): sequence b's keys hold NaN there and its rows are not
    judged; every other sequence must come out right."""
    q, k, v, cu_q, cu_k = packed(ctx, q_lens, k_lens, salt)
    call_k, call_v = k, v
    if poison is not None:
        b, which = poison
        dead = torch.zeros(k.shape[0], dtype=torch.bool)
        dead[int(cu_k[b]):int(cu_k[b + 1])] = True
        kt, vt = plant(k.transpose(0, 1), v.transpose(0, 1), dead, which)  # (G, Tk, d): dead over the tokens
        call_k, call_v = behind_nan(kt.transpose(0, 1).contiguous()), behind_nan(vt.transpose(0, 1).contiguous())
    tag = f"{label}: q={_short(q_lens)} k={_short(k_lens)}"
    dev = ctx.device
    try:
        out = ctx.call_entry(ctx.target.varlen, tag, q.to(dev), call_k.to(dev), call_v.to(dev),
                             cu_seqlens_q=cu_q.to(dev), cu_seqlens_k=cu_k.to(dev), max_seqlen_q=max(q_lens),
                             max_seqlen_k=max(k_lens), is_causal=causal, scale=None)
        out = check_tensor(out, "varlen output", (q.shape[0], H, D), q.dtype, dev).detach().to("cpu", torch.float64)
    except NotImplementedError as exc:
        return [ctx._case(tag, unsupported(tag, f"{exc}".splitlines()[0][:300]).verdict)]
    except Exception as exc:  # noqa: BLE001 - any exception from the kernel (or a wrong output) is its verdict
        return [ctx._case(tag, raised(exc))]
    judge = replace(ctx, monitor=None) if one_case else ctx
    cases = []
    for b, (q0, q1, k0, k1) in enumerate(zip(cu_q[:-1].tolist(), cu_q[1:].tolist(), cu_k[:-1].tolist(),
                                             cu_k[1:].tolist(), strict=True)):
        if q1 == q0 or (poison is not None and b == poison[0]):
            continue  # no rows to judge (a zero-length sequence must only not disturb its neighbours)
        one = [x.transpose(0, 1).unsqueeze(0) for x in (q[q0:q1], k[k0:k1], v[k0:k1])]  # (1, heads, L, d)
        o = out[q0:q1].transpose(0, 1).unsqueeze(0)
        cases.append(judge.check(f"{tag} seq {b} (N={q1 - q0}, S={k1 - k0})", *one, is_causal=causal,
                                 enable_gqa=True, out=o))
    if one_case and cases:
        w = max(cases, key=lambda c: (SEVERITY[c.verdict.status], c.verdict.ratio))
        return [ctx._case(w.label, w.verdict)]
    return cases


def _short(lens) -> str:
    """A batch's lengths as printed in a label: all of them up to 8, else the count and the total."""
    lens = tuple(lens)
    return str(lens) if len(lens) <= 8 else f"({len(lens)} sequences, {sum(lens)} tokens)"


PROBE = Probe(
    name="varlen-ragged",
    summary="varlen prefill: ragged lengths in one batch, zero-length sequences, queries with no key",
    refs=("Dao-AILab/flash-attention#2573", "vllm-project/vllm#53658"),
    run=run,
)
