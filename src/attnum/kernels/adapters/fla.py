"""flash-linear-attention (fla-org/flash-linear-attention, ``fla-core`` on PyPI): its softmax attention and its
native sparse attention.

``fla-parallel-attn`` and ``fla-decode``: flash-linear-attention's softmax attention (fla-core 0.6.0;
fla-org/flash-linear-attention), forward: ``fla/ops/attn/parallel.py`` ``parallel_attn`` and
``fla/ops/attn/decoding.py`` ``attn_decoding_one_step``.

Causal softmax attention over (B, T, HQ, K) queries and (B, T, H, K) keys/values (GQA when HQ % H == 0),
online softmax in base 2 (scores times log2(e); its internal LSE is base 2 and not returned),
``window_size=W``: query i sees keys i - W < j <= i, ``sink_bias`` (HQ,): a gpt-oss sink in natural
units (fla multiplies it by log2(e)). As SDPA: q (B, H, N, d) are transposed to fla's layout; the
adapter declares the window (flash-attn's ``window_size=(W - 1, 0)``) and sinks
(attnum.kernels.conventions).

What it refuses (NotImplementedError: "unsupported"): a non-causal call (fla has no non-causal path),
N != S (queries and keys share T), an ``attn_mask``, a window with a right reach other than 0 or an
unbounded left (-1 is the plain causal call), ``enable_gqa=False`` with H != G.

``fla-decode`` (the decode entry point of attnum.kernels.serving; no SDPA entry point):
``attn_decoding_one_step`` takes one query per sequence, q (1, B, HQ, K), and the sequences' keys packed
into k, v (1, T, H, K) by ``cu_seqlens`` (varlen). The adapter packs each sequence's first
``cache_seqlens[b]`` keys of the cache (or its pages, through the block table) in order; the kernel walks
tiles of BS keys (at most 64 on an sm90) in one pass with an online softmax, no split (``num_splits`` is
ignored), and returns no LSE (``return_lse`` is unsupported); declared: window (its ``window_size`` W, the last W
keys) and sinks (``sink_bias``); its autotuner keeps its first config (a shim:
:func:`_one_config`). It multiplies q by the scale and rounds the
product to the input dtype before the scores (``b_q = (b_q * scale).to(b_q.dtype)``).

From the installed ``fla`` or the pinned wheel (``attnum kernels fetch fla``; stand-ins for its package
imports: attnum.kernels.wheels.source). On CPU through Triton's interpreter (attnum.kernels.triton.faithful).

``fla-nsa``: flash-linear-attention's native sparse attention, the selected-block branch (fla-core 0.6.0;
fla-org/flash-linear-attention ``fla/ops/nsa/parallel.py``: ``parallel_nsa`` with ``block_indices``), forward.

NSA (Yuan et al., "Native Sparse Attention", arXiv 2502.11089) lets each query attend to a few blocks of
``block_size`` consecutive keys, chosen per (query, KV head) from compressed (mean-pooled) keys. The
selected-block branch is plain causal softmax attention over the keys of the selected blocks: online softmax
in base 2 over one block at a time, in the order the indices are listed; a block listed before the query's
position holds keys the query may see, one at or after it is masked causally, an index < 0 is skipped. Its
golden is therefore exact attention with the selection as a bool mask, which is what attnum judges it by:

- **as SDPA** (no selection given): every block is selected, in order (``block_indices[b, g, i] = 0, 1, ...``),
  so the branch must equal dense causal attention, and every SDPA probe applies;
- **with a selection** (declared ``attnum_block_select``: ``block_indices=`` (B, G, N, n) int64 block numbers
  per KV head and query, -1 for none, and ``block_size=``): the block-select probe poisons the blocks not
  selected and judges the output against golden attention over the selected blocks only.

Layout: q (B, H, N, d), k (B, G, S, d), v (B, G, S, dv) as SDPA; fla takes (B, T, H, d). NSA's kernel computes
the G = H / G_kv query heads of one KV head as one tile and requires that group to be a power of 2 of at least
16 (``parallel_nsa`` asserts it): the adapter fills each group up to the next such size with copies of the
group's first query head and returns only the real heads (each row of the tile is computed alone: the copies
change no arithmetic of the real rows). Queries are the last N of the S keys' positions (bottom-right causal,
``Q_OFFSET = TK - TQ``).

What it refuses (NotImplementedError: "unsupported"): a non-causal call (NSA is causal), an ``attn_mask``,
N > S (the kernel's queries are the last TQ of TK tokens), d or dv > 256 (``NK == 1`` is asserted), more
than 32 blocks of 64 keys when no selection is given (S > 2048: fla's top-k keeps at most BS / 2 blocks,
so a "select every block" call past that is not NSA), a ``block_size`` that is not a power of 2 in 16..128.

Not covered here: the compression branch (attention over mean-pooled blocks, gated), the top-k selection
itself (a heuristic: any selection is "right"; its kernel is also minutes per call in the interpreter) and the
sliding-window branch, which is flash-attn's CUDA ``flash_attn_func`` (attnum's ``flash-attn`` target on a GPU).

Shims: the four forward kernels' ``triton.autotune`` keeps one config (:func:`_one_config`: the configs differ
in ``num_warps``/``num_stages`` only, or, for mean pooling, in the feature tile BD, which changes no sum).
From the installed ``fla`` or the pinned wheel (``attnum kernels fetch fla``; stand-ins: attnum.kernels.wheels.source).
"""

