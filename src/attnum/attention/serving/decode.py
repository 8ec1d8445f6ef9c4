"""Decode with a KV cache: a few new queries against a long cache, optionally split-KV (flash-decoding).

Shape alphabet: B batch, H query heads, G kv heads (H % G == 0; g = H / G queries share a kv head),
N queries per sequence (N >= 1; 1 is plain decode, > 1 speculative verify or chunked prefill), S the
cache capacity, L_b the valid length of sequence b (``cache_seqlens``), d head dim, dv value dim.

Layout: q (B, H, N, d), k_cache (B, G, S, d), v_cache (B, G, S, dv) -- attnum's layout (flash-attn's
``flash_attn_with_kvcache`` takes (B, S, G, d); its adapter transposes). Keys at positions >= L_b are
padding and are never read (tests fill them with NaN).

Causal alignment (the new queries are the *last* N positions of each sequence):

- ``bottom_right`` (flash-attn >= 2.1, vLLM, FlashInfer): query i sees keys j <= i + L_b - N. At N = 1
  the query sees the whole cache, so causal and non-causal agree.
- ``top_left`` (torch SDPA's ``is_causal``): query i sees keys j <= i. At N = 1 that is key 0 alone:
  the bug of running SDPA's causal mask on a decode step. HuggingFace avoids it by switching causal off
  at N = 1 (``is_causal = q_len > 1``), which is ``is_causal=False`` here.

Split-KV (flash-decoding; FA2 ``flash_fwd_splitkv_kernel`` + ``combine_attn_seqk_parallel``): the key
range is cut by FA2's rule from the *host* ``max_seqlen`` (default S), not from each L_b::

    n_blocks = ceil(max_seqlen / Bc),  per_split = ceil(n_blocks / num_splits) blocks,
    split s = keys [s * per_split * Bc, min((s + 1) * per_split * Bc, L_b))

so a short sequence gets empty splits (LSE -inf), and the cut -- hence the output bits -- depends on
``max_seqlen`` (flashinfer#4647). Each split is one (O, LSE) partial computed by the core's
:func:`attnum.attention.flash.flash_forward` under ``policy`` with its ``out`` site moved to the merge's
``inputs`` format (fp32: FA2's ``out_accum``/``softmax_lse_accum`` are fp32), then merged by
:func:`attnum.attention.serving.merge.merge_states` under ``merge_policy`` (fp32 by default, as every kernel
merges) whose ``out`` site is the decode policy's ``out`` (the combine kernel writes the final dtype).
``num_splits=1`` is the plain kernel: no partials, no merge.

GQA: the g query heads sharing a kv head are packed as rows of one tile (FA3's ``pack_gqa``, FlashInfer's
decode), so K and V are never expanded; each row's arithmetic is that of its own query.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from attnum.attention import masks, steps
from attnum.attention.flash_forward import flash_forward
from attnum.attention.masks import Masking, Tile
from attnum.attention.serving.merge import NEG_INF, State, convert_lse, merge_states, parse_lse_base
from attnum.attention.tiles import DEFAULT_BLOCK, Tiles
from attnum.errors import bad_value
from attnum.numerics.formats import format_of_dtype, get_format
from attnum.numerics.policy import Policy, parse_policy

MERGE_METHOD = "lse"  # flash-attn's combine: LSE first, then weights b^(lse_i - LSE)
KvFn = Callable[[int, int], tuple[torch.Tensor, torch.Tensor]]


def split_bounds(L: int, *, num_splits: int, max_seqlen: int, block_k: int) -> list[tuple[int, int]]:
    """FA2's split-KV cut of one sequence of L valid keys: ``num_splits`` ranges [j0, j1), empty
    (j0 >= j1) where a split starts past L. Splits are whole tiles of ``block_k`` keys."""
    n_blocks = math.ceil(max_seqlen / block_k)
    span = math.ceil(n_blocks / num_splits) * block_k
    return [(s * span, min((s + 1) * span, L)) for s in range(num_splits)]


class _SplitTiles:
    """The masking of stacked splits of one sequence with packed GQA rows, cut per tile.

    Split s covers keys from ``offsets[s]``; a tile's local columns [j0, j1) are the sequence's
    [offsets[s] + j0, offsets[s] + j1). Rows are (g, N) packed: row r is query r % N. All mask
    semantics are ``masks.Masking``'s; this only maps coordinates.
    """

    def __init__(self, mk: Masking, offsets: Sequence[int], g: int):
        self.mk, self.offsets, self.g = mk, tuple(offsets), g

    def tile(self, i0: int, i1: int, j0: int, j1: int, dtype, device) -> Tile:
        keeps = [self.mk.tile(0, self.mk.N, o + j0, o + j1, dtype, device).keep for o in self.offsets]
        if all(k is None for k in keeps):
            return Tile()
        keep = torch.stack([k.repeat(self.g, 1) for k in keeps]).unsqueeze(1)  # (splits, 1, g*N, Bc)
        return Tile(keep=keep[:, :, i0:i1])


def _check_lengths(cache_seqlens, B: int, S: int) -> list[int]:
    if cache_seqlens is None:
        return [S] * B
    lens = torch.as_tensor(cache_seqlens)
    if lens.dtype.is_floating_point or lens.dtype == torch.bool or lens.shape != (B,):
        raise bad_value("cache_seqlens", tuple(lens.shape) if lens.dim() else lens.tolist(),
                        f"an integer tensor of shape ({B},): each sequence's valid cache length")
    out = [int(x) for x in lens.tolist()]
    bad = [x for x in out if not 0 <= x <= S]
    if bad:
        raise bad_value("cache_seqlens", bad[0], f"lengths in 0..{S} (the cache holds S={S} positions)")
    return out


def _check_int(name: str, value, lo: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < lo:
        raise bad_value(name, value, f"an integer >= {lo}")
    return value


def default_merge_policy(policy: Policy) -> Policy:
    """fp32, as kernels merge; fp64 when the decode policy itself is wider than fp32."""
    fp32 = get_format("fp32")
    return parse_policy("fp32" if policy.acc.fits_in(fp32) and policy.out.fits_in(fp32) else "fp64")


def check_decodable(policy: Policy, param: str = "policy") -> None:
    """Refuse a policy the decode paths cannot run: the low-bit schemes (SageAttention's quantized
    Q K^T and P V, :mod:`attnum.attention.lowbit.sage`) exist only as the one-pass prefill
    (:func:`attnum.attention.flash.flash_attention`); running fa2's arithmetic under their name would be
    a silent substitution."""
    if policy.lowbit is not None:
        raise bad_value(param, policy.name or "a low-bit policy",
                        "a policy the decode, chunked and paged paths can run (the low-bit sage policies run "
                        "only as the one-pass prefill)")


def decode_sequences(
    q: torch.Tensor,
    kv: KvFn,
    lens: list[int],
    *,
    G: int,
    dv: int,
    is_causal: bool,
    causal_alignment: str,
    scale: float,
    policy: Policy,
    num_splits: int,
    max_seqlen: int,
    block_k: int,
    merge_policy: Policy,
    merge_method: str,
    base,
    seq_bounds=None,
    kv_order: str = "forward",
) -> tuple[torch.Tensor, torch.Tensor]:
    """The engine behind :func:`decode_attention` and the paged decode: ``kv(b, L)`` returns sequence
    b's first L keys and values as (G, L, d) and (G, L, dv) tensors in their own dtype (a slice of a
    contiguous cache, or pages gathered). Returns O (B, H, N, dv) in the carrier and LSE (B, H, N)
    float64 in ``base``. ``seq_bounds``: per sequence, the key ranges of its splits (a
    :class:`attnum.attention.serving.split_rules.SplitPlan`'s), instead of FA2's cut by ``num_splits``;
    ``kv_order``: the order of the tiles inside each split (``reverse``: FA2's split-KV main loop)."""
    check_decodable(policy)
    B, H, N, _ = q.shape
    g = H // G
    c = policy.carrier
    out = torch.empty(B, H, N, dv, dtype=c, device=q.device)
    lse_out = torch.empty(B, H, N, dtype=torch.float64, device=q.device)
    to_merge = policy.with_overrides(out=merge_policy.inputs)
    final_merge = merge_policy.with_overrides(out=policy.out)
    q_c = steps.load_input(q, policy)
    bufs = _Flat(G * max(lens, default=0))
    for b, L in enumerate(lens):
        qp = q_c[b].reshape(G, g * N, -1)  # (G, g*N, d): packed GQA rows (h_local, i)
        mk = masks.masking(None, is_causal, (1, G, N, L), causal_alignment=causal_alignment)
        bounds = (split_bounds(L, num_splits=num_splits, max_seqlen=max_seqlen, block_k=block_k)
                  if seq_bounds is None else list(seq_bounds[b]))
        split_policy = to_merge if len(bounds) > 1 else policy
        live = [(j0, j1) for j0, j1 in bounds if j1 > j0]
        parts: dict[tuple[int, int], State] = {}
        if live:
            k_src, v_src = kv(b, L)  # (G, L, d) in their own dtype
            span = live[0][1] - live[0][0]  # every live split is full but perhaps the last
            groups = [[r for r in live if r[1] - r[0] == span], [r for r in live if r[1] - r[0] != span]]
            used_k = used_v = 0  # element offsets into the reused buffers
            for group in (gr for gr in groups if gr):
                n, sp, j0 = len(group), group[0][1] - group[0][0], group[0][0]
                k_s = _load_splits(k_src[:, j0:j0 + n * sp], n, policy, bufs, "k", used_k)
                v_s = _load_splits(v_src[:, j0:j0 + n * sp], n, policy, bufs, "v", used_v)
                used_k, used_v = used_k + k_s.numel(), used_v + v_s.numel()
                parts.update(_run_splits(qp, k_s, v_s, group, mk, g, scale, split_policy, block_k, base, kv_order))
        states = [parts.get(r) or _empty(H, N, dv, c, q.device) for r in bounds]
        if len(bounds) == 1:
            o, lse = states[0]
        else:
            o, lse = merge_states(states, policy=final_merge, lse_base=base, method=merge_method)
        out[b] = o.to(c)
        lse_out[b] = lse.double()
    return out, lse_out


class _Flat:
    """One flat carrier buffer per name, sized for the longest sequence (G * L_max * dim elements) and
    reused by every sequence: a fresh 100 MB tensor per sequence costs more in page faults than the
    decode's arithmetic (see :mod:`attnum.numerics.workspace`)."""

    def __init__(self, rows: int):
        self.rows, self.bufs = rows, {}

    def view(self, name: str, start: int, shape, dtype, device) -> torch.Tensor:
        n = math.prod(shape)
        buf = self.bufs.get(name)
        if buf is None or buf.dtype != dtype:
            buf = self.bufs[name] = torch.empty(self.rows * shape[-1], dtype=dtype, device=device)
        return buf[start:start + n].view(shape)


_WIDENABLE = (torch.bfloat16, torch.float16, torch.float32)


def _load_splits(x_GLd: torch.Tensor, n: int, policy: Policy, bufs: _Flat, name: str, start: int) -> torch.Tensor:
    """n consecutive equal splits of x (G, n*span, d) as a contiguous (n, G, span, d) carrier tensor, so
    the stacked splits are one strided batch for the GEMMs (no copy per tile).

    The values are :func:`steps.load_input`'s, bit for bit. When x's dtype is already on the ``inputs``
    grid (the widening is exact) they are written into the reused buffer at element offset ``start``."""
    G, Ln, d = x_GLd.shape
    split_major = x_GLd.unflatten(1, (n, Ln // n)).transpose(0, 1)  # (n, G, span, d) view
    c = policy.carrier
    if x_GLd.dtype != c and x_GLd.dtype in _WIDENABLE and format_of_dtype(x_GLd.dtype).fits_in(policy.inputs):
        return bufs.view(name, start, split_major.shape, c, x_GLd.device).copy_(split_major)
    return steps.load_input(split_major, policy).contiguous()


def _empty(H: int, N: int, dv: int, dtype, device) -> State:
    return State(torch.zeros(H, N, dv, dtype=dtype, device=device),
                 torch.full((H, N), NEG_INF, dtype=torch.float64, device=device))


def _run_splits(qp, k_s, v_s, ranges, mk, g, scale, policy, block_k, base, kv_order="forward") -> dict:
    """Equal-length splits of one sequence, (n, G, span, d), as the batch of one flash forward."""
    G, rows, _ = qp.shape
    n = len(ranges)
    tiles = Tiles(Br=max(1, rows), Bc=block_k)
    o, lse = flash_forward(qp.expand(n, G, rows, qp.shape[-1]), k_s, v_s, _SplitTiles(mk, [r[0] for r in ranges], g),
                           scale=scale, policy=policy, tiles=tiles, kv_order=kv_order)
    H, N = G * g, rows // g
    lse = policy.round("lse", convert_lse(lse, "e", base)) if base != "e" else lse
    return {r: State(o[s].reshape(H, N, -1), lse[s].reshape(H, N)) for s, r in enumerate(ranges)}


def _common(q, k_cache, v_cache, cache_seqlens, num_splits, max_seqlen, block_k, lse_base):
    """Shapes and the shared validation of every decode entry point."""
    B, H, G, N, S, d, dv = masks.check_qkv(q, k_cache, v_cache)
    lens = _check_lengths(cache_seqlens, B, S)
    _check_int("num_splits", num_splits, 1)
    block_k = DEFAULT_BLOCK if block_k is None else _check_int("block_k", block_k, 1)
    max_seqlen = S if max_seqlen is None else _check_int("max_seqlen", max_seqlen, 1)
    if lens and max(lens) > max_seqlen:
        raise bad_value("max_seqlen", max_seqlen, f"at least the longest cache_seqlens entry ({max(lens)})")
    return B, H, G, N, S, d, dv, lens, block_k, max_seqlen, parse_lse_base(lse_base)


@steps.no_autocast
def decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    *,
    cache_seqlens: torch.Tensor | Sequence[int] | None = None,
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
    return_lse: bool = False,
    split_rule=None,
):
    """Decode attention of q (B, H, N, d) against a cache (B, G, S, d) -> (B, H, N, dv) in the carrier.

    ``cache_seqlens`` (B,): valid lengths (default S); ``num_splits``: split-KV chunks merged in
    ``merge_policy`` (None: fp32, or fp64 for a policy wider than fp32) with ``merge_method`` (see
    :mod:`attnum.attention.serving.merge`); ``max_seqlen``: the host's bound that sets the split cut (default S);
    ``block_k``: the KV tile Bc (default 128). ``return_lse`` also returns the LSE (B, H, N) float64 in
    ``lse_base`` (``"e"`` or 2), -inf for rows with no key. ``split_rule``: a
    :mod:`attnum.attention.serving.split_rules` rule (``"fa2"``, ``"flashinfer:2048"``, ...) or a ready
    ``SplitPlan``; it decides every sequence's splits, the tile and the merge method from this batch.
    """
    policy = parse_policy(policy)
    B, H, G, N, S, d, dv, lens, block_k, max_seqlen, base = _common(
        q, k_cache, v_cache, cache_seqlens, num_splits, max_seqlen, block_k, lse_base)
    mp = default_merge_policy(policy) if merge_policy is None else parse_policy(merge_policy)
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    seq_bounds, kv_order = None, "forward"
    if split_rule is not None:
        from attnum.attention.serving.split_rules import as_plan

        plan = as_plan(split_rule, lens=lens, heads=H, kv_heads=G, head_dim=d, queries=N, max_seqlen=max_seqlen,
                       num_splits=num_splits)
        seq_bounds, block_k, merge_method, kv_order = plan.bounds, plan.block_k, plan.merge_method, plan.kv_order
    out, lse = decode_sequences(
        q, lambda b, L: (k_cache[b, :, :L], v_cache[b, :, :L]), lens, G=G, dv=dv, is_causal=is_causal,
        causal_alignment=causal_alignment, scale=scale, policy=policy, num_splits=num_splits,
        max_seqlen=max_seqlen, block_k=block_k, merge_policy=mp, merge_method=merge_method, base=base,
        seq_bounds=seq_bounds, kv_order=kv_order)
    return (out, lse) if return_lse else out


@steps.no_autocast
def decode_reference(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    *,
    cache_seqlens: torch.Tensor | Sequence[int] | None = None,
    is_causal: bool = True,
    causal_alignment: str = "bottom_right",
    scale: float | None = None,
    lse_base: object = "e",
    return_lse: bool = False,
    **_emulation_knobs,
):
    """The plain reference beside :func:`decode_attention`: float64 golden attention per sequence on
    its first L_b keys, no splits. Takes (and ignores) the emulation's knobs (policy, num_splits, ...)
    so the two are called the same way."""
    from attnum.attention.golden import golden_attention

    B, H, G, N, S, d, dv, lens, _, _, base = _common(q, k_cache, v_cache, cache_seqlens, 1, None, None, lse_base)
    out = torch.empty(B, H, N, dv, dtype=torch.float64, device=q.device)
    lse = torch.empty(B, H, N, dtype=torch.float64, device=q.device)
    for b, L in enumerate(lens):
        o_b, l_b = golden_attention(q[b:b + 1], k_cache[b:b + 1, :, :L], v_cache[b:b + 1, :, :L], is_causal=is_causal,
                                    causal_alignment=causal_alignment, scale=scale, return_lse=True)
        out[b], lse[b] = o_b[0], convert_lse(l_b[0], "e", base)
    return (out, lse) if return_lse else out
