"""Paged KV cache: a block table of page ids into a page pool, gathered as a kernel does.

Shape alphabet: B batch, H query heads, G kv heads, N queries per sequence, P page size (tokens per
page), n_pages pool size, max_pages block-table width, L_b valid length of sequence b, d / dv head dims.

Layout (flash-attn ``flash_attn_with_kvcache(block_table=...)``, vLLM's FlashAttention backend,
FlashInfer ``kv_layout="NHD"``):

- ``k_pages`` (n_pages, P, G, d), ``v_pages`` (n_pages, P, G, dv): the pool, in the cache's dtype;
  FlashInfer's ``kv_layout="HND"`` is (n_pages, G, P, d), taken with ``kv_layout="HND"``;
- ``block_table`` (B, max_pages) integer: sequence b's token t is slot t % P of page
  ``block_table[b, t // P]``. Only the first ceil(L_b / P) entries of a row are read; the rest (vLLM
  pads with 0 or -1) are never looked at, and neither is any slot past L_b in the last page;
- ``cache_seqlens`` (B,): L_b. FlashInfer's CSR form (``kv_indptr``, ``kv_indices``,
  ``kv_last_page_len``) converts with :func:`block_table_from_csr`.

Page sizes: vLLM takes {1, 8, 16, 32, 64, 128, 256}, FlashMLA 64, FA3's tests {1, 4, 128}; FA2 requires a
multiple of 256. Any positive P works here. A kernel tiles the KV by page (``block_k=None``: Bc = P, as
the FA3/FlashInfer paged paths do for small pages) or by a tile of whole pages / a page of whole tiles
(``block_k`` a multiple or divisor of P); anything else cannot be gathered tile by tile and is refused.
The split-KV cut follows :func:`attnum.attention.serving.decode.split_bounds` with the host ``max_seqlen``
defaulting to the block table's capacity max_pages * P (flash-attn's ``seqlen_k`` for paged KV).

Given the same tiles, paged decode is bit-identical to contiguous decode in every precision: the gather
moves values, it does not round them. What page size changes in low precision is the tile, hence the
online-softmax rescaling steps (Bc = P).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from attnum.attention import masks, steps
from attnum.attention.serving.decode import (
    MERGE_METHOD,
    _check_int,
    decode_reference,
    decode_sequences,
    default_merge_policy,
)
from attnum.attention.serving.merge import parse_lse_base
from attnum.errors import bad_value
from attnum.numerics.policy import Policy, parse_policy

KV_LAYOUTS = ("NHD", "HND")


def _nhd(pages: torch.Tensor, kv_layout: str, name: str) -> torch.Tensor:
    if kv_layout not in KV_LAYOUTS:
        raise bad_value("kv_layout", kv_layout, f"one of {KV_LAYOUTS} (NHD: (pages, P, G, d); HND: (pages, G, P, d))")
    if not isinstance(pages, torch.Tensor) or pages.dim() != 4 or not pages.is_floating_point():
        raise bad_value(f"{name}.shape", tuple(getattr(pages, "shape", ())),
                        f"a 4-D floating tensor ({'n_pages, P, G, d' if kv_layout == 'NHD' else 'n_pages, G, P, d'})")
    return pages if kv_layout == "NHD" else pages.transpose(1, 2)


def check_paged(q, k_pages, v_pages, block_table, cache_seqlens, kv_layout="NHD"):
    """Validate the paged inputs -> (k_pages, v_pages) in NHD, the lengths, P and max_pages.

    Every error is one line naming the parameter, its value and what is allowed."""
    k_pages, v_pages = _nhd(k_pages, kv_layout, "k_pages"), _nhd(v_pages, kv_layout, "v_pages")
    n_pages, P, G, d = k_pages.shape
    if v_pages.shape[:3] != (n_pages, P, G):
        raise bad_value("v_pages.shape", tuple(v_pages.shape), f"(n_pages, P, G, dv) = ({n_pages}, {P}, {G}, dv)")
    if not isinstance(q, torch.Tensor) or q.dim() != 4 or q.shape[-1] != d:
        raise bad_value("q.shape", tuple(getattr(q, "shape", ())), f"(B, H, N, {d})")
    B = q.shape[0]
    bt = torch.as_tensor(block_table) if block_table is not None else None
    if bt is None or bt.dim() != 2 or bt.shape[0] != B or bt.dtype.is_floating_point or bt.dtype == torch.bool:
        raise bad_value("block_table", None if bt is None else tuple(bt.shape),
                        f"an integer tensor (B={B}, max_pages) of page ids")
    max_pages = bt.shape[1]
    if cache_seqlens is None:
        raise bad_value("cache_seqlens", None, f"an integer tensor ({B},) of sequence lengths")
    lens_t = torch.as_tensor(cache_seqlens)
    if lens_t.dtype.is_floating_point or lens_t.shape != (B,):
        raise bad_value("cache_seqlens", tuple(lens_t.shape), f"an integer tensor of shape ({B},)")
    lens = [int(x) for x in lens_t.tolist()]
    for b, L in enumerate(lens):
        if not 0 <= L <= max_pages * P:
            raise bad_value(f"cache_seqlens[{b}]", L, f"a length in 0..{max_pages * P} (block_table holds "
                            f"{max_pages} pages of {P})")
        used = bt[b, :math.ceil(L / P)].tolist()
        for i, page in enumerate(used):
            if not 0 <= page < n_pages:
                raise bad_value(f"block_table[{b}, {i}]", page, f"a page id in 0..{n_pages - 1} (n_pages={n_pages})")
    return k_pages, v_pages, bt, lens, P, max_pages


def gather(pages_NPGd: torch.Tensor, table_row: torch.Tensor, L: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """Sequence keys (G, L, d) from its pages, in the pool's dtype: only the ceil(L / P) pages it uses,
    and of the last one only the slots below L. ``out``: a reused (max_pages, P, G, d) buffer of the
    pool's dtype to gather into (a fresh tensor per sequence costs page faults, :mod:`attnum.numerics.workspace`)."""
    P = pages_NPGd.shape[1]
    n = math.ceil(L / P)
    ids = table_row[:n].to(device=pages_NPGd.device, dtype=torch.long)
    got = pages_NPGd.index_select(0, ids) if out is None else torch.index_select(pages_NPGd, 0, ids, out=out[:n])
    return got.flatten(0, 1)[:L].transpose(0, 1)


