"""What the serving probes share: the target's merge / decode entry points, their references, the verdict.

The protocol a target follows is :mod:`attnum.kernels.serving` (``merge_state``, ``decode``,
``lse_base``, ``empty_lse``). A target without the entry point a probe needs gets one "unsupported"
case saying so. References:

- merge: golden = :func:`attnum.attention.serving.merge.merge_states` in fp64 on the values the target received,
  in the target's declared base and empty convention; baseline = the same merge in fp32 with the output
  rounded to the audited dtype (what a straightforward kernel does);
- decode: golden = :func:`attnum.attention.serving.decode.decode_reference` (float64, bottom-right causal);
  baseline = the core's ``baseline_attention`` per sequence under FA's same-precision policy
  (:func:`attnum.audit.reference.baseline_policy`).

Both go through :func:`attnum.audit.verdict.judge` (FlashAttention's rule), with one addition: where the
golden value is infinite (the LSE of an empty state) the target must give exactly that infinity, so a
+inf LSE under a -inf convention fails.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from attnum.attention.baseline import baseline_attention
from attnum.attention.serving.decode import decode_reference
from attnum.attention.serving.merge import State, merge_states
from attnum.audit.harness import Case, ProbeContext, WrongOutput, check_tensor, raised
from attnum.audit.reference import baseline_policy
from attnum.audit.verdict import SEVERITY, Verdict, judge
from attnum.kernels.conventions import feature
from attnum.kernels.serving import conventions, empty_rows_of, entry, splits
from attnum.numerics.formats import get_format

# The poison an output buffer holds before the call: a *signalling* NaN with an odd payload. IEEE
# arithmetic never returns a signalling NaN (an operation on one returns it quieted), so an element that
# still holds these bits was never written.
POISON_BITS = {torch.bfloat16: (0x7FA5, torch.int16), torch.float16: (0x7DA5, torch.int16),
               torch.float32: (0x7FA5A5A5, torch.int32)}

FP32 = get_format("fp32")
NAN = math.nan


def unsupported(label: str, why: str) -> Case:
    return Case(label=label, verdict=Verdict(status="unsupported", target_error=NAN, baseline_error=NAN, bound=NAN,
                                             note=why))


def missing(ctx: ProbeContext, name: str) -> Case | None:
    """The "unsupported" case when the target has no ``name`` entry point, else None."""
    if entry(ctx.target, name) is None:
        return unsupported(name, f"target has no {name} entry point (protocol: attnum.kernels.serving)")
    return None


def missing_both(ctx: ProbeContext) -> tuple[Case | None, Case | None, Case | None]:
    """(no_merge, no_decode, the one case to return when the target has neither)."""
    no_merge, no_decode = missing(ctx, "merge_state"), missing(ctx, "decode")
    neither = unsupported("serving", "target has no merge_state or decode entry point (protocol: "
                          "attnum.kernels.serving)") if no_merge and no_decode else None
    return no_merge, no_decode, neither


def _judge(t, g, b, fmt, ctx: ProbeContext, what: str) -> Verdict:
    t, g = t.detach().to("cpu", torch.float64), g.double()
    nan = torch.isnan(g)  # a declared NaN output (empty rows): the target must be NaN there too
    if bool(nan.any()):
        finite_there = nan & ~torch.isnan(t)
        if bool(finite_there.any()):
            return Verdict(status="fail", target_error=math.inf, baseline_error=0.0, bound=0.0,
                           note=f"{what}: finite output in {int(finite_there.sum())} element(s) declared NaN")
        t, g, b = t.masked_fill(nan, 0.0), g.masked_fill(nan, 0.0), b.double().masked_fill(nan, 0.0)
    inf = torch.isinf(g)
    wrong = inf & (t != g)
    if bool(wrong.any()):
        got = t[wrong][0].item()
        return Verdict(status="fail", target_error=math.inf, baseline_error=0.0, bound=0.0,
                       note=f"{what}: {got} in {int(wrong.sum())} element(s) where {g[wrong][0].item()} is expected")
    v = judge(t.masked_fill(inf, 0.0), g.masked_fill(inf, 0.0), b.double().masked_fill(inf, 0.0), fmt=fmt, k=ctx.k,
              floor_ulps=ctx.floor_ulps)
    return replace(v, note=f"{what}: {v.note}" if v.note else what)


def worst(*vs: Verdict) -> Verdict:
    return max(vs, key=lambda v: (SEVERITY[v.status], v.ratio))


def poisoned(shape, dtype: torch.dtype, device) -> torch.Tensor:
    """An output buffer full of the poison NaN (:data:`POISON_BITS`)."""
    bits, itype = POISON_BITS[dtype]
    return torch.full(tuple(shape), bits if bits < 2 ** (8 * torch.tensor([], dtype=itype).element_size() - 1)
                      else bits - 2 ** 32, dtype=itype, device=device).view(dtype)


def unwritten(*pairs) -> Verdict | None:
    """The ``unwritten`` verdict when any (output, what) still holds the poison somewhere, else None."""
    for out, what in pairs:
        if out is None or out.dtype not in POISON_BITS:
            continue
        bits, itype = POISON_BITS[out.dtype]
        left = out.detach().to("cpu").contiguous().view(itype) == torch.tensor(bits, dtype=torch.int64).to(itype)
        if bool(left.any()):
            where = left.reshape(-1, left.shape[-1]).any(-1) if left.dim() > 1 else left
            return Verdict(status="unwritten", target_error=NAN, baseline_error=NAN, bound=NAN,
                           note=f"{what}: {int(left.sum())} element(s) in {int(where.sum())} row(s) never written "
                                "(the poison the buffer held before the call)")
    return None


def buffer_check(kw: dict, *pairs) -> Verdict | None:
    """For a target that ``accepts_out``: the poison check reads the *buffers* it was handed (``kw``'s
    ``out`` / ``lse_out``), not only what it returned, and the returned tensor must hold exactly what the
    buffer holds. A target that leaves the buffer poisoned and returns a fresh tensor is ``unwritten``;
    one that writes the buffer and returns something else fails. ``pairs``: (returned, kw name, what)."""
    left = unwritten(*((kw.get(name), what) for _, name, what in pairs if name in kw),
                     *((got, what) for got, _, what in pairs))
    if left is not None:
        return left
    for got, name, what in pairs:
        buf = kw.get(name)
        if buf is None or got is None:
            continue
        a, b = got.detach().to("cpu"), buf.detach().to("cpu")
        same = (a == b) | (torch.isnan(a) & torch.isnan(b))
        if not bool(same.all()):
            return Verdict(status="fail", target_error=math.inf, baseline_error=0.0, bound=0.0,
                           note=f"{what}: the returned tensor differs from the {name}= buffer in "
                                f"{int((~same).sum())} element(s) (accepts_out: the buffer is the output)")
    return None


def merge_case(ctx: ProbeContext, label: str, a: State, b: State) -> Case:
    """Verdict for ``target.merge_state(a, b)``: o (T, H, dv) in ctx.dtype, lse (T, H) float32. A target
    that ``accepts_out`` gets poisoned ``out`` / ``lse_out`` buffers."""
    fn = entry(ctx.target, "merge_state")
    base, empty_lse = conventions(ctx.target)
    o_a, o_b = a.o.to(ctx.dtype), b.o.to(ctx.dtype)
    l_a, l_b = a.lse.float(), b.lse.float()
    dev = ctx.device
    kw = {}
    if getattr(ctx.target, "accepts_out", False):
        kw = {"out": poisoned(o_a.shape, ctx.dtype, dev), "lse_out": poisoned(l_a.shape, torch.float32, dev)}
    try:
        res = ctx.call_entry(fn, label, o_a.to(dev), l_a.to(dev), o_b.to(dev), l_b.to(dev), **kw)
        o, lse = _pair(res, "merge_state")
        check_tensor(o, "merged o", o_a.shape, ctx.dtype, dev)
        check_tensor(lse, "merged lse", l_a.shape, torch.float32, dev)
    except Exception as exc:  # noqa: BLE001 - any exception from the kernel (or a wrong output) is its verdict
        return ctx._case(label, raised(exc))
    left = buffer_check(kw, (o, "out", "merged o"), (lse, "lse_out", "merged lse"))
    if left is not None:
        return ctx.finish(label, left)
    states = [(o_a, l_a), (o_b, l_b)]
    gold = merge_states(states, policy="fp64", lse_base=base, empty_lse=empty_lse)
    base_m = merge_states(states, policy=f"fp32,out={ctx.fmt.name}", lse_base=base, empty_lse=empty_lse)
    v = worst(_judge(o, gold.o, base_m.o, ctx.fmt, ctx, "o"), _judge(lse, gold.lse, base_m.lse, FP32, ctx, "lse"))
    return ctx.finish(label, v)


def _pair(res: object, name: str) -> tuple[object, object]:
    if not (isinstance(res, tuple | list) and len(res) == 2):
        raise WrongOutput(f"{name} returned {type(res).__name__}, expected a pair (o, lse)")
    return res[0], res[1]


def baseline_decode(q, k, v, lens, *, is_causal: bool, scale=None, ctx: ProbeContext | None = None) -> torch.Tensor:
    """Same-precision plain attention per sequence on its first L keys (bottom-right causal); with ``ctx`` whose
    target runs both GEMMs on FP8 operands, a kernel of that design (attnum.audit.quantised.baseline)."""
    from attnum.audit import quantised

    fp8 = ctx is not None and quantised.fp8_operands(ctx.target)
    policy = None if fp8 else baseline_policy(q.dtype)
    out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=torch.float64)
    for b, L in enumerate(lens):
        one = (q[b:b + 1], k[b:b + 1, :, :L], v[b:b + 1, :, :L])
        if fp8:
            out[b] = quantised.baseline(ctx.target, ctx.fmt, *one, is_causal=is_causal, scale=scale,
                                        causal_alignment="bottom_right", arch=ctx.arch)[0]
        else:
            out[b] = baseline_attention(*one, is_causal=is_causal, causal_alignment="bottom_right", scale=scale,
                                        policy=policy)[0].double()
    return out


def empty_decode_rows(lens, N: int, is_causal: bool) -> torch.Tensor:
    """Bool (B, 1, N, 1): query rows with no key (L = 0, or bottom-right causal with i < N - L)."""
    rows = torch.zeros(len(lens), 1, N, 1, dtype=torch.bool)
    for b, L in enumerate(lens):
        if L == 0:
            rows[b] = True
        elif is_causal and N > L:
            rows[b, 0, :N - L] = True
    return rows


def decode_call(ctx: ProbeContext, label: str, q, k, v, *, cache_seqlens, block_table=None, pages=None,
                num_splits: int = 1, max_seqlen=None, is_causal: bool = True, check_lse: bool = False,
                **features):
    """``target.decode`` on q (B, H, N, d) and the contiguous cache k, v (B, G, S, d) in ctx.dtype, or, with
    ``block_table``, on ``pages`` = (k_pages, v_pages); ``features``: score-feature keywords (``softcap=``,
    ``window_size=``, ``sinks=``) for an entry that declares them. Returns (o, lse or None, lens) checked
    for type, shape and the ``out=`` buffers of a target that ``accepts_out`` -- or the Case that ends
    here (``single_query_only`` with N > 1, an exception, a wrong or unwritten output)."""
    fn = entry(ctx.target, "decode")
    dev = ctx.device
    if q.shape[2] > 1 and getattr(ctx.target, "single_query_only", False):
        return ctx._case(label, unsupported(label, "the target declares single_query_only (decode N = 1)").verdict)
    lens = [int(x) for x in torch.as_tensor(cache_seqlens).tolist()]
    kc, vc = (k, v) if block_table is None else pages
    kw = {}
    if getattr(ctx.target, "accepts_out", False):
        kw["out"] = poisoned((*q.shape[:-1], v.shape[-1]), q.dtype, dev)
        if check_lse:
            kw["lse_out"] = poisoned(q.shape[:-1], torch.float32, dev)
    try:
        res = ctx.call_entry(
            fn, label, q.to(dev), kc.to(dev), vc.to(dev),
            cache_seqlens=torch.tensor(lens, dtype=torch.int32, device=dev),
            block_table=None if block_table is None else block_table.to(dev),
            num_splits=splits(ctx.target, num_splits), max_seqlen=max_seqlen, is_causal=is_causal,
            return_lse=check_lse, **kw, **features)
        o, lse = _pair(res, "decode") if check_lse else (res, None)
        check_tensor(o, "decode output", (*q.shape[:-1], v.shape[-1]), q.dtype, dev)
        if check_lse:
            check_tensor(lse, "decode lse", q.shape[:-1], torch.float32, dev)
    except Exception as exc:  # noqa: BLE001 - any exception from the kernel (or a wrong output) is its verdict
        return ctx._case(label, raised(exc))
    left = buffer_check(kw, (o, "out", "decode output"), (lse, "lse_out", "decode lse"))
    if left is not None:
        return ctx.finish(label, left)
    return o, lse, lens


def decode_case(ctx: ProbeContext, label: str, q, k, v, *, cache_seqlens, block_table=None, pages=None,
                num_splits: int = 1, max_seqlen=None, is_causal: bool = True, check_lse: bool = False,
                out: list | None = None, baseline_kv=None) -> Case:
    """Verdict for ``target.decode`` (:func:`decode_call`): golden and baseline read k, v (B, G, S, d), the
    first L keys of each sequence. ``out``: a list the target's output is appended to (for invariance
    checks). The target's declarations (attnum.kernels.serving) apply: ``single_query_only`` (N > 1 is
    unsupported), ``split_rule``, the decode entry's ``empty_rows``, ``accepts_out`` (poisoned buffers,
    ``unwritten``). ``baseline_kv``: the (k, v) the baseline attends to instead of k, v (a quantised cache); golden
    then reads k, v as given, not as the target's declared cache holds them (the probe judges the writer)."""
    got = decode_call(ctx, label, q, k, v, cache_seqlens=cache_seqlens, block_table=block_table, pages=pages,
                      num_splits=num_splits, max_seqlen=max_seqlen, is_causal=is_causal, check_lse=check_lse)
    if isinstance(got, Case):
        return got
    o, lse, lens = got
    base, empty_lse = conventions(ctx.target)
    N = q.shape[2]
    if out is not None:
        out.append(o.detach().to("cpu", torch.float64))
    # the values the kernel computed with (a declared FP8 cache and queries: attnum.audit.quantised); a probe that
    # judges the cache writer itself (baseline_kv) keeps golden on the cache as it was given
    rq, rk, rv = ctx.received(q, k, v)
    gk, gv = (rk, rv) if baseline_kv is None else (k, v)
    g_o, g_lse = decode_reference(rq, gk, gv, cache_seqlens=torch.tensor(lens), is_causal=is_causal, lse_base=base,
                                  return_lse=True)
    if baseline_kv is None:
        b_o = baseline_decode(rq, rk, rv, lens, is_causal=is_causal, ctx=ctx)
    else:  # the probe's own cache (values an FP8 cache may not hold): the ordinary same-precision baseline
        b_o = baseline_decode(ctx.cast(rq)[0], *baseline_kv, lens, is_causal=is_causal)
    empty_rule = empty_rows_of(ctx.target, "decode")
    empty = empty_decode_rows(lens, N, is_causal)
    if empty_rule == "nan":
        g_o, b_o = g_o.masked_fill(empty, NAN), b_o.masked_fill(empty, NAN)
    elif empty_rule == "mean-v":
        raise_mean = "decode empty_rows='mean-v' is not judged (declare zeros, nan or any)"
        return ctx._case(label, unsupported(label, raise_mean).verdict)
    elif empty_rule == "any":
        o = torch.where(empty.to(o.device), g_o.to(o.device, o.dtype), o)
        b_o = torch.where(empty, g_o, b_o)
    verdict = _judge(o, g_o, b_o, ctx.fmt, ctx, "o")
    if check_lse:
        g_lse = g_lse.masked_fill(g_lse == -math.inf, empty_lse)
        b_lse = g_lse.float().double()  # the LSE is formed in fp32 by every kernel: one fp32 rounding
        verdict = worst(verdict, _judge(lse, g_lse, b_lse, FP32, ctx, "lse"))
    return ctx.finish(label, verdict)


