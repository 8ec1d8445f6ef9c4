"""FlashInfer (flashinfer-ai/flashinfer): every kernel attnum runs from it.

CUDA kernels of the installed ``flashinfer`` (on a GPU only):

- ``flashinfer`` -- ``single_prefill_with_kv_cache`` behind the SDPA signature. FlashInfer takes one sequence
  at a time in (N, H, d) / (S, G, d) layout; the batch is looped. A bool ``attn_mask`` maps to ``custom_mask``;
  float masks are unsupported. ``causal=True`` is bottom-right aligned. GQA is native. The -5e4 sentinel bug
  of flashinfer#4267 lived here before flashinfer#4401.
- ``flashinfer-decode`` -- ``single_decode_with_kv_cache`` and paged ``BatchDecodeWithPagedKVCacheWrapper``.
  Protocol (:mod:`attnum.kernels.serving`) to FlashInfer: q (B, H, 1, d) -> per sequence (H, d); a contiguous
  cache (B, G, S, d) -> (L_b, G, d) "NHD" per sequence (single decode); a page pool (n_pages, P, G, d) with a
  block table -> FlashInfer's CSR page list (``kv_indptr``, ``kv_indices``, ``kv_last_page_len``) for one
  ``plan`` + ``run``. Decode is one query per sequence (N = 1, which sees the whole cache: causal is moot);
  N > 1 is unsupported. FlashInfer picks its own split-KV factor, so ``num_splits`` and ``max_seqlen`` are not
  passed (the split-invariance probe then sees its own choice). LSEs are base 2; empty rows (0, -inf) after
  flashinfer#4401 (the -5e4 sentinel of flashinfer#4450 lived in this decode path).
- ``flashinfer-merge`` -- ``merge_state`` / ``merge_states`` (``flashinfer.cascade``) as a merge target.
  Layout is already the protocol's: v (seq, heads, dim) in fp16/bf16, s (seq, heads) float32, LSE in base 2.
  Empty states are (0, -inf) after flashinfer#4401. Not an attention kernel: SDPA calls are unsupported.

Conventions (both declared): causal alignment bottom-right and 0 for rows with no key (FlashInfer's
``state_t::normalize`` after flashinfer#4401).

Triton cascade merges (``flashinfer/triton/cascade.py`` over ``flashinfer/triton/kernels/cascade.py``,
flashinfer-python 0.7.2.post1), from the installed ``flashinfer`` or the pinned wheel (``attnum kernels fetch
flashinfer``; stand-ins: :mod:`attnum.kernels.wheels.source`), on CPU through Triton's interpreter under
:mod:`attnum.kernels.triton.faithful`. Layout is the protocol's, **LSE in base 2** (FlashInfer scales scores by
log2(e) and merges with exp2/log2), empty state (0, -inf) as FlashInfer's CUDA kernels write it since
flashinfer#4401:

- ``flashinfer-triton-merge`` -- ``merge_state``: two states per position (``merge_state_kernel``: m = max,
  weights exp2(s - m), no guard for two empty states: flashinfer#4051, open);
- ``flashinfer-triton-merge-n`` -- ``merge_states``: n states per position, FlashInfer's (seq, n, heads, dim);
  the protocol's (n, seq, heads, dim) is transposed here. Its running state starts from (o, m, d) =
  (0, -5e4, 1), the finite sentinel flashinfer#4401 removed from the CUDA kernels. The target's
  ``merge_state`` is ``merge_states`` of the two;
- ``flashinfer-triton-merge-varlen`` -- ``variable_length_merge_states``: ``indptr`` (seq + 1,) int32,
  position p merging states indptr[p] .. indptr[p+1] - 1 of a packed (total, heads, dim); the target packs the
  protocol's n states per position that way (n, then the same for ``merge_state``). **Unsupported on CPU**:
  its loop ``for iter in tl.range(tl.load(indptr + pos), tl.load(indptr + pos + 1))`` calls
  ``iter.to(tl.int64)``, and Triton's interpreter (3.x) hands a range with loaded bounds out as Python ints,
  which have no ``.to``; compiled for a GPU, ``iter`` is a tensor. Patching the kernel's source would audit
  another kernel, so the adapter reports that (NotImplementedError: ``unsupported``), and runs it natively
  with CUDA.
"""

