"""Layout helpers the SGLang / vLLM adapters share: attnum's decode protocol (q (B, H, N, d), a contiguous
cache (B, G, S, d) or a page pool (n_pages, P, G, d) with a block table) to token pools and pages."""

from __future__ import annotations

import torch


def refuse_sdpa_extras(kernel: str, query, key, attn_mask, enable_gqa) -> None:
    """What none of the SGLang / vLLM prefill kernels take through SDPA: a mask, or G != H without
    ``enable_gqa`` (raised as NotImplementedError: the audit reads it as ``unsupported``)."""
    if attn_mask is not None:
        raise NotImplementedError(f"{kernel}: no attn_mask")
    if key.shape[1] != query.shape[1] and not enable_gqa:
        raise NotImplementedError(f"{kernel}: G != H needs enable_gqa")


def tokens(x: torch.Tensor) -> torch.Tensor:
    """(B, H, N, d) -> token-major (B N, H, d), a contiguous tensor (a copy unless N = 1)."""
    return x.permute(0, 2, 1, 3).reshape(-1, x.shape[1], x.shape[-1]).contiguous()


def untokens(x_tok: torch.Tensor, B: int, N: int) -> torch.Tensor:
    """Token-major (B N, H, d) -> (B, H, N, d), a view."""
    return x_tok.reshape(B, N, x_tok.shape[1], x_tok.shape[-1]).permute(0, 2, 1, 3)


def token_out(out: torch.Tensor | None, q: torch.Tensor) -> torch.Tensor:
    """The token-major buffer a kernel writes, shaped as ``q`` (B, H, N, d) (these kernels' dv = d): a
    copy of the caller's ``out``, whatever it holds, so a row the kernel leaves alone keeps it; a fresh one
    without ``out``."""
    if out is None:
        B, H, N, d = q.shape
        return torch.empty(B * N, H, d, dtype=q.dtype, device=q.device)
    buf = tokens(out)
    return buf.clone() if buf.data_ptr() == out.data_ptr() else buf  # N = 1: a view; written() copies back


def written(out: torch.Tensor | None, out_tok: torch.Tensor, B: int, N: int) -> torch.Tensor:
    """The kernel's token-major result as (B, H, N, d), contiguous. With a caller's ``out`` the result is
    copied into it and ``out`` returned: its token-major view is a copy whenever N > 1, so writing there
    alone would leave ``out`` unwritten (and the audit's poison check would call rows the kernel wrote
    unwritten)."""
    result = untokens(out_tok, B, N)
    if out is None:
        return result.contiguous()
    out.copy_(result)
    return out


def lengths(cache_seqlens) -> list[int]:
    return [int(x) for x in torch.as_tensor(cache_seqlens).tolist()]


