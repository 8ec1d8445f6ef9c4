"""Serving-side audit targets: one object that may be an SDPA kernel, a state merge and a decode kernel.

The auditor's serving probes (split-KV merges, decode with a KV cache, paged KV) need entry points the
SDPA signature does not have. A :class:`ServingTarget` carries them as attributes; a probe asks for the
one it needs and reports "unsupported" when it is absent. Any callable with these attributes qualifies
(a function object with ``fn.merge_state = ...`` works too). The protocol:

- ``__call__(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
  enable_gqa=False)``: SDPA, or ``NotImplementedError`` for a kernel that is no attention (a merge);
- ``merge_state(o_a, lse_a, o_b, lse_b) -> (o, lse)``: FlashInfer's ``merge_state`` layout, o (T, H, dv)
  in the audited dtype, lse (T, H) float32, in base ``lse_base``;
- ``merge_states(o_n, lse_n) -> (o, lse)``: the merge of n states in the order given, o_n (n, T, H, dv) in the
  audited dtype, lse_n (n, T, H) float32 (FlashInfer's ``merge_states``, a ring's chain of per-block updates);
  the chain probe uses it where present, else chains ``merge_state``;
- ``decode(q, k_cache, v_cache, *, cache_seqlens, block_table=None, num_splits=1, max_seqlen=None,
  is_causal=True, scale=None, return_lse=False) -> o | (o, lse)``: q (B, H, N, d) and o (B, H, N, dv) in
  attnum's layout; without ``block_table`` the cache is (B, G, S, d), with it a page pool
  (n_pages, P, G, d) as :mod:`attnum.attention.serving.paged`; lse (B, H, N) float32 in ``lse_base``; ``is_causal`` with
  the kernel's own alignment (the decode probes check it is bottom-right: a decode query sees its cache);
  a caller that leaves ``num_splits`` out asks for the kernel's own split choice (its heuristic);
- ``varlen(q, k, v, *, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, is_causal=False, scale=None) -> o``:
  variable-length prefill in flash-attn's ``flash_attn_varlen_func`` layout: sequence b's queries are rows
  ``cu_seqlens_q[b]:cu_seqlens_q[b + 1]`` of q (Tq, H, d), its keys rows ``cu_seqlens_k[b]:cu_seqlens_k[b + 1]`` of
  k (Tk, G, d) and v (Tk, G, dv); o (Tq, H, dv) in q's dtype; ``cu_seqlens_*`` (B + 1,) int32, non-decreasing from
  0 (a zero-length sequence repeats an offset); causal is bottom-right (a sequence's queries are the last of its
  keys: flash-attn >= 2.1, every serving kernel); a row with no key holds the ``empty_rows`` declared for
  ``varlen`` (zeros by default). A kernel that takes one ``cu_seqlens`` for both raises NotImplementedError
  when they differ (those cases are ``unsupported``);
- ``attnum_batch_invariant`` (optional, on the target or its ``decode``): True when the target claims a
  request's decode output does not depend on the rest of the batch (the decode-batch-invariance probe);
- ``lse_base``: ``"e"`` or 2; ``empty_lse``: the LSE the target uses for a state with no key (-inf, +inf as
  FA2's non-split forward, or a finite sentinel <= -1000 such as FlashInfer's old -5e4: an LSE at or below it
  is empty). The merge probes write empty states in the declared base and convention.

Declared attributes (plain Python values; an adapter needs no attnum import -- a class whose attributes
and static methods say all this is a target, see :func:`declared_target` and docs/audit.md, "The serving
protocol"):

- ``causal_alignment``: ``"top_left"`` / ``"bottom_right"`` of the SDPA entry point;
- ``empty_rows``: the output of a query row with no key, one of ``zeros``, ``nan``, ``mean-v``, ``any``;
  a string for every entry point or a dict by entry point (``{"sdpa": "zeros", "decode": "nan"}``);
- ``kv_cache_dtype`` (None, ``"e4m3fn"``, ``"e5m2"``) with ``k_scale`` / ``v_scale`` (the per-tensor
  scales the cache is quantised with): every entry point that reads K and V reads them from that cache, and
  receives them in the audited dtype and quantises them itself, as a cache writer would (x / scale, clamped
  to the format, rounded: :func:`attnum.attention.lowbit.qformats.per_tensor_fp8`); the audit's references
  read the values the cache holds (:mod:`attnum.audit.quantised`);
- ``q_scale`` (None, or a per-tensor scale; needs ``kv_cache_dtype``): the queries are quantised to the
  cache's format at that scale before the kernel, as vLLM's attention layer does for an FP8 cache
  (``QuantFP8``, static per tensor), so both of its GEMMs run on FP8 operands;
- ``split_rule``: how ``num_splits`` is honoured: ``"fixed-splits"`` (that many splits),
  ``"fixed-size"`` (the kernel picks its own split size; ``num_splits`` is a hint), ``"power-of-two"``
  (rounded up to a power of two);
- ``single_query_only``: ``decode`` takes N = 1 query per sequence only (cases with N > 1 are
  ``unsupported`` without a call);
- ``accepts_out``: ``decode`` and ``merge_state`` take ``out=`` (and ``lse_out=``) buffers to write
  into. The auditor then poisons them (a NaN with a payload no arithmetic makes) and an element still
  holding the poison after the call is ``unwritten``;
- ``emulation``: a policy naming the kernel's designed arithmetic (``"sage1"`` for SageAttention's INT8
  Triton kernel): its SDPA cases are judged against attnum's emulation of it (attnum.audit.emulated);
- the score features ``attnum_softcap``, ``attnum_window``, ``attnum_sinks``, ``attnum_block_select``, ``attnum_mla``
  (attnum.kernels.conventions; ``ServingTarget(features=...)``): the SDPA and ``decode`` entry points then take
  ``softcap=`` / ``window_size=`` / ``sinks=`` (or, declared on one entry point only, that one).

Adapters translate their package's layout to this one inside these methods; the probes never see it.
:func:`reference` builds attnum's own serving target (the registry's ``decode:POLICY`` family), which
passes every serving probe.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from attnum.errors import bad_value
from attnum.kernels import conventions as _conv

NEG_INF = -math.inf
ENTRIES = ("sdpa", "decode", "merge_state", "merge_states", "varlen")
SPLIT_RULES = ("fixed-splits", "fixed-size", "power-of-two")
KV_CACHE_DTYPES = ("e4m3fn", "e5m2")
DECLARED = ("causal_alignment", "empty_rows", "lse_base", "empty_lse", "kv_cache_dtype", "k_scale", "v_scale",
            "q_scale", "split_rule", "single_query_only", "accepts_out", "emulation", "attnum_batch_invariant")
"""The plain attributes :func:`declared_target` reads (module docstring)."""


def _empty_rows(value, name: str) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, str):
        return dict.fromkeys(ENTRIES, _conv.empty_rows(value, param=f"{name}.empty_rows"))
    if not isinstance(value, dict) or any(k not in ENTRIES for k in value):
        raise bad_value(f"{name}.empty_rows", value, f"a convention or a dict keyed by {', '.join(ENTRIES)}")
    return {k: _conv.empty_rows(v, param=f"{name}.empty_rows[{k!r}]") for k, v in value.items()}


def _kv_dtype(value, name: str) -> str | None:
    if value is None:
        return None
    from attnum.numerics.formats import get_format

    try:
        fmt = get_format(str(value).replace("fp8_", ""), param=f"{name}.kv_cache_dtype").name
    except Exception:  # noqa: BLE001 - any unknown name is the same one-line error
        fmt = None
    if fmt not in KV_CACHE_DTYPES:
        raise bad_value(f"{name}.kv_cache_dtype", value, f"None or one of {', '.join(KV_CACHE_DTYPES)}")
    return fmt


def declared_target(obj, name: str) -> ServingTarget:
    """A :class:`ServingTarget` from a plain object (a class, a module, a namespace) whose attributes
    follow the protocol: entry points ``sdpa`` / ``decode`` / ``merge_state`` (functions or static
    methods) and the :data:`DECLARED` values. Nothing in ``obj`` needs attnum."""
    entries = {e: getattr(obj, e, None) for e in ENTRIES}
    if not any(callable(f) for f in entries.values()):
        raise bad_value("target", name, "an object with at least one of sdpa, decode, merge_state, merge_states, varlen")
    kw = {a: getattr(obj, a) for a in DECLARED if getattr(obj, a, None) is not None}
    # the score features as the docs declare them on any target (``attnum_softcap = True``), validated here
    features = tuple(f for f in _conv.FEATURES if _conv.feature(obj, f, param=name))
    return ServingTarget(name, **{e: f for e, f in entries.items() if callable(f)}, **kw, features=features)


def empty_rows_of(target, entry: str) -> str:
    """The empty-row output ``target`` declares for ``entry`` ("zeros" when undeclared)."""
    declared = getattr(target, "empty_rows", None)
    if isinstance(declared, dict):
        return declared.get(entry, _conv.DEFAULT_EMPTY_ROWS)
    return _conv.DEFAULT_EMPTY_ROWS


def splits(target, n: int) -> int:
    """``num_splits`` as the target's split rule takes it."""
    if getattr(target, "split_rule", "fixed-splits") == "power-of-two":
        return 1 << max(0, (int(n) - 1).bit_length())
    return int(n)


