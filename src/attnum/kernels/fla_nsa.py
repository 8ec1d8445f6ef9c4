"""``fla-nsa``: flash-linear-attention's native sparse attention, the selected-block branch (fla-core 0.6.0;
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
From the installed ``fla`` or the pinned wheel (``attnum kernels fetch fla``; stand-ins: attnum.kernels.wheels).
"""

from __future__ import annotations

import math

import torch

from attnum.kernels import wheels
from attnum.kernels.fla_attn import _one_config as _tune
from attnum.kernels.serving import ServingTarget

PACKAGE = "fla"
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
BLOCK_SIZE = 64  # NSA's default selection block (parallel_nsa's block_size)
_MODULE = "fla.ops.nsa.parallel"
_TUNED = {"fla.ops.nsa.parallel": ("parallel_nsa_fwd_kernel", "parallel_nsa_kernel_topk"),
          "fla.ops.nsa.compression": ("parallel_nsa_compression_fwd_kernel",),
          "fla.ops.utils.pooling": ("mean_pooling_fwd_kernel",)}


def _one_config() -> None:
    """Shim (:func:`attnum.kernels.fla_attn._one_config`): the forward kernels' autotuners keep one config.
    Their configs differ in ``num_warps``/``num_stages`` (no arithmetic in the interpreter) or, for
    ``mean_pooling_fwd_kernel``, in BD, the tile of the feature dimension (each feature is its own sum):
    the last config is kept (the largest BD: fewest interpreted programs)."""
    import sys

    for mod_name, kernels in _TUNED.items():
        mod = sys.modules.get(mod_name)
        for name in kernels if mod is not None else ():
            _tune(getattr(mod, name), harmless=frozenset({"BD"}), keep=-1)


def _load():
    import warnings

    with warnings.catch_warnings():  # parallel.py warns once that flash-attn (its sliding-window branch) is absent
        warnings.simplefilter("ignore", ImportWarning)
        mod = wheels.load(PACKAGE, _MODULE)
    _one_config()
    return mod


def group_size(ratio: int) -> int:
    """The kernel's query heads per KV head for ``ratio`` real ones: a power of 2, at least 16."""
    return max(16, 1 << max(0, ratio - 1).bit_length())


def all_blocks(B: int, G: int, N: int, S: int, block_size: int) -> torch.Tensor:
    """(B, G, N, nb) int64: every block of S keys selected, in order (nb = ceil(S / block_size))."""
    nb = -(-S // block_size)
    return torch.arange(nb, dtype=torch.long).expand(B, G, N, nb).contiguous()


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
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
    o = _load().parallel_nsa(qg.contiguous(), key.transpose(1, 2).contiguous(), value.transpose(1, 2).contiguous(),
                             block_indices=idx, block_counts=idx.shape[-1], block_size=bs,
                             scale=1.0 / math.sqrt(d) if scale is None else scale)
    return o.reshape(B, N, G, gk, dv)[:, :, :, :r].reshape(B, N, H, dv).transpose(1, 2)


TARGET = ServingTarget("fla-nsa", sdpa=sdpa, causal_alignment="bottom_right", features=("block_select",))
