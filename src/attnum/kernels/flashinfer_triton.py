"""``flashinfer-triton-merge`` / ``-merge-n`` / ``-merge-varlen``: FlashInfer's Triton cascade merges
(``flashinfer/triton/cascade.py`` over ``flashinfer/triton/kernels/cascade.py``, flashinfer-python 0.7.2.post1).

Layout is already the protocol's (:mod:`attnum.kernels.serving`): v (seq, heads, dim), s (seq, heads)
float32, **LSE in base 2** (FlashInfer scales scores by log2(e) and merges with exp2/log2), empty state
(0, -inf) as FlashInfer's CUDA kernels write it since flashinfer#4401.

- ``merge_state``: two states per position (``merge_state_kernel``: m = max, weights exp2(s - m), no
  guard for two empty states: flashinfer#4051, open);
- ``merge_states``: n states per position, FlashInfer's (seq, n, heads, dim); the protocol's
  (n, seq, heads, dim) is transposed here. Its running state starts from (o, m, d) = (0, -5e4, 1),
  the finite sentinel flashinfer#4401 removed from the CUDA kernels. The ``-merge-n`` target's
  ``merge_state`` is ``merge_states`` of the two;
- ``variable_length_merge_states``: ``indptr`` (seq + 1,) int32, position p merging states
  indptr[p] .. indptr[p+1] - 1 of a packed (total, heads, dim); the ``-merge-varlen`` target packs the
  protocol's n states per position that way (n, then the same for ``merge_state``). **Unsupported on
  CPU**: its loop ``for iter in tl.range(tl.load(indptr + pos), tl.load(indptr + pos + 1))`` calls
  ``iter.to(tl.int64)``, and Triton's interpreter (3.x) hands a range with loaded bounds out as Python
  ints, which have no ``.to``; compiled for a GPU, ``iter`` is a tensor. Patching the kernel's source
  would audit another kernel, so the adapter reports that (NotImplementedError: ``unsupported``), and
  runs it natively with CUDA.

From the installed ``flashinfer`` or the pinned wheel (``attnum kernels fetch flashinfer``; stand-ins:
attnum.kernels.wheels). On CPU through Triton's interpreter under attnum.kernels.triton_faithful.
"""

from __future__ import annotations

import torch

from attnum.kernels import wheels
from attnum.kernels.serving import ServingTarget

PACKAGE = "flashinfer"
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_CASCADE = "flashinfer.triton.cascade"


def _mod():
    return wheels.load(PACKAGE, _CASCADE)


def merge_state(o_a, lse_a, o_b, lse_b):
    """``merge_state(v_a (T, H, dv), s_a (T, H), v_b, s_b) -> (v, s)``."""
    return _mod().merge_state(o_a.contiguous(), lse_a.float().contiguous(), o_b.contiguous(),
                              lse_b.float().contiguous())


def merge_states(o_n, lse_n):
    """Protocol o_n (n, T, H, dv), lse_n (n, T, H) -> FlashInfer's ``merge_states(v (T, n, H, dv), s (T, n, H))``."""
    return _mod().merge_states(o_n.transpose(0, 1).contiguous(), lse_n.float().transpose(0, 1).contiguous())


def varlen_merge_states(o_n, lse_n):
    """Protocol o_n (n, T, H, dv) -> ``variable_length_merge_states(v (T n, H, dv), s (T n, H), indptr)``
    with indptr = 0, n, 2n, ... (position t owns rows t n .. t n + n - 1)."""
    n, T = o_n.shape[:2]
    indptr = torch.arange(0, n * T + 1, n, dtype=torch.int32, device=o_n.device)
    v = o_n.transpose(0, 1).reshape(n * T, *o_n.shape[2:]).contiguous()
    s = lse_n.float().transpose(0, 1).reshape(n * T, lse_n.shape[-1]).contiguous()
    try:
        return _mod().variable_length_merge_states(v, s, indptr)
    except Exception as exc:  # noqa: BLE001 - only the interpreter's known limitation becomes "unsupported"
        if o_n.is_cuda or "'int' object has no attribute 'to'" not in str(exc):
            raise
        raise NotImplementedError(
            "flashinfer variable_length_merge_states cannot run in Triton's interpreter: its loop variable over "
            "tl.range(tl.load(indptr + pos), ...) is a Python int there, and the kernel calls iter.to(tl.int64) "
            "(a tensor method); run it with CUDA") from exc


def _pairwise(n_way):
    def merge(o_a, lse_a, o_b, lse_b):
        return n_way(torch.stack([o_a, o_b]), torch.stack([lse_a.float(), lse_b.float()]))

    merge.__doc__ = f"Two states through {n_way.__name__} (n = 2)."
    return merge


MERGE = ServingTarget("flashinfer-triton-merge", merge_state=merge_state, lse_base=2)
MERGE_N = ServingTarget("flashinfer-triton-merge-n", merge_state=_pairwise(merge_states), merge_states=merge_states,
                        lse_base=2)
MERGE_VARLEN = ServingTarget("flashinfer-triton-merge-varlen", merge_state=_pairwise(varlen_merge_states),
                             merge_states=varlen_merge_states, lse_base=2)