class ServingTarget:
    """An audit target with optional ``merge_state`` and ``decode`` entry points (module docstring)."""

    def __init__(self, name: str, *, sdpa: Callable | None = None, merge_state: Callable | None = None,
                 decode: Callable | None = None,
                 merge_states: Callable | None = None, varlen: Callable | None = None, lse_base: object = "e", empty_lse: float = NEG_INF,
                 causal_alignment: str | None = None, empty_rows: str | dict | None = None,
                 kv_cache_dtype: str | None = None, k_scale: float = 1.0, v_scale: float = 1.0,
                 q_scale: float | None = None, split_rule: str = "fixed-splits", single_query_only: bool = False, accepts_out: bool = False,
                 emulation: str | None = None, attnum_batch_invariant: bool = False,
                 features: tuple[str, ...] = ()):
        from attnum.attention.serving.merge import empty_convention, parse_lse_base

        self.__name__ = self.name = name
        self._sdpa = sdpa
        self.attnum_sdpa = sdpa is not None  # a merge- or decode-only target: its SDPA cases are one "unsupported"; read
        # by attention_conventions_apply and the feature probes (also across a kernel server)
        if merge_state is not None:
            self.merge_state = merge_state
        if decode is not None:
            self.decode = decode
        if merge_states is not None:
            self.merge_states = merge_states
        if varlen is not None:
            self.varlen = varlen
        self.lse_base = parse_lse_base(lse_base)
        self.empty_lse = empty_convention(empty_lse)
        self.empty_rows = _empty_rows(empty_rows, name)
        if causal_alignment is not None:
            self.attnum_causal_alignment = _conv.causal_alignment(causal_alignment,
                                                                        param=f"{name}.causal_alignment")
        if "sdpa" in self.empty_rows:
            self.attnum_empty_rows = self.empty_rows["sdpa"]
        if emulation is not None:
            self.emulation = self.attnum_emulation = _conv.check_emulation(emulation, param=f"{name}.emulation")
        self.kv_cache_dtype = _kv_dtype(kv_cache_dtype, name)
        for attr, val in (("k_scale", k_scale), ("v_scale", v_scale)):
            if not (isinstance(val, (int, float)) and not isinstance(val, bool) and math.isfinite(val) and val > 0):
                raise bad_value(f"{name}.{attr}", val, "a finite positive per-tensor scale")
            setattr(self, attr, float(val))
        if q_scale is not None:
            if not (isinstance(q_scale, (int, float)) and not isinstance(q_scale, bool) and math.isfinite(q_scale)
                    and q_scale > 0):
                raise bad_value(f"{name}.q_scale", q_scale, "None or a finite positive per-tensor scale")
            if self.kv_cache_dtype is None:
                raise bad_value(f"{name}.q_scale", q_scale, "None without a kv_cache_dtype (queries are quantised "
                                                            "to the cache's format)")
            q_scale = float(q_scale)
        self.q_scale = q_scale
        if split_rule not in SPLIT_RULES:
            raise bad_value(f"{name}.split_rule", split_rule, f"one of {', '.join(SPLIT_RULES)}")
        self.split_rule = split_rule
        for feat in features:  # score features its SDPA entry point takes (attnum.kernels.conventions)
            if feat not in _conv.FEATURES:
                raise bad_value(f"{name}.features", feat, f"one of {', '.join(_conv.FEATURES)}")
            setattr(self, _conv.FEATURES[feat], True)
        # attnum_batch_invariant: a claim on the adapter class itself counts (not only on its decode)
        for attr, val in (("single_query_only", single_query_only), ("accepts_out", accepts_out),
                          ("attnum_batch_invariant", attnum_batch_invariant)):
            if not isinstance(val, bool):
                raise bad_value(f"{name}.{attr}", val, "True or False")
            setattr(self, attr, val)

    def __call__(self, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                 enable_gqa=False, **features):
        if self._sdpa is None:
            raise NotImplementedError(f"{self.name} is not an attention kernel (no SDPA entry point)")
        # softcap= / window_size= / sinks=: asked only of a target that declares them (features=)
        return self._sdpa(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                          scale=scale, enable_gqa=enable_gqa, **features)

    def __repr__(self) -> str:
        parts = [p for p in ("merge_state", "merge_states", "decode", "varlen") if hasattr(self, p)]
        return f"ServingTarget({self.name!r}, {'+'.join(['sdpa'] * (self._sdpa is not None) + parts)})"