from __future__ import annotations

import math

import torch

from attnum.kernels import serving_layout as lay
from attnum.kernels.protocol import serving_kernel
from attnum.kernels.serving import ServingTarget
from attnum.kernels.wheels import source as wheels

PACKAGE = "fla"
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_PARALLEL = "fla.ops.attn.parallel"
_DECODING = "fla.ops.attn.decoding"


# -- fla/ops/attn/parallel.py, fla/ops/attn/decoding.py ----------------------------------------------------

def parallel_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
         window_size=None, sinks=None, cu_seqlens=None):
    """q (B, H, N, d), k (B, G, S, d), v (B, G, S, dv) -> (B, H, N, dv) through ``parallel_attn``."""
    if attn_mask is not None:
        raise NotImplementedError("fla parallel_attn takes no attn_mask")
    if not is_causal:
        raise NotImplementedError("fla parallel_attn is causal only (is_causal=False not supported)")
    if query.shape[-2] != key.shape[-2]:
        raise NotImplementedError(f"fla parallel_attn needs N == S (one T); got N={query.shape[-2]}, "
                                  f"S={key.shape[-2]}: not supported")
    if key.shape[1] != query.shape[1] and not enable_gqa:
        raise NotImplementedError("H != G without enable_gqa: not supported")
    w = None
    if window_size is not None:
        left, right = (int(x) for x in window_size)
        if right not in (0, -1) or left < -1:
            raise NotImplementedError(f"fla parallel_attn's window is causal (right = 0); window_size="
                                      f"{tuple(window_size)} not supported")
        w = None if left == -1 else left + 1
    bias = None if sinks is None else sinks.to(device=query.device, dtype=torch.float32).contiguous()
    o = wheels.load(PACKAGE, _PARALLEL).parallel_attn(
        query.transpose(1, 2).contiguous(), key.transpose(1, 2).contiguous(), value.transpose(1, 2).contiguous(),
        scale=scale, window_size=w, cu_seqlens=cu_seqlens, sink_bias=bias)
    return o.transpose(1, 2)


def parallel_varlen(q, k, v, *, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, is_causal=False,
           scale=None):
    """attnum's varlen protocol (q (Tq, H, d), k, v (Tk, G, d)) -> ``parallel_attn(..., cu_seqlens)`` on the
    packed tokens as one batch of 1. fla takes one ``cu_seqlens`` (queries and keys are the same tokens)
    and is causal only: other calls are unsupported."""
    if not is_causal:
        raise NotImplementedError("fla parallel_attn is causal only (is_causal=False not supported)")
    if not torch.equal(cu_seqlens_q.cpu(), cu_seqlens_k.cpu()):
        raise NotImplementedError("fla parallel_attn takes one cu_seqlens (query and key lengths equal)")
    o = wheels.load(PACKAGE, _PARALLEL).parallel_attn(
        q.unsqueeze(0).contiguous(), k.unsqueeze(0).contiguous(), v.unsqueeze(0).contiguous(), scale=scale,
        cu_seqlens=cu_seqlens_q.to(device=q.device, dtype=torch.long))
    return o[0]


PARALLEL = ServingTarget("fla-parallel-attn", sdpa=parallel_sdpa, varlen=parallel_varlen, causal_alignment="bottom_right",
                       features=("window", "sinks"))


