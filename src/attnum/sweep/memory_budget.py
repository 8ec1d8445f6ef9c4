"""What a configuration needs in memory, estimated before anything is allocated, against what is here.

Every study keeps its (B, H, N, S, d) tensors whole and cuts the score matrix into query chunks of
about ``2**23`` elements (:func:`attnum.attention.steps.query_chunk`), so a forward point needs

- the inputs: float64 samples q (B, H, N, d), k, v (B, G, S, d), and their rounded copies;
- k and v expanded to H heads for the golden value (GQA);
- the outputs (golden, baseline, flash: (B, H, N, d)) and the metrics' temporaries over them;
- a few score-sized chunk buffers: ``max(2**23, B*H*S)`` elements each (one row is B*H*S);
- flash's per-key-tile state: scores, probabilities and their rounded copies for every query at
  once, (B, H, N, Bc) each.

A backward point keeps autograd graphs over the whole (B, H, N, S) score matrix: the float64 golden
and the emulated baseline store several N x S tensors (scores, probabilities, the rounded copy at
each site), so gradients cost ``GRAD_SCORE_COPIES`` float64 score matrices.

Everything is counted as float64 (8 bytes), also what a study keeps in a narrower carrier, so the
estimate is an upper bound of the big buffers (a test checks it against measured peak RSS; the
interpreter and torch's own ~300 MB are not counted). :func:`require` compares it with
:func:`available_bytes` and refuses with one line, :class:`attnum.errors.AttnumEnvironmentError`,
before the first tensor exists.

Nothing here imports torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from attnum.errors import AttnumEnvironmentError

ENV_LIMIT = "ATTNUM_MEMORY_LIMIT_BYTES"
F64 = 8
CHUNK_ELEMS = 1 << 23  # attnum.attention.steps.query_chunk's budget
CHUNK_BUFFERS = 6  # scores, probabilities, mask tile, rounded copy and two temporaries of one chunk
OUTPUT_COPIES = 12  # golden, baseline, flash outputs, flash's acc/m/l, the metrics' temporaries
TILE_BUFFERS = 8  # flash's (B, H, N, Bc) scores, exp, rounded copies and temporaries of one key tile
GRAD_SCORE_COPIES = 8  # float64 (B, H, N, S) matrices the golden and baseline autograd graphs keep


@dataclass(frozen=True)
class Shape:
    """B batch, H query heads, G key/value heads, N queries, S keys, d head dim (dv = d)."""

    B: int
    H: int
    G: int
    N: int
    S: int
    d: int
    Bc: int = 128


def forward_bytes(s: Shape) -> int:
    """Upper bound of one forward point's big buffers (golden, baseline, flash, metrics)."""
    q, kv, kv_h, o = s.B * s.H * s.N * s.d, s.B * s.G * s.S * s.d, s.B * s.H * s.S * s.d, s.B * s.H * s.N * s.d
    chunk = max(CHUNK_ELEMS, s.B * s.H * s.S)
    tile = s.B * s.H * s.N * min(s.Bc, s.S)
    return F64 * (2 * (q + 2 * kv) + 2 * kv_h + OUTPUT_COPIES * o + CHUNK_BUFFERS * chunk + TILE_BUFFERS * tile)


