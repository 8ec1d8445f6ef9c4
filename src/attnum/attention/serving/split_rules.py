"""Split rules: how a serving kernel cuts each sequence's KV cache into split-KV partials.

Shape alphabet: B batch (sequences), H query heads, G kv heads, N queries per sequence, L_b the
valid length of sequence b, d head dim.

A kernel decides the split of *one* sequence from the shape of the *whole* batch, which is why a
request's output bits can depend on its neighbours (flash-attention#1897: "I don't think it's batch
invariant unless you fix the split-KV size"). Each rule below is re-expressed from its public source
(the line each step follows is cited); :func:`plan_splits` returns a :class:`SplitPlan`: per sequence
the key ranges [j0, j1) of its partials (empty ranges included, as the kernel launches them), the
KV tile Bc each partial walks, and the merge method the kernel's combine follows
(:mod:`attnum.attention.serving.merge`).

========================= =============================================================== =========
rule                      cut (source)                                                     invariant
========================= =============================================================== =========
``count:N``               N splits of ceil(n_blocks / N) tiles, n_blocks from max_seqlen  yes*
``fa2[:sms=S]``           flash-attn 2 ``num_splits_heuristic`` (csrc/flash_attn/          no
                          flash_api.cpp): splits from B * heads * m_blocks vs 2 * SMs
``flashinfer:SIZE``       fixed split size, splits at 0, SIZE, 2 SIZE ... (FlashInfer      yes
                          PR #1675 ``fixed_split_size``)
``sglang-fixed:TILE``     SGLang ``--triton-attention-split-tile-size`` (PR #10425):       yes
                          ceil(L / TILE) splits, each rounded up to MIN_BLOCK_KV = 32
``sglang[:sms=S]``        SGLang's default ``get_num_kv_splits_triton``                    no
                          (triton_ops/metadata.py): splits from max/min length, batch
``vllm[:segments=16]``    vLLM ``unified_attention`` (triton_unified_attention.py): 3D     no
                          (16 softmax segments, tile 16) when B <= 128 // G, else 2D
``vllm-invariant``        the same with ``VLLM_BATCH_INVARIANT`` (2D always)               yes
========================= =============================================================== =========

(*) ``count:N`` with the host bound fixed; its cut still moves with ``max_seqlen`` (flashinfer#4647).
The merge arithmetic is attnum's (O, LSE) merge with the kernel's order of operations where it
matches (flash-attn's combine: ``lse``; FlashInfer's and SGLang's stage-2 loops: ``online``); vLLM's
``reduce_segments`` combines unnormalised accumulators, which attnum approximates with ``ratio``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from attnum.errors import bad_value

RULES = ("count", "fa2", "flashinfer", "sglang-fixed", "sglang", "vllm", "vllm-invariant")
INVARIANT = frozenset({"count", "flashinfer", "sglang-fixed", "vllm-invariant"})
SGLANG_MIN_BLOCK_KV = 32  # triton_ops/decode_attention.py: kv_len_per_split rounded up to this
VLLM_MIN_LAUNCH_GRID_SIZE_2D = 128  # v1/attention/backends/triton_attn.py (NUM_PAR_SOFTMAX_SEGMENTS = 16 there);
# with CUDA graphs the backend snaps the threshold to the nearest capture size, not modelled here
VLLM_TILE_3D, VLLM_TILE_2D = 16, 32  # _get_tile_size: decode (element size >= 2) / prefill tile
_DEFAULT = {"count": 1, "flashinfer": 2048, "sglang-fixed": 256}
_PARAMS = {"count": (), "fa2": ("sms", "max_splits"), "flashinfer": ("tile",), "sglang-fixed": ("tile",),
           "sglang": ("sms", "max_splits", "tile"), "vllm": ("segments",), "vllm-invariant": ()}

Ranges = tuple[tuple[int, int], ...]


@dataclass(frozen=True, kw_only=True)
class SplitRule:
    """One split rule. ``size``: N for ``count``, the split size for ``flashinfer`` (tokens; FlashInfer
    counts pages, equal at page size 1), the tile for ``sglang-fixed``. ``sms``: the device's SM count
    (132: H100/H200 SXM; 108: A100). ``max_splits``: fa2's cap (128, flash_api.cpp) or SGLang's
    ``--triton-attention-num-kv-splits`` (default 8). ``tile``: the emulated KV tile Bc where the
    source's is not a fixed function of the shape (FlashInfer, SGLang: a modelling choice, 64 / 32)."""

    name: str = "count"
    size: int | None = None
    sms: int = 132
    max_splits: int | None = None
    segments: int = 16
    tile: int | None = None

    def __post_init__(self) -> None:
        if self.name not in RULES:
            raise bad_value("split_rule", self.name, f"one of {RULES}")
        if self.size is None and self.name in _DEFAULT:
            object.__setattr__(self, "size", _DEFAULT[self.name])
        if self.max_splits is None:
            object.__setattr__(self, "max_splits", 128 if self.name == "fa2" else 8)
        for field in ("size", "tile"):
            v = getattr(self, field)
            if v is not None and not _pos(v):
                raise bad_value(f"split_rule.{field}", v, "a positive integer")
        for field in ("sms", "max_splits", "segments"):
            if not _pos(getattr(self, field)):
                raise bad_value(f"split_rule.{field}", getattr(self, field), "a positive integer")

    @property
    def batch_invariant(self) -> bool:
        """Whether the rule's cut of a sequence depends on that sequence alone (by construction)."""
        return self.name in INVARIANT

    @property
    def label(self) -> str:
        if self.name in _DEFAULT:
            return f"{self.name}:{self.size}"
        if self.name in ("fa2", "sglang"):
            return f"{self.name}:sms={self.sms}"
        return self.name


