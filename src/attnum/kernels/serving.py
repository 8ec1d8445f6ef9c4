"""Serving-side audit targets: one object that may be an SDPA kernel, a state merge and a decode kernel.

The auditor's serving probes (split-KV merges, decode with a KV cache, paged KV) need entry points the
SDPA signature does not have. A :class:`ServingTarget` carries them as attributes; a probe asks for the
one it needs and reports "unsupported" when it is absent. Any callable with these attributes qualifies
(a function object with ``fn.merge_state = ...`` works too). The protocol:

- ``__call__(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
  enable_gqa=False)``: SDPA, or ``NotImplementedError`` for a kernel that is no attention (a merge);
- ``merge_state(o_a, lse_a, o_b, lse_b) -> (o, lse)``: FlashInfer's ``merge_state`` layout, o (T, H, dv)
  in the audited dtype, lse (T, H) float32, in base ``lse_base``;
- ``decode(q, k_cache, v_cache, *, cache_seqlens, block_table=None, num_splits=1, max_seqlen=None,
  is_causal=True, scale=None, return_lse=False) -> o | (o, lse)``: q (B, H, N, d) and o (B, H, N, dv) in
  attnum's layout; without ``block_table`` the cache is (B, G, S, d), with it a page pool
  (n_pages, P, G, d) as :mod:`attnum.attention.paged`; lse (B, H, N) float32 in ``lse_base``; ``is_causal`` with
  the kernel's own alignment (the decode probes check it is bottom-right: a decode query sees its cache);
  a caller that leaves ``num_splits`` out asks for the kernel's own split choice (its heuristic);
- ``attnum_batch_invariant`` (optional, on the target or its ``decode``): True when the target claims a
  request's decode output does not depend on the rest of the batch (the decode-batch-invariance probe);
- ``lse_base``: ``"e"`` or 2; ``empty_lse``: the LSE the target uses for a state with no key (-inf, or
  +inf as FA2's non-split forward).

Adapters translate their package's layout to this one inside these methods; the probes never see it.
:func:`reference` builds attnum's own serving target (the registry's ``decode:POLICY`` family), which
passes every serving probe.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from attnum.errors import bad_value

NEG_INF = -math.inf


class ServingTarget:
    """An audit target with optional ``merge_state`` and ``decode`` entry points (module docstring)."""

    def __init__(self, name: str, *, sdpa: Callable | None = None, merge_state: Callable | None = None,
                 decode: Callable | None = None, lse_base: object = "e", empty_lse: float = NEG_INF):
        from attnum.attention.merge import empty_convention, parse_lse_base

        self.__name__ = self.name = name
        self._sdpa = sdpa
        if merge_state is not None:
            self.merge_state = merge_state
        if decode is not None:
            self.decode = decode
        self.lse_base = parse_lse_base(lse_base)
        self.empty_lse = empty_convention(empty_lse)

    def __call__(self, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                 enable_gqa=False):
        if self._sdpa is None:
            raise NotImplementedError(f"{self.name} is not an attention kernel (no SDPA entry point)")
        return self._sdpa(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                          scale=scale, enable_gqa=enable_gqa)

    def __repr__(self) -> str:
        parts = [p for p in ("merge_state", "decode") if hasattr(self, p)]
        return f"ServingTarget({self.name!r}, {'+'.join(['sdpa'] * (self._sdpa is not None) + parts)})"


def reference(policy: str) -> ServingTarget:
    """attnum's emulation as a serving target: SDPA = ``flash:POLICY``, ``merge_state`` = attnum's merge
    in fp32 (natural base), ``decode`` = :func:`attnum.attention.decode.decode_attention` (or the paged
    one with a block table) under POLICY. A POLICY naming no format (``fa2``) takes the audited dtype."""
    from attnum.attention.decode import decode_attention
    from attnum.attention.merge import merge_state
    from attnum.attention.paged import paged_decode_attention
    from attnum.formats import format_of_dtype
    from attnum.kernels.reference import family
    from attnum.policy import NAMED, parse_policy

    head = policy.split(",")[0]
    bare = head.strip().lower() in NAMED and ":" not in head

    def resolved(dtype: torch.dtype) -> str:
        if not bare:
            return policy
        name, _, rest = policy.partition(",")
        return f"{name}:{format_of_dtype(dtype).name}" + (f",{rest}" if rest else "")

    parse_policy(policy, "fp32")  # a bad policy fails here, not in the first probe

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

    return ServingTarget(f"decode:{policy}", sdpa=sdpa, merge_state=merge, decode=decode)


def entry(target, name: str) -> Callable | None:
    """The target's ``merge_state`` or ``decode`` entry point, or None."""
    if name not in ("merge_state", "decode"):
        raise bad_value("entry", name, "'merge_state' or 'decode'")
    fn = getattr(target, name, None)
    return fn if callable(fn) else None


def conventions(target) -> tuple[object, float]:
    """(lse_base, empty_lse) the target declares; natural and -inf when it declares none."""
    from attnum.attention.merge import empty_convention, parse_lse_base

    return parse_lse_base(getattr(target, "lse_base", "e")), empty_convention(getattr(target, "empty_lse", NEG_INF))