def reference_policy(policy: str, fmt: str) -> str:
    """The policy ``decode:POLICY`` runs with ``fmt`` inputs: POLICY itself, or a POLICY naming no format
    (``fa2,mma=sm90``) at ``fmt`` (``fa2:bf16,mma=sm90``)."""
    from attnum.numerics.policy import NAMED

    head = policy.split(",")[0]
    if not (head.strip().lower() in NAMED and ":" not in head):
        return policy
    name, _, rest = policy.partition(",")
    return f"{name}:{fmt}" + (f",{rest}" if rest else "")


REFERENCE_FORMATS = ("bf16", "fp16", "fp32")  # the input formats a serving target is audited in


def check_reference(policy: str, formats: tuple[str, ...] | None = None, param: str = "target") -> None:
    """Refuse, before any work, a ``decode:POLICY`` that some of its paths could not run with inputs of
    ``formats``: the policy at each format as ``compare`` parses it (an ``mma`` operand pair no instruction
    takes, ...), and one the decode paths run (no low-bit scheme: those exist only as the prefill).
    ``formats`` None: refused only when no format of :data:`REFERENCE_FORMATS` would run (the audited
    dtypes are not known yet)."""
    from attnum.attention.serving.decode import check_decodable
    from attnum.errors import AttnumInputError
    from attnum.numerics.policy import parse_policy

    first = None
    for fmt in formats or REFERENCE_FORMATS:
        try:
            check_decodable(parse_policy(reference_policy(policy, fmt), fmt))
        except AttnumInputError as why:
            at = "" if reference_policy(policy, fmt) == policy else f" at {fmt} inputs"
            first = first or AttnumInputError(f"{param}='decode:{policy}'{at} is not allowed: {why}")
            if formats is not None:
                raise first from None
            continue
        if formats is None:
            return
    if first is not None:
        raise first from None