from __future__ import annotations

import math

import torch

from attnum.kernels.protocol import sdpa_kernel, serving_kernel
from attnum.kernels.serving import ServingTarget
from attnum.kernels.wheels import source as wheels

PACKAGE = "flashinfer"
CUDA_DTYPES = (torch.bfloat16, torch.float16)  # the CUDA kernels'
DTYPES = (torch.bfloat16, torch.float16, torch.float32)  # the Triton merges'


# -- prefill: flashinfer.single_prefill_with_kv_cache ------------------------------------------------------

def prefill_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    import flashinfer

    if dropout_p:
        raise NotImplementedError("flashinfer adapter: dropout is not supported")
    if attn_mask is not None and attn_mask.dtype != torch.bool:
        raise NotImplementedError("flashinfer takes a bool custom_mask, not an additive float mask")
    if query.dtype not in (torch.float16, torch.bfloat16):
        raise NotImplementedError(f"flashinfer prefill supports fp16/bf16, not {query.dtype}")
    b, n, s = query.shape[0], query.shape[-2], key.shape[-2]
    outs = []
    for i in range(b):
        mask = None
        if attn_mask is not None:
            m = torch.broadcast_to(attn_mask, (b, query.shape[1], n, s))[i]
            if not bool((m == m[:1]).all()):
                raise NotImplementedError("flashinfer custom_mask is shared by all heads")
            mask = m[0].contiguous()
        o = flashinfer.single_prefill_with_kv_cache(
            query[i].transpose(0, 1).contiguous(), key[i].transpose(0, 1).contiguous(),
            value[i].transpose(0, 1).contiguous(), custom_mask=mask, causal=is_causal, sm_scale=scale)
        outs.append(o.transpose(0, 1))
    return torch.stack(outs)


# -- decode: single_decode_with_kv_cache, BatchDecodeWithPagedKVCacheWrapper --------------------------------

WORKSPACE_BYTES = 128 * 1024 * 1024


def _csr(block_table, lens, P, device):
    indptr, indices, last = [0], [], []
    for b, L in enumerate(lens):
        n = math.ceil(L / P)
        indices += block_table[b, :n].tolist()
        indptr.append(indptr[-1] + n)
        last.append(L - (n - 1) * P if n else 0)
    as_i32 = lambda x: torch.tensor(x, dtype=torch.int32, device=device)  # noqa: E731
    return as_i32(indptr), as_i32(indices), as_i32(last)


def decode(q, k_cache, v_cache, *, cache_seqlens, block_table=None, num_splits=1, max_seqlen=None,
           is_causal=True, scale=None, return_lse=False):
    import flashinfer

    B, H, N, d = q.shape
    if N != 1:
        raise NotImplementedError("flashinfer decode takes one query per sequence (N = 1)")
    if q.dtype not in CUDA_DTYPES:
        raise NotImplementedError(f"flashinfer decode supports fp16/bf16, not {q.dtype}")
    lens = [int(x) for x in cache_seqlens.tolist()]
    if block_table is None:
        outs, lses = [], []
        for b, L in enumerate(lens):
            if L == 0:
                outs.append(torch.zeros(H, v_cache.shape[-1], dtype=q.dtype, device=q.device))
                lses.append(torch.full((H,), -math.inf, device=q.device))
                continue
            o, lse = flashinfer.single_decode_with_kv_cache(
                q[b, :, 0].contiguous(), k_cache[b, :, :L].transpose(0, 1).contiguous(),
                v_cache[b, :, :L].transpose(0, 1).contiguous(), kv_layout="NHD", sm_scale=scale, return_lse=True)
            outs.append(o)
            lses.append(lse)
        o, lse = torch.stack(outs)[:, :, None], torch.stack(lses)[:, :, None]
    else:
        P, G = k_cache.shape[1], k_cache.shape[2]
        indptr, indices, last = _csr(block_table.cpu(), lens, P, q.device)
        ws = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=q.device)
        wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, kv_layout="NHD")
        wrapper.plan(indptr, indices, last, H, G, d, P, data_type=k_cache.dtype, q_data_type=q.dtype,
                     sm_scale=scale)
        o, lse = wrapper.run(q[:, :, 0].contiguous(), (k_cache, v_cache), return_lse=True)
        o, lse = o[:, :, None], lse[:, :, None]
    return (o, lse) if return_lse else o