def decode(q, k_cache, v_cache, *, cache_seqlens, block_table=None, num_splits=None, max_seqlen=None,
           is_causal=True, scale=None, return_lse=False, window_size=None, sinks=None):
    """attnum's decode protocol -> ``attn_decoding_one_step`` (N = 1; the query sees its whole cache, or the last
    W = left + 1 keys of it with ``window_size=(left, right)``: its ``window_size=W``; the query is its sequence's
    last position, so the right side reaches nothing); ``sinks``: its ``sink_bias`` (natural log)."""
    B, H, N, d = q.shape
    if N != 1:
        raise NotImplementedError("fla attn_decoding_one_step: one query per sequence")
    if return_lse:
        raise NotImplementedError("fla attn_decoding_one_step returns no LSE")
    lens = lay.lengths(cache_seqlens)
    k, v, indptr, indices = lay.token_pool(k_cache, v_cache, lens, block_table)  # (T, G, d), packed by indices
    idx = indices.long()
    cu = indptr.to(device=q.device, dtype=torch.long)
    mod = wheels.load(PACKAGE, _DECODING)
    _one_config(mod.naive_attn_decoding_kernel)
    W = lay.window_extent(window_size, True, "fla attn_decoding_one_step", non_causal="none")
    bias = None if sinks is None else sinks.to(device=q.device, dtype=torch.float32).contiguous()
    o = mod.attn_decoding_one_step(
        q[:, :, 0].unsqueeze(0).contiguous(), k[idx].unsqueeze(0).contiguous(), v[idx].unsqueeze(0).contiguous(),
        scale=scale, cu_seqlens=cu, window_size=W or None, sink_bias=bias)
    return o[0].unsqueeze(2)  # (1, B, H, dv) -> (B, H, 1, dv)


def _one_config(kernel, *, harmless: frozenset = frozenset(), keep: int = 0) -> None:
    """Shim: a kernel's ``triton.autotune`` times its configs on the GPU driver, which Triton's
    interpreter does not have ("0 active drivers"). Configs that differ only in ``num_warps`` and
    ``num_stages`` (and in the meta-parameters named ``harmless``, which the caller has checked change no
    arithmetic) compute the same in the interpreter, so the autotuner keeps config ``keep`` and never
    benchmarks; any other meta-parameter is refused."""
    tuner = kernel
    while tuner is not None and not hasattr(tuner, "configs"):
        tuner = getattr(tuner, "fn", None)
    if tuner is None or len(tuner.configs) <= 1:
        return
    if any(set(c.kwargs) - harmless for c in tuner.configs):
        raise NotImplementedError(f"fla's {getattr(kernel, '__name__', 'kernel')} autotunes a meta-parameter: the "
                                  "interpreter cannot pick")
    tuner.configs = [tuner.configs[keep]]


DECODE = ServingTarget("fla-decode", decode=decode, single_query_only=True, split_rule="fixed-size",
                       features=("window", "sinks"))


# -- fla/ops/nsa/parallel.py (native sparse attention, selected-block branch) ---------------------------

BLOCK_SIZE = 64  # NSA's default selection block (parallel_nsa's block_size)
_MODULE = "fla.ops.nsa.parallel"
_TUNED = {"fla.ops.nsa.parallel": ("parallel_nsa_fwd_kernel", "parallel_nsa_kernel_topk"),
          "fla.ops.nsa.compression": ("parallel_nsa_compression_fwd_kernel",),
          "fla.ops.utils.pooling": ("mean_pooling_fwd_kernel",)}


def _nsa_one_config() -> None:
    """Shim (:func:`_one_config`): the forward kernels' autotuners keep one config.
    Their configs differ in ``num_warps``/``num_stages`` (no arithmetic in the interpreter) or, for
    ``mean_pooling_fwd_kernel``, in BD, the tile of the feature dimension (each feature is its own sum):
    the last config is kept (the largest BD: fewest interpreted programs)."""
    import sys

    for mod_name, kernels in _TUNED.items():
        mod = sys.modules.get(mod_name)
        for name in kernels if mod is not None else ():
            _one_config(getattr(mod, name), harmless=frozenset({"BD"}), keep=-1)


def nsa_load():
    import warnings

    with warnings.catch_warnings():  # parallel.py warns once that flash-attn (its sliding-window branch) is absent
        warnings.simplefilter("ignore", ImportWarning)
        mod = wheels.load(PACKAGE, _MODULE)
    _nsa_one_config()
    return mod