def reference(policy: str) -> ServingTarget:
    """attnum's emulation as a serving target: SDPA = ``flash:POLICY``, ``merge_state`` = attnum's merge
    in fp32 (natural base), ``decode`` = :func:`attnum.attention.serving.decode.decode_attention` (or the paged
    one with a block table) under POLICY. A POLICY naming no format (``fa2``) takes the audited dtype."""
    from attnum.attention.serving.decode import decode_attention
    from attnum.attention.serving.merge import merge_state
    from attnum.attention.serving.paged import paged_decode_attention
    from attnum.kernels.reference import family
    from attnum.numerics.formats import format_of_dtype

    def resolved(dtype: torch.dtype) -> str:
        return reference_policy(policy, format_of_dtype(dtype).name)

    check_reference(policy)  # a bad policy fails here, not in the first probe

    def sdpa(query, key, value, **kw):
        return family("flash", resolved(query.dtype))(query, key, value, **kw)

    def merge(o_a, lse_a, o_b, lse_b):
        o, lse = merge_state((o_a, lse_a), (o_b, lse_b), policy="fp32")
        return o.to(o_a.dtype), lse.float()

    def decode(q, k_cache, v_cache, *, cache_seqlens, block_table=None, num_splits=1, max_seqlen=None,
               is_causal=True, scale=None, return_lse=False):
        kw = dict(cache_seqlens=cache_seqlens, num_splits=num_splits, max_seqlen=max_seqlen, is_causal=is_causal,
                  scale=scale, policy=resolved(q.dtype), return_lse=True)
        if block_table is None:
            o, lse = decode_attention(q, k_cache, v_cache, **kw)
        else:
            o, lse = paged_decode_attention(q, k_cache, v_cache, block_table=block_table, **kw)
        o = o.to(q.dtype)
        return (o, lse.float()) if return_lse else o

    def varlen(q, k, v, *, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, is_causal=False,
               scale=None):
        from attnum.attention.masks import causal_bool
        from attnum.kernels.serving_layout import varlen_spans

        out = q.new_zeros(q.shape[0], q.shape[1], v.shape[-1])  # rows with no key: zeros
        for q0, q1, k0, k1 in varlen_spans(cu_seqlens_q, cu_seqlens_k):
            if q1 == q0 or k1 == k0:
                continue
            mask = causal_bool(q1 - q0, k1 - k0, "bottom_right") if is_causal else None
            qs, ks, vs = (x.transpose(0, 1).unsqueeze(0) for x in (q[q0:q1], k[k0:k1], v[k0:k1]))
            out[q0:q1] = sdpa(qs, ks, vs, attn_mask=mask, scale=scale)[0].transpose(0, 1)
        return out

    return ServingTarget(f"decode:{policy}", sdpa=sdpa, merge_state=merge, decode=decode, varlen=varlen)


def entry(target, name: str) -> Callable | None:
    """The target's ``merge_state``, ``merge_states``, ``decode`` or ``varlen`` entry point, or None."""
    if name not in ENTRIES[1:]:
        raise bad_value("entry", name, ", ".join(repr(e) for e in ENTRIES[1:]))
    fn = getattr(target, name, None)
    return fn if callable(fn) else None


def attention_conventions_apply(target) -> bool:
    """Whether ``target`` computes attention from Q, K, V (an SDPA, decode or varlen entry point), where a
    causal alignment and an empty-row output mean something; a merge-only target combines states and has
    neither."""
    return bool(getattr(target, "attnum_sdpa", True)) or any(entry(target, e) is not None
                                                               for e in ("decode", "varlen"))


def conventions(target) -> tuple[object, float]:
    """(lse_base, empty_lse) the target declares; natural and -inf when it declares none."""
    from attnum.attention.serving.merge import empty_convention, parse_lse_base

    return parse_lse_base(getattr(target, "lse_base", "e")), empty_convention(getattr(target, "empty_lse", NEG_INF))