def _tile(block_k: int | None, P: int) -> int:
    if block_k is None:
        return P
    _check_int("block_k", block_k, 1)
    if block_k % P and P % block_k:
        raise bad_value("block_k", block_k, f"a multiple or a divisor of page_size={P} (a tile of whole pages, "
                        "or a page of whole tiles), or None to tile by page")
    return block_k


@steps.no_autocast
def paged_decode_attention(
    q: torch.Tensor,
    k_pages: torch.Tensor,
    v_pages: torch.Tensor,
    *,
    block_table: torch.Tensor,
    cache_seqlens: torch.Tensor | Sequence[int],
    is_causal: bool = True,
    causal_alignment: str = "bottom_right",
    scale: float | None = None,
    policy: str | Policy = "fp32",
    num_splits: int = 1,
    max_seqlen: int | None = None,
    block_k: int | None = None,
    merge_policy: str | Policy | None = None,
    merge_method: str = MERGE_METHOD,
    lse_base: object = "e",
    kv_layout: str = "NHD",
    return_lse: bool = False,
    split_rule=None,
):
    """:func:`attnum.attention.serving.decode.decode_attention` on a paged cache -> (B, H, N, dv) in the carrier.

    ``block_k=None`` tiles by page (Bc = page size); ``max_seqlen`` defaults to max_pages * page_size.
    ``split_rule``: as decode_attention's (the splits and the merge method); the tile stays the page's.
    """
    policy = parse_policy(policy)
    k_pages, v_pages, bt, lens, P, max_pages = check_paged(q, k_pages, v_pages, block_table, cache_seqlens, kv_layout)
    B, H, N, d = q.shape
    G, dv = k_pages.shape[2], v_pages.shape[3]
    if G < 1 or H % G:
        raise bad_value("kv heads", G, f"a divisor of the {H} query heads")
    _check_int("num_splits", num_splits, 1)
    Bc = _tile(block_k, P)
    max_seqlen = max_pages * P if max_seqlen is None else _check_int("max_seqlen", max_seqlen, 1)
    if lens and max(lens) > max_seqlen:
        raise bad_value("max_seqlen", max_seqlen, f"at least the longest cache_seqlens entry ({max(lens)})")
    mp = default_merge_policy(policy) if merge_policy is None else parse_policy(merge_policy)
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    seq_bounds, kv_order = None, "forward"
    if split_rule is not None:
        from attnum.attention.serving.split_rules import as_plan

        plan = as_plan(split_rule, lens=lens, heads=H, kv_heads=G, head_dim=d, queries=N, max_seqlen=max_seqlen,
                       num_splits=num_splits)
        seq_bounds, merge_method, kv_order = plan.bounds, plan.merge_method, plan.kv_order
    bufs = {name: torch.empty(max_pages, P, G, x.shape[-1], dtype=x.dtype, device=x.device)
            for name, x in (("k", k_pages), ("v", v_pages))}
    out, lse = decode_sequences(
        q, lambda b, L: (gather(k_pages, bt[b], L, bufs["k"]), gather(v_pages, bt[b], L, bufs["v"])), lens, G=G, dv=dv,
        is_causal=is_causal, causal_alignment=causal_alignment, scale=scale, policy=policy, num_splits=num_splits,
        max_seqlen=max_seqlen, block_k=Bc, merge_policy=mp, merge_method=merge_method, base=parse_lse_base(lse_base),
        seq_bounds=seq_bounds, kv_order=kv_order)
    return (out, lse) if return_lse else out