def state(o: torch.Tensor, lse) -> State:
    """A state (T, H, dv) / (T, H) from float64 o and an LSE value or tensor."""
    lse_t = lse if isinstance(lse, torch.Tensor) else torch.full(o.shape[:-1], float(lse), dtype=torch.float64)
    return State(o, lse_t)


def latent(ctx: ProbeContext) -> bool:
    """Whether the target's decode takes an MLA latent cache (``attnum_mla``): its values are its keys' first
    dv dims, one memory, so a decode probe hands it v = k (dv = d) and poisons K and V together."""
    return feature(ctx.target, "mla")


def decode_inputs(ctx: ProbeContext, *, B: int, H: int, G: int, N: int, S: int, d: int, lens, salt: int,
                  pad: float = 0.0, pad_v: float | None = None):
    """q (B, H, N, d), k, v (B, G, S, d) in ctx.dtype, seeded; slots past each length hold ``pad`` in K and
    ``pad_v`` (default ``pad``) in V (NaN in the padding probes: any read of it shows). For an MLA target
    (:func:`latent`) v is k itself (its latent), padded with NaN where either pad is."""
    pad_v = pad if pad_v is None else pad_v
    one = latent(ctx)
    if one:  # one memory: poisoned where either would be
        pad = pad_v = pad if math.isnan(pad) else pad_v
    q = ctx.randn(B, H, N, d, salt=salt)
    k = ctx.randn(B, G, S, d, salt=salt + 1)
    v = ctx.randn(B, G, S, d, salt=salt + 2)
    for b, L in enumerate(lens):
        k[b, :, L:] = pad
        v[b, :, L:] = pad_v
    q, k, v = ctx.cast(q, k, v)
    return q, k, k.clone() if one else v, torch.tensor(list(lens))