def token_pool(k_cache, v_cache, lens, block_table=None):
    """(k (T, G, d), v (T, G, dv), kv_indptr (B + 1,) int32, kv_indices int32): SGLang's token-pool
    view of the cache; with pages the indices follow the block table."""
    dev = k_cache.device
    if block_table is None:
        B, G, S, d = k_cache.shape
        k = k_cache.permute(0, 2, 1, 3).reshape(B * S, G, d)
        v = v_cache.permute(0, 2, 1, 3).reshape(B * S, G, v_cache.shape[-1])
        idx = [b * S + j for b, L in enumerate(lens) for j in range(L)]
    else:
        n, P, G, d = k_cache.shape
        k, v = k_cache.reshape(n * P, G, d), v_cache.reshape(n * P, G, v_cache.shape[-1])
        table = block_table.tolist()
        idx = [table[b][j // P] * P + j % P for b, L in enumerate(lens) for j in range(L)]
    indptr = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=dev)
    indices = torch.tensor(idx or [0], dtype=torch.int32, device=dev)
    return k.contiguous(), v.contiguous(), indptr, indices


def pages_of(k_cache, v_cache, lens, page: int = 16):
    """(k_pages, v_pages (n, P, G, d), block_table (B, ceil(S / P)) int32) from a contiguous cache,
    pages in order (sequence b owns pages b * m ... b * m + m - 1); slots past S hold 0."""
    B, G, S, d = k_cache.shape
    m = max(1, -(-S // page))
    pad = m * page - S

    def paged(x):
        x = torch.nn.functional.pad(x, (0, 0, 0, pad)) if pad else x  # (B, G, m * P, d)
        return x.reshape(B, G, m, page, x.shape[-1]).permute(0, 2, 3, 1, 4).reshape(B * m, page, G, x.shape[-1])

    table = torch.arange(B * m, dtype=torch.int32, device=k_cache.device).reshape(B, m)
    return paged(k_cache).contiguous(), paged(v_cache).contiguous(), table


def varlen_spans(cu_seqlens_q, cu_seqlens_k) -> list[tuple[int, int, int, int]]:
    """[(q0, q1, k0, k1)] per sequence from the varlen entry's cumulative lengths (B + 1,) each; a bad
    pair (unequal counts, not from 0, decreasing) raises ValueError naming what is wrong."""
    cq, ck = lengths(cu_seqlens_q), lengths(cu_seqlens_k)
    if len(cq) != len(ck) or len(cq) < 1:
        raise ValueError(f"cu_seqlens_q has {len(cq)} offsets, cu_seqlens_k {len(ck)}: expected B + 1 each")
    for name, c in (("cu_seqlens_q", cq), ("cu_seqlens_k", ck)):
        if c[0] != 0 or any(b < a for a, b in zip(c, c[1:], strict=False)):
            raise ValueError(f"{name}={c} must start at 0 and never decrease")
    return [(cq[b], cq[b + 1], ck[b], ck[b + 1]) for b in range(len(cq) - 1)]


def padded_cache(k, v, spans) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Packed keys k (Tk, G, d), v (Tk, G, dv) -> a contiguous cache (B, G, S_max, d), (B, G, S_max, dv)
    with sequence b's keys in its first L_b slots (zeros after), and the lengths L_b."""
    lens = [k1 - k0 for _, _, k0, k1 in spans]
    S = max([1, *lens])
    kc = k.new_zeros(len(spans), k.shape[1], S, k.shape[2])
    vc = v.new_zeros(len(spans), v.shape[1], S, v.shape[2])
    for b, (_, _, k0, k1) in enumerate(spans):
        kc[b, :, :k1 - k0] = k[k0:k1].transpose(0, 1)
        vc[b, :, :k1 - k0] = v[k0:k1].transpose(0, 1)
    return kc, vc, lens


NON_CAUSAL_WINDOWS = ("symmetric", "left", "none")


def window_extent(window_size, is_causal: bool, kernel: str, *, non_causal: str) -> int:
    """flash-attn's ``window_size=(left, right)`` (attnum.kernels.conventions) -> W, the one int a serving
    kernel takes: key j is visible from position p when ``p - W < j`` (W = left + 1), 0 = no window.
    ``non_causal`` is how the kernel bounds a window without ``is_causal``: ``"symmetric"`` (vLLM's unified
    attention: ``|p - j| < W``, so right must equal left), ``"left"`` (the right side unbounded: vLLM's
    prefix_prefill, SGLang's extend; right must be -1) or ``"none"`` (causal windows only). Under
    ``is_causal`` the right side is 0 whatever it says. Anything the kernel cannot express raises
    NotImplementedError naming it (the audit reads it as ``unsupported``)."""
    if non_causal not in NON_CAUSAL_WINDOWS:
        raise ValueError(f"{non_causal=} must be one of {NON_CAUSAL_WINDOWS}")
    if window_size is None:
        return 0
    left, right = (int(x) for x in window_size)
    if left < -1 or right < -1:
        raise NotImplementedError(f"{kernel}: window_size={tuple(window_size)} (sides are >= -1)")
    if is_causal:
        return 0 if left == -1 else left + 1
    if left == -1 and right == -1:
        return 0
    ok = {"symmetric": left == right, "left": left >= 0 and right == -1, "none": False}[non_causal]
    if not ok:
        what = {"symmetric": "a symmetric window (left == right)", "left": "a window bounded on the left only "
                "(right = -1)", "none": "a window with is_causal=True only"}[non_causal]
        raise NotImplementedError(f"{kernel}: without is_causal it takes {what}, not window_size="
                                  f"{tuple(window_size)}")
    return left + 1


def softcap_value(softcap, kernel: str) -> float:
    """The cap a kernel takes as a float (0 = off) from the protocol's ``softcap=`` (None or 0 = off)."""
    if softcap is None:
        return 0.0
    cap = float(softcap)
    if not cap >= 0.0:
        raise NotImplementedError(f"{kernel}: softcap={softcap!r} (a cap > 0, or 0 / None for none)")
    return cap