def backward_bytes(s: Shape) -> int:
    """Upper bound of one gradient point: the forward, the gradients, and the autograd graphs."""
    grads = 4 * (s.B * s.H * s.N * s.d + 2 * s.B * s.H * s.S * s.d)  # dO, dQ, dK, dV per implementation
    return forward_bytes(s) + F64 * (OUTPUT_COPIES * grads // 4 + GRAD_SCORE_COPIES * s.B * s.H * s.N * s.S)


def available_bytes() -> tuple[int, str]:
    """(bytes this process may use, where that number came from).

    ``ATTNUM_MEMORY_LIMIT_BYTES`` when set (tests, or a share of a machine); otherwise
    ``MemAvailable`` of ``/proc/meminfo``; otherwise physical pages from ``os.sysconf``.
    """
    env = os.environ.get(ENV_LIMIT)
    if env is not None and env.strip():
        try:
            value = int(float(env))
        except ValueError:
            raise AttnumEnvironmentError(
                f"{ENV_LIMIT}={env!r} is not allowed; expected a number of bytes (e.g. 8e9)") from None
        if value <= 0:
            raise AttnumEnvironmentError(f"{ENV_LIMIT}={env!r} is not allowed; expected a positive number of bytes")
        return value, ENV_LIMIT
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "MemAvailable in /proc/meminfo"
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"), "os.sysconf(SC_AVPHYS_PAGES)"
    except (ValueError, OSError, AttributeError):  # no way to know: do not refuse
        return 1 << 62, "unknown (no /proc/meminfo, no sysconf)"


def gb(n: int) -> str:
    """``1.48 TB``, ``22.9 GB``, ``512 MB``: three significant digits in the largest unit that fits."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} bytes"


def require(need: int, what: str, lower: str) -> None:
    """Refuse (one line) when ``need`` bytes exceed what is available; ``lower`` names the flags to shrink."""
    have, source = available_bytes()
    if need > have:
        raise AttnumEnvironmentError(
            f"{what} needs about {gb(need)} of memory, but {gb(have)} is available ({source}); "
            f"lower {lower}, or set {ENV_LIMIT} if that figure is wrong")


def compare_shape(cfg) -> Shape:
    """The Shape of a :class:`attnum.studies.paper.compare.CompareConfig` (duck-typed: no import)."""
    S = cfg.kv_len if cfg.kv_len is not None else cfg.seq_len
    G = cfg.kv_heads if cfg.kv_heads is not None else cfg.heads
    return Shape(B=cfg.batch, H=cfg.heads, G=G, N=cfg.seq_len, S=S, d=cfg.head_dim, Bc=cfg.tiles().Bc)


COMPARE_FLAGS = "--seq-len, --kv-len, --heads, --batch or --head-dim"


def require_compare(cfg, *, grad: bool = False, what: str = "compare") -> None:
    """Refuse a compare (or ``--grad``; or ``attribute``, which keeps a few more outputs) configuration
    larger than this machine's memory."""
    s = compare_shape(cfg)
    need = backward_bytes(s) if grad else forward_bytes(s)
    if grad and cfg.policies()[0].inputs.name in ("fp64", "fp32", "bf16", "fp16"):
        need += EAGER_SCORE_COPIES * F64 * s.B * s.H * s.N * s.S  # torch eager's autograd graph as well
    require(need, f"{what}{' --grad' if grad else ''} at B={s.B} H={s.H} N={s.N} S={s.S} d={s.d}", COMPARE_FLAGS)


def require_validate(cfg, *, eager: bool = False) -> None:
    """Refuse ``attnum validate`` when its largest point is larger than this machine's memory.

    ``eager`` (op-by-op PyTorch attention) materializes the (H, N, N) scores, several times over."""
    N = max(cfg.seq_lens, default=1)
    s = Shape(B=1, H=cfg.heads, G=cfg.heads, N=N, S=N, d=cfg.head_dim)
    need = forward_bytes(s) + (EAGER_SCORE_COPIES * F64 * s.H * s.N * s.S if eager else 0)
    require(need, f"validate{' --eager' if eager else ''} at H={s.H} N={N} d={s.d}",
            "--seq-lens, --heads or --head-dim")


EAGER_SCORE_COPIES = 4  # op-by-op attention: scores, softmax, their dtype copies


def require_decode(cfg) -> None:
    """Refuse a decode configuration (:class:`attnum.studies.serving.decode.DecodeConfig`) too large for here."""
    G = cfg.kv_heads if cfg.kv_heads is not None else cfg.heads
    S = cfg.cache_len
    if cfg.page_size is not None:  # the page pool rounds every sequence up to whole pages
        S = -(-S // cfg.page_size) * cfg.page_size
    s = Shape(B=cfg.batch, H=cfg.heads, G=G, N=cfg.queries, S=S, d=cfg.head_dim)
    cache = s.B * s.G * s.S * s.d
    need = forward_bytes(s) + F64 * (KV_CACHE_COPIES * cache + s.B * s.H * s.N * s.d * max(cfg.splits, 1))
    if cfg.mla_rank is not None:  # latent cache (B, S, r + rope) and the up-projections (H, d, r)
        need += F64 * (KV_CACHE_COPIES * s.B * s.S * (cfg.mla_rank + 64) + 4 * s.H * s.d * cfg.mla_rank
                       + 2 * s.B * s.H * s.S * s.d)
    require(need, f"decode at B={s.B} H={s.H} G={s.G} N={s.N} S={s.S} d={s.d}",
            "--cache-len, --batch, --heads, --head-dim or --page-size")


KV_CACHE_COPIES = 6  # k and v: the samples, the rounded or quantized cache, pages or dequantized copies


PLAN_BYTES_PER_SEQUENCE = 2048  # a split plan's per-sequence Python objects (length, bounds, tiles), generous
LOWBIT_COPIES = 3  # the low-bit emulation's quantized Q, K, P copies and their scales beside flash's buffers


def consistency_bytes(cfg) -> int:
    """Upper bound of one consistency study (:class:`attnum.studies.consistency.config.ConsistencyConfig`,
    duck-typed): the request, the one-pass prefill, the widest chunk, the page pools, the largest batch's
    plan and every (decode, alone) pair of rows the study keeps for its summaries."""
    H, G, T, d = cfg.heads, cfg.kv_heads, cfg.length, cfg.head_dim
    request = 2 * (H * T * d + 2 * G * T * d)
    prefill = forward_bytes(Shape(B=1, H=H, G=G, N=T, S=T, d=d))
    chunk = forward_bytes(Shape(B=1, H=H, G=G, N=min(max(cfg.chunk_sizes), T), S=T, d=d))
    pages = KV_CACHE_COPIES * 2 * G * (T + max(cfg.page_sizes)) * d
    rows = sum((cfg.mixes if B > 1 else 1) for B in cfg.batch_sizes) * cfg.positions * len(cfg.rules)
    keep = 2 * rows * H * d + cfg.positions * H * d * 4  # decode rows and their references (golden, alone)
    plans = PLAN_BYTES_PER_SEQUENCE * max(max(cfg.batch_sizes), 2)
    return F64 * (request + pages + keep) + prefill + chunk + plans


def require_consistency(cfg) -> None:
    """Refuse ``attnum consistency`` (or a ``kind = "consistency"`` point) larger than this machine's memory."""
    require(consistency_bytes(cfg), f"consistency at T={cfg.length} H={cfg.heads} G={cfg.kv_heads} d={cfg.head_dim} "
            f"max batch {max(cfg.batch_sizes)}, {cfg.mixes} mixes",
            "--length, --batch-sizes, --mixes, --positions, --heads or --head-dim")


def lowbit_bytes(*, batch: int, heads: int, seq_len: int, head_dim: int) -> int:
    """One low-bit point: golden and the emulation over (B, H, N, N), plus the quantized copies."""
    s = Shape(B=batch, H=heads, G=heads, N=seq_len, S=seq_len, d=head_dim)
    return forward_bytes(s) + F64 * LOWBIT_COPIES * (3 * s.B * s.H * s.N * s.d + s.B * s.H * s.N * min(s.Bc, s.S))


def require_lowbit(*, batch: int, heads: int, seq_len: int, head_dim: int, what: str, lower: str) -> None:
    """Refuse a low-bit table, rescale study or ``kind = "lowbit"`` point too large for here."""
    require(lowbit_bytes(batch=batch, heads=heads, seq_len=seq_len, head_dim=head_dim),
            f"{what} at B={batch} H={heads} N={seq_len} d={head_dim}", lower)