DECODE = ServingTarget("flashinfer-decode", decode=decode, lse_base=2)


# -- flashinfer.cascade merge_state / merge_states (CUDA) ------------------------------------------------

def cuda_merge_state(o_a, lse_a, o_b, lse_b):
    import flashinfer

    if o_a.dtype not in CUDA_DTYPES:
        raise NotImplementedError(f"flashinfer merge_state takes fp16/bf16 values, not {o_a.dtype}")
    return flashinfer.merge_state(o_a.contiguous(), lse_a.float().contiguous(), o_b.contiguous(),
                                  lse_b.float().contiguous())


def cuda_merge_states(o_TnHd, lse_TnH):
    """n-way merge: v (seq, num_states, heads, dim), s (seq, num_states, heads)."""
    import flashinfer

    return flashinfer.merge_states(o_TnHd.contiguous(), lse_TnH.float().contiguous())


CUDA_MERGE = ServingTarget("flashinfer-merge", merge_state=cuda_merge_state, lse_base=2)
CUDA_MERGE.merge_states = cuda_merge_states


# -- flashinfer/triton/cascade.py (Triton) --------------------------------------------------------------

_CASCADE = "flashinfer.triton.cascade"


def _mod():
    return wheels.load(PACKAGE, _CASCADE)


def triton_merge_state(o_a, lse_a, o_b, lse_b):
    """``merge_state(v_a (T, H, dv), s_a (T, H), v_b, s_b) -> (v, s)``."""
    return _mod().merge_state(o_a.contiguous(), lse_a.float().contiguous(), o_b.contiguous(),
                              lse_b.float().contiguous())


def triton_merge_states(o_n, lse_n):
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


MERGE = ServingTarget("flashinfer-triton-merge", merge_state=triton_merge_state, lse_base=2)
MERGE_N = ServingTarget("flashinfer-triton-merge-n", merge_state=_pairwise(triton_merge_states), merge_states=triton_merge_states,
                        lse_base=2)
MERGE_VARLEN = ServingTarget("flashinfer-triton-merge-varlen", merge_state=_pairwise(varlen_merge_states),
                             merge_states=varlen_merge_states, lse_base=2)


# flash-attn >= 2.1 and FlashInfer align causal bottom-right, and both write 0 for rows with no key
# (FlashInfer's state_t::normalize after flashinfer#4401).
KERNELS = (
    sdpa_kernel("flashinfer", prefill_sdpa, package=PACKAGE, devices=("cuda",), dtypes=CUDA_DTYPES,
                doc="``flashinfer``: ``flashinfer.single_prefill_with_kv_cache`` behind the SDPA signature.",
                causal_alignment="bottom_right", empty_rows="zeros"),
    sdpa_kernel("flashinfer-merge", CUDA_MERGE, package=PACKAGE, devices=("cuda",), dtypes=CUDA_DTYPES,
                doc="``flashinfer-merge``: FlashInfer's ``merge_state`` / ``merge_states`` (``flashinfer.cascade``) "
                    "as a merge target."),
    sdpa_kernel("flashinfer-decode", DECODE, package=PACKAGE, devices=("cuda",), dtypes=CUDA_DTYPES,
                doc="``flashinfer-decode``: FlashInfer's ``single_decode_with_kv_cache`` and paged "
                    "``BatchDecodeWithPagedKVCacheWrapper``.", causal_alignment="bottom_right", empty_rows="zeros"),
    serving_kernel(MERGE, "FlashInfer 0.7.2 triton merge_state (two states, LSE base 2)", package=PACKAGE,
                   dtypes=DTYPES),
    serving_kernel(MERGE_N, "FlashInfer 0.7.2 triton merge_states (n states, base 2)", package=PACKAGE, dtypes=DTYPES),
    serving_kernel(MERGE_VARLEN, "FlashInfer 0.7.2 triton variable_length_merge_states (indptr, base 2)",
                   package=PACKAGE, dtypes=DTYPES),
)