def group_size(ratio: int) -> int:
    """The kernel's query heads per KV head for ``ratio`` real ones: a power of 2, at least 16."""
    return max(16, 1 << max(0, ratio - 1).bit_length())


def all_blocks(B: int, G: int, N: int, S: int, block_size: int) -> torch.Tensor:
    """(B, G, N, nb) int64: every block of S keys selected, in order (nb = ceil(S / block_size))."""
    nb = -(-S // block_size)
    return torch.arange(nb, dtype=torch.long).expand(B, G, N, nb).contiguous()


def nsa_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
         block_indices=None, block_size=None):
    """q (B, H, N, d), k (B, G, S, d), v (B, G, S, dv) -> (B, H, N, dv): NSA's selected-block branch over
    ``block_indices`` (B, G, N, n) (default: every block), blocks of ``block_size`` keys (default 64)."""
    if attn_mask is not None:
        raise NotImplementedError("fla parallel_nsa takes no attn_mask")
    if not is_causal:
        raise NotImplementedError("fla parallel_nsa is causal only (is_causal=False not supported)")
    B, H, N, d = query.shape
    G, S, dv = key.shape[1], key.shape[-2], value.shape[-1]
    if N > S:
        raise NotImplementedError(f"fla parallel_nsa's queries are the last TQ of TK tokens; N={N} > S={S} is "
                                  "not supported")
    if d > 256 or dv > 256:
        raise NotImplementedError(f"fla parallel_nsa needs d, dv <= 256 (one K tile); got d={d}, dv={dv}")
    if H % G or (H != G and not enable_gqa):
        raise NotImplementedError(f"H={H} query heads over G={G} KV heads (enable_gqa={enable_gqa}): not supported")
    bs = BLOCK_SIZE if block_size is None else int(block_size)
    if bs < 16 or bs > 128 or bs & (bs - 1):
        raise NotImplementedError(f"block_size={block_size!r}: fla parallel_nsa needs a power of 2 in 16..128")
    if block_indices is None:
        if -(-S // bs) > bs // 2:
            raise NotImplementedError(f"S={S} keys are {-(-S // bs)} blocks of {bs}; NSA selects at most "
                                      f"{bs // 2}: not supported without a selection")
        block_indices = all_blocks(B, G, N, S, bs)
    if tuple(block_indices.shape[:3]) != (B, G, N):
        raise ValueError(f"block_indices.shape={tuple(block_indices.shape)}; expected (B, G, N, n) = ({B}, {G}, "
                         f"{N}, n)")
    r = H // G
    gk = group_size(r)
    # (B, N, G * gk, d): the r real query heads of each KV head, then copies of its first one
    qg = query.transpose(1, 2).reshape(B, N, G, r, d)
    qg = torch.cat([qg, qg[:, :, :, :1].expand(B, N, G, gk - r, d)], dim=3).reshape(B, N, G * gk, d)
    idx = block_indices.to(device=query.device, dtype=torch.long).transpose(1, 2).contiguous()  # (B, N, G, n)
    o = nsa_load().parallel_nsa(qg.contiguous(), key.transpose(1, 2).contiguous(), value.transpose(1, 2).contiguous(),
                             block_indices=idx, block_counts=idx.shape[-1], block_size=bs,
                             scale=1.0 / math.sqrt(d) if scale is None else scale)
    return o.reshape(B, N, G, gk, dv)[:, :, :, :r].reshape(B, N, H, dv).transpose(1, 2)


NSA = ServingTarget("fla-nsa", sdpa=nsa_sdpa, causal_alignment="bottom_right", features=("block_select",))


KERNELS = (
    serving_kernel(PARALLEL, "fla-core 0.6.0 parallel_attn (Triton; causal softmax attention, GQA, window, sinks; "
                             "N = S)", package=PACKAGE, dtypes=DTYPES),
    serving_kernel(DECODE, "fla-core 0.6.0 attn_decoding_one_step (Triton; single query, varlen, no split)",
                   package=PACKAGE, dtypes=DTYPES),
    serving_kernel(NSA, "fla-core 0.6.0 parallel_nsa selected-block branch (Triton; NSA, causal, GQA groups of 16+, "
                        "block_select)", package=PACKAGE, dtypes=DTYPES),
)