def paged_decode_reference(q, k_pages, v_pages, *, block_table, cache_seqlens, is_causal: bool = True,
                           causal_alignment: str = "bottom_right", scale: float | None = None, lse_base: object = "e",
                           kv_layout: str = "NHD", return_lse: bool = False, **_emulation_knobs):
    """The float64 reference beside :func:`paged_decode_attention`: the pages gathered per sequence, then
    :func:`attnum.attention.serving.decode.decode_reference` (emulation knobs accepted and ignored)."""
    k_pages, v_pages, bt, lens, _, _ = check_paged(q, k_pages, v_pages, block_table, cache_seqlens, kv_layout)
    S = max(lens, default=0)
    B, G, d, dv = q.shape[0], k_pages.shape[2], k_pages.shape[3], v_pages.shape[3]
    k = torch.zeros(B, G, S, d, dtype=torch.float64, device=q.device)
    v = torch.zeros(B, G, S, dv, dtype=torch.float64, device=q.device)
    for b, L in enumerate(lens):
        k[b, :, :L], v[b, :, :L] = gather(k_pages, bt[b], L), gather(v_pages, bt[b], L)
    masks.check_qkv(q, k, v)
    return decode_reference(q, k, v, cache_seqlens=torch.tensor(lens), is_causal=is_causal,
                            causal_alignment=causal_alignment, scale=scale, lse_base=lse_base, return_lse=return_lse)


def to_pages(cache_BGSd: torch.Tensor, page_size: int, *, cache_seqlens=None, spare_pages: int = 0,
             fill: float = math.nan, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Scatter a contiguous cache (B, G, S, d) into a shuffled pool -> (pages (n_pages, P, G, d), block_table).

    Each sequence gets ceil(L_b / P) pages at seeded random ids; ``spare_pages`` unused pages are added;
    every slot that holds no key (past L_b, unused pages) is ``fill`` (NaN: any read of it shows), and so
    is every block-table entry past a sequence's pages pointed at a spare page when there is one.
    """
    _check_int("page_size", page_size, 1)
    _check_int("spare_pages", spare_pages, 0)
    B, G, S, d = cache_BGSd.shape
    lens = [S] * B if cache_seqlens is None else [int(x) for x in torch.as_tensor(cache_seqlens).tolist()]
    need = [math.ceil(L / page_size) for L in lens]
    max_pages = max(1, math.ceil(S / page_size))
    n_pages = sum(need) + spare_pages
    perm = torch.randperm(max(n_pages, 1), generator=torch.Generator().manual_seed(seed)).tolist()
    pages = torch.full((max(n_pages, 1), page_size, G, d), fill, dtype=cache_BGSd.dtype)
    unused = perm[sum(need)] if spare_pages else 0
    table = torch.full((B, max_pages), unused, dtype=torch.int32)
    nxt = 0
    for b, L in enumerate(lens):
        for i in range(need[b]):
            page, t0 = perm[nxt], i * page_size
            t1 = min(L, t0 + page_size)
            pages[page, :t1 - t0] = cache_BGSd[b, :, t0:t1].transpose(0, 1)
            table[b, i] = page
            nxt += 1
    return pages, table


def block_table_from_csr(kv_indptr, kv_indices, kv_last_page_len, page_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """FlashInfer's CSR page list -> (block_table (B, max_pages) int32, cache_seqlens (B,) int32).

    Sequence b owns pages ``kv_indices[kv_indptr[b]:kv_indptr[b+1]]``; its last page holds
    ``kv_last_page_len[b]`` tokens (1..P), so L_b = (pages - 1) * P + last (0 with no page)."""
    _check_int("page_size", page_size, 1)
    indptr = [int(x) for x in torch.as_tensor(kv_indptr).tolist()]
    indices = torch.as_tensor(kv_indices).tolist()
    last = [int(x) for x in torch.as_tensor(kv_last_page_len).tolist()]
    B = len(indptr) - 1
    if B < 0 or len(last) != B or any(b > a for a, b in zip(indptr[1:], indptr[:-1])):
        raise bad_value("kv_indptr", indptr, "a non-decreasing list of B + 1 offsets, with B last-page lengths")
    width = max([indptr[b + 1] - indptr[b] for b in range(B)] + [1])
    table = torch.zeros(B, width, dtype=torch.int32)
    lens = torch.zeros(B, dtype=torch.int32)
    for b in range(B):
        ids = indices[indptr[b]:indptr[b + 1]]
        if ids and not 1 <= last[b] <= page_size:
            raise bad_value(f"kv_last_page_len[{b}]", last[b], f"1..{page_size} (tokens in the last page)")
        table[b, :len(ids)] = torch.tensor(ids, dtype=torch.int32)
        lens[b] = (len(ids) - 1) * page_size + last[b] if ids else 0
    return table, lens