@dataclass(frozen=True)
class SplitPlan:
    """What a kernel launches for one batch: ``bounds[b]`` the key ranges of sequence b's partials,
    ``block_k`` the tile, ``merge_method`` the combine's order, ``note`` how the rule got there,
    ``kv_order`` the order of the tiles inside a split."""

    bounds: tuple[Ranges, ...]
    block_k: int
    merge_method: str
    note: str = ""
    kv_order: str = "forward"

    def select(self, rows: Sequence[int]) -> SplitPlan:
        """The plan of a sub-batch (the arithmetic of a sequence depends only on its own ranges)."""
        return SplitPlan(tuple(self.bounds[r] for r in rows), self.block_k, self.merge_method, self.note,
                         self.kv_order)


def _pos(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def parse_split_rule(spec: str | SplitRule | None) -> SplitRule:
    """``NAME[:SIZE][,key=value...]`` or ``NAME:key=value``: ``count:4``, ``fa2``, ``fa2:sms=108``,
    ``flashinfer:2048``, ``sglang-fixed:256``, ``sglang:max_splits=16``, ``vllm``, ``vllm-invariant``."""
    if isinstance(spec, SplitRule):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise bad_value("split_rule", spec, f"NAME[:SIZE] with NAME in {RULES}")
    name, _, rest = spec.strip().partition(":")
    name = name.strip().lower()
    if name not in RULES:
        raise bad_value("split_rule", spec, f"NAME[:SIZE] with NAME in {RULES}")
    kw: dict[str, int] = {}
    for part in (p.strip() for p in rest.replace(",", " ").split() if p.strip()):
        key, eq, value = part.partition("=")
        if not eq:
            key, value = "size", key
        if key not in ("size", *_PARAMS[name]) or (key == "size" and name not in _DEFAULT):
            raise bad_value("split_rule", spec, f"{name} takes {('SIZE',) if name in _DEFAULT else ()}"
                            f"{tuple(f'{k}=N' for k in _PARAMS[name])}")
        try:
            kw[key] = int(value)
        except ValueError:
            raise bad_value(f"split_rule.{key}", value, "an integer") from None
    return SplitRule(name=name, **kw)


def fa2_block_n(head_dim: int) -> int:
    """flash_api.cpp ``set_params_splitkv``: kBlockN of the split-KV kernel from the head dim."""
    return 256 if head_dim <= 64 else (128 if head_dim <= 128 else 64)


def fa2_num_splits_heuristic(batch_nheads_mblocks: int, num_sms: int, num_n_blocks: int, max_splits: int) -> int:
    """flash_api.cpp ``num_splits_heuristic``: 1 when the blocks almost fill the SMs (>= 80%); else
    the smallest eligible split count whose wave efficiency is >= 85% of the best. A count is
    ineligible when it gives the same blocks per split as the count before it."""
    if batch_nheads_mblocks >= 0.8 * num_sms:
        return 1
    max_splits = min(max_splits, num_sms, num_n_blocks)

    def eligible(s: int) -> bool:
        return s == 1 or _cdiv(num_n_blocks, s) != _cdiv(num_n_blocks, s - 1)

    eff = {}
    for s in range(1, max_splits + 1):
        if eligible(s):
            waves = batch_nheads_mblocks * s / num_sms
            eff[s] = waves / math.ceil(waves)
    best = max(eff.values(), default=0.0)
    return next((s for s, e in eff.items() if e >= 0.85 * best), 1)


def fa2_cut(L: int, *, num_splits: int, max_seqlen: int, block_n: int) -> Ranges:
    """FA2's split of one sequence: ceil(n_blocks / num_splits) tiles per split, n_blocks from the
    host ``max_seqlen`` (flash_fwd_kernel.h ``compute_attn_1rowblock_splitkv``: n_block_min/max)."""
    span = _cdiv(_cdiv(max_seqlen, block_n), num_splits) * block_n
    return tuple((s * span, min((s + 1) * span, L)) for s in range(num_splits))


def fixed_cut(L: int, size: int) -> Ranges:
    """Splits at 0, size, 2 size, ...: the cut of a prefix is the same at every length."""
    return tuple((s * size, min((s + 1) * size, L)) for s in range(max(1, _cdiv(L, size))))


def sglang_cut(L: int, num_kv_splits: int) -> Ranges:
    """decode_attention.py ``_fwd_kernel_stage1``: kv_len_per_split = ceil(ceil(L / n) / 32) * 32."""
    per = _cdiv(_cdiv(L, num_kv_splits), SGLANG_MIN_BLOCK_KV) * SGLANG_MIN_BLOCK_KV if L else SGLANG_MIN_BLOCK_KV
    return tuple((s * per, min((s + 1) * per, L)) for s in range(num_kv_splits))


def sglang_num_kv_splits(lens: Sequence[int], *, heads: int, kv_heads: int, max_kv_splits: int,
                         core_count: int) -> list[int]:
    """triton_ops/metadata.py ``get_num_kv_splits_triton`` (num_group = 1, plain decode)."""
    max_len, min_len = max(lens), max(1, min(lens))
    if max_len * 8 < min_len * 10:  # lengths within 25%: treat as equal
        min_len = max_len
    s1 = min(_cdiv(max_len, min_len), max_kv_splits)
    chunk1 = _cdiv(max_len, s1)
    ext_cores = int(core_count * max(math.log2(max_len / 64.0), 1.0))  # "let num_kv_split grow with seqlen"
    group = heads // kv_heads
    token_grid = len(lens) * heads if group == 1 else len(lens) * _cdiv(heads, min(16, group))
    s2 = min(_cdiv(ext_cores, token_grid), max_kv_splits)
    chunk2 = _cdiv(max_len, s2)
    return [max(_cdiv(L, chunk1), _cdiv(L, chunk2), 1) for L in lens]


def plan_splits(rule: str | SplitRule, *, lens: Sequence[int], heads: int, kv_heads: int, head_dim: int,
                queries: int = 1, max_seqlen: int | None = None) -> SplitPlan:
    """The split plan ``rule`` gives a batch of sequences of lengths ``lens`` (B,)."""
    r = parse_split_rule(rule)
    lens = [int(x) for x in lens]
    if not lens:
        raise bad_value("lens", lens, "at least one sequence length")
    host = max(max(lens), 1) if max_seqlen is None else max_seqlen
    B, G = len(lens), kv_heads
    if r.name == "count":
        bn = 128
        return SplitPlan(tuple(fa2_cut(L, num_splits=r.size, max_seqlen=host, block_n=bn) for L in lens), bn, "lse",
                         f"{r.size} split(s)")
    if r.name == "fa2":
        bn = fa2_block_n(head_dim)
        # mha_fwd_kvcache: a decode step with GQA swaps (N=1, H) -> (N=H/G, G) before the heuristic.
        h_eff, n_eff = (G, heads // G) if queries == 1 and heads > G else (heads, queries)
        m_blocks = _cdiv(n_eff, 64)
        n = fa2_num_splits_heuristic(B * h_eff * m_blocks, 2 * r.sms, _cdiv(host, bn), r.max_splits)
        # flash_fwd_kernel.h compute_attn_1rowblock_splitkv walks a split's blocks from the last one down.
        return SplitPlan(tuple(fa2_cut(L, num_splits=n, max_seqlen=host, block_n=bn) for L in lens), bn, "lse",
                         f"num_splits={n} (B*h*m_blocks={B * h_eff * m_blocks}, 2*SMs={2 * r.sms}, "
                         f"n_blocks={_cdiv(host, bn)})", kv_order="reverse")
    if r.name == "flashinfer":
        tile = r.tile or min(64, r.size)
        return SplitPlan(tuple(fixed_cut(L, r.size) for L in lens), tile, "online", f"split size {r.size}")
    if r.name == "sglang-fixed":
        splits = [max(1, _cdiv(L, r.size)) for L in lens]  # triton_backend.py get_num_kv_splits, deterministic
        return SplitPlan(tuple(sglang_cut(L, n) for L, n in zip(lens, splits)), r.tile or SGLANG_MIN_BLOCK_KV,
                         "online", f"split tile {r.size}")
    if r.name == "sglang":
        splits = sglang_num_kv_splits(lens, heads=heads, kv_heads=G, max_kv_splits=r.max_splits, core_count=r.sms)
        return SplitPlan(tuple(sglang_cut(L, n) for L, n in zip(lens, splits)), r.tile or SGLANG_MIN_BLOCK_KV,
                         "online", f"num_kv_splits={splits[0]} for the first sequence")
    threshold = VLLM_MIN_LAUNCH_GRID_SIZE_2D // G
    if r.name == "vllm" and queries == 1 and B <= threshold:  # use_3d: not (num_seqs > seq_threshold_3D)
        cut = []
        for L in lens:
            per = max(1, _cdiv(L, r.segments * VLLM_TILE_3D)) * VLLM_TILE_3D  # tiles_per_segment * TILE_SIZE
            cut.append(tuple((s * per, min((s + 1) * per, L)) for s in range(r.segments) if s * per < L) or ((0, 0),))
        return SplitPlan(tuple(cut), VLLM_TILE_3D, "ratio", f"3D kernel, {r.segments} segments (B={B} <= {threshold})")
    return SplitPlan(tuple(((0, L),) for L in lens), VLLM_TILE_2D, "ratio",
                     f"2D kernel (B={B} > {threshold})" if r.name == "vllm" else "2D kernel (batch invariant)")


def as_plan(split_rule, *, lens: Sequence[int], heads: int, kv_heads: int, head_dim: int, queries: int,
            max_seqlen: int | None, num_splits: int = 1) -> SplitPlan:
    """A decode entry point's ``split_rule`` (a rule, its text, or a ready :class:`SplitPlan` for these
    B sequences) -> the plan; ``num_splits`` must then be left at 1 (the rule decides)."""
    if num_splits != 1:
        raise bad_value("num_splits", num_splits, "1 when split_rule is given (the rule decides the splits)")
    if isinstance(split_rule, SplitPlan):
        if len(split_rule.bounds) != len(lens):
            raise bad_value("split_rule", f"a plan for {len(split_rule.bounds)} sequences",
                            f"a plan for the {len(lens)} sequences of this call")
        for b, (L, ranges) in enumerate(zip(lens, split_rule.bounds)):
            if ranges and max(j1 for _, j1 in ranges) != L and L > 0:
                raise bad_value(f"split_rule.bounds[{b}]", ranges, f"ranges covering the {L} keys of sequence {b}")
        return split_rule
    return plan_splits(split_rule, lens=lens, heads=heads, kv_heads=kv_heads, head_dim=head_dim, queries=queries,
                       max_seqlen=max_seqlen)
