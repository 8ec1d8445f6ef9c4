"""The crafted inputs of a fingerprint and the counted calls of the target.

Shape alphabet: B = 1 batch, H heads, N = 1 query, S keys, d head dim (= dv), C = H * d probe columns.

Swamping probes (FPRev, Xie et al., USENIX ATC'25, arXiv 2411.00442, carried into attention): Q = 0 and
K = 0 make every score exactly 0, so P = exp(0) = 1 at every key in every format and the row sum is
the key count; each output column is then (sum of its V column) / S summed in the kernel's order. A
column holds +M at key ``plus``, -M at key ``minus``, ``e`` at key ``epos`` and 0 elsewhere, with
M + e == M in every accumulator format a kernel of the input dtype uses (e = M 2**-26 < ulp(M) / 2 in
fp32, and below the F = 23 .. 25 fraction bits a 16-bit MMA keeps under its largest term) and e / S
still visible in the output format (fp16: S < 2**14). +M and -M cancel exactly where they meet, so e
survives exactly when it is added after that node: which tiles and splits hold which keys, and in
which order a kernel walks them, is read off which e survive. Every probe column sits beside a control
column without e (same cancellations, same merge noise): e survived when the two differ in any bit.

Every call of the target goes through :class:`attnum.audit.fingerprint.target.CountedTarget` (re-exported
here). Recorded calls are :class:`Call` records; a probe call rebuilds its V from its columns when asked,
so long lengths keep no V in memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from attnum.audit.fingerprint.target import OUTPUT_DTYPES, CountedTarget, TargetFailed, TargetRefused
from attnum.errors import bad_value

__all__ = ["OUTPUT_DTYPES", "Call", "CountedTarget", "SwampColumns", "TargetFailed", "TargetRefused"]

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
# M and e for every input dtype: M = 2**15 is finite in fp16 (an fp16 input or accumulator: a kernel of
# bf16 or fp32 inputs may still accumulate in fp16); e = M 2**-26 is swamped by M in fp32 and every
# narrower accumulator, and dropped by a 16-bit MMA's truncating adder in a group with M (it keeps F = 23
# to 25 fraction bits below the largest term: sm70 .. sm120, cdna3); e / S stays a normal or subnormal
# value of the output format (fp16's smallest subnormal is 2**-24: S < 2**14, :data:`MAX_LENGTH`).
E_BELOW_M = 26
SWAMP = {f: (2.0 ** 15, 2.0 ** (15 - E_BELOW_M)) for f in DTYPES}
MAX_LENGTH = {"fp16": 2 ** 14 - 1, "bf16": 2 ** 24, "fp32": 2 ** 24}
F_PROBES = (22, 23, 24, 25, 26)  # e = M 2**-f beside +M and -M in one MMA group: survives when F >= f


def torch_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise bad_value("--dtype", name, f"one of {tuple(DTYPES)}")
    return DTYPES[name]


@dataclass(eq=False)
class Call:
    """One recorded call of the target: q (1, H, 1, d), k (1, H, S, d), the target's ``out`` and, for a
    probe call, its columns. V is kept (``_v``) or, for a probe call, rebuilt from the columns on each
    access (:func:`probe_v`)."""

    q: torch.Tensor
    k: torch.Tensor
    out: torch.Tensor
    cols: SwampColumns | None = None
    _v: torch.Tensor | None = None
    dtype: str = "bf16"
    what: str = ""

    @property
    def S(self) -> int:
        return self.k.shape[-2]

    @property
    def v(self) -> torch.Tensor:
        if self._v is not None:
            return self._v
        return probe_v(self.S, heads=self.k.shape[1], d=self.k.shape[-1], dtype=self.dtype, cols=self.cols)


def bits(x: torch.Tensor) -> np.ndarray:
    """The raw bit patterns of a float tensor (int view of its dtype), flattened."""
    view = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
            torch.float64: torch.int64}[x.dtype]
    return x.contiguous().view(view).reshape(-1).numpy()


@dataclass(frozen=True)
class SwampColumns:
    """Probe columns: key positions (n,) of +M, -M and e (-1: no e); probe i is column 2 i (with e)
    and its control column 2 i + 1 (without). ``e_below``: per probe, e = M 2**-e_below (None: all
    :data:`E_BELOW_M`); only those probes follow the structure model (:meth:`modelled`)."""

    plus: np.ndarray
    minus: np.ndarray
    epos: np.ndarray
    e_below: np.ndarray | None = None

    def __getitem__(self, sl) -> SwampColumns:
        return SwampColumns(self.plus[sl], self.minus[sl], self.epos[sl],
                            None if self.e_below is None else self.e_below[sl])

    def __len__(self) -> int:
        return len(self.plus)

    def modelled(self) -> np.ndarray:
        """(n,) bool: the probes whose e is M 2**-E_BELOW_M (the structure model's)."""
        return np.ones(len(self.plus), bool) if self.e_below is None else self.e_below == E_BELOW_M

    @staticmethod
    def join(*parts: SwampColumns) -> SwampColumns:
        below = [np.full(len(p), E_BELOW_M) if p.e_below is None else p.e_below for p in parts]
        return SwampColumns(*(np.concatenate([getattr(p, a) for p in parts]) for a in ("plus", "minus", "epos")),
                            np.concatenate(below).astype(np.int64))


ACCUMULATE_STEP = 64  # the accumulate family's +M positions: every 64th key
FRACTION_BASES = 4  # the fraction-bit probes' starting keys: 0, 64, 128, 192


def swamp_columns(S: int) -> SwampColumns:
    """Two families over j = 1 .. S-2: forward (+M at 0, -M at j, e at j+1) and reverse (+M at S-1,
    -M at j, e at j-1). A kernel that walks its tiles forward shows its tile ends in the first, one
    that walks them backward its tile starts in the second; both show its split ends."""
    j = np.arange(1, S - 1)
    return SwampColumns(np.concatenate([np.zeros_like(j), np.full_like(j, S - 1)]), np.concatenate([j, j]),
                        np.concatenate([j + 1, j - 1]))


def accumulate_columns(S: int) -> SwampColumns:
    """+M at t, -M at t+1 for t = 64, 128, ..., e at 0. It separates a tile's product formed from zero,
    then added (the product of t and t+1 is an exact 0: e survives) from an accumulator carried into the
    MMA (FA2/FA3, ``tl.dot(p, v, acc)``: e enters the adder beside M and is dropped)."""
    t = np.arange(ACCUMULATE_STEP, S - 1, ACCUMULATE_STEP)
    return SwampColumns(t, t + 1, np.zeros_like(t))


def fraction_columns(S: int) -> SwampColumns:
    """The fraction-bit probes: +M at b, -M at b + 1 and e = M 2**-f at b + 2 for f in :data:`F_PROBES`,
    b = 0, 64, 128, 192. In one MMA group the three are aligned to M and e keeps its bits only when
    f <= F, the adder's fraction bits (sm70: 23, sm75 .. sm89 and cdna3: 24, sm90 .. sm120: 25); a
    sequential fp32 sum cancels M first and keeps every e. Outside the structure model but for
    f = :data:`E_BELOW_M` (e is not always swamped by M)."""
    base = np.arange(0, S - 2, ACCUMULATE_STEP)[:FRACTION_BASES]
    b, f = np.repeat(base, len(F_PROBES)), np.tile(np.asarray(F_PROBES), len(base))
    return SwampColumns(b, b + 1, b + 2, f)


def boundary_columns(S: int, block_k: int, order: str) -> tuple[np.ndarray, SwampColumns]:
    """Split probes once Bc is known, one per tile start b (the candidates, (n,)): forward walk, +M at b
    and -M at b + Bc (the next tile) with e at b - 1; reverse walk, +M at b - 1 and -M at b - 1 - Bc
    with e at b. In one chain e's tile is walked before both and M swamps it; when a split starts at
    b, M and -M cancel exactly inside their own split and e's split carries it to the output. Tiles
    where the pair would leave the key range are not probed."""
    starts = np.arange(block_k, S, block_k)
    if order == "forward":
        starts = starts[starts + block_k < S]
        return starts, SwampColumns(starts, starts + block_k, starts - 1)
    starts = starts[starts - 1 - block_k >= 0]
    return starts, SwampColumns(starts - 1, starts - 1 - block_k, starts)


def probe_v(S: int, *, heads: int, d: int, dtype: str, cols: SwampColumns) -> torch.Tensor:
    """V (1, H, S, d) in ``dtype`` holding ``cols``' probes packed two columns each (module doc); zero
    columns after the last probe."""
    M, e = SWAMP[dtype]
    n = len(cols.plus)
    if 2 * n > heads * d:
        raise ValueError(f"{n} probes do not fit {heads} x {d} columns")
    flat = torch.zeros(heads * d, S, dtype=torch.float64)  # (C, S): column c is head c // d, dim c % d
    idx = np.arange(n)
    for col in (2 * idx, 2 * idx + 1):
        flat[col, cols.plus] = M
        flat[col, cols.minus] = -M
    has_e = cols.epos >= 0
    ev = np.full(n, e) if cols.e_below is None else M * np.exp2(-cols.e_below.astype(np.float64))
    flat[2 * idx[has_e], cols.epos[has_e]] = torch.from_numpy(ev[has_e])
    return flat.reshape(heads, d, S).permute(0, 2, 1).unsqueeze(0).to(DTYPES[dtype]).contiguous()


def run_swamp(target: CountedTarget, S: int, *, heads: int, d: int, dtype: str, cols: SwampColumns,
              keep_v=None, what: str = "swamping") -> tuple[np.ndarray, list[Call]]:
    """Survival of e in each probe ((n,) bool) and the recorded calls (:class:`Call`).

    Columns are packed H * d per call (2 per probe); a call of fewer probes pads with zero columns.
    ``keep_v(nbytes)``: whether to keep a call's V (None: always; else it is rebuilt from the columns
    when a replay reads it)."""
    dt = torch_dtype(dtype)
    n = len(cols.plus)
    per_call = heads * d // 2
    survived = np.zeros(n, dtype=bool)
    calls = []
    q = torch.zeros(1, heads, 1, d, dtype=dt)
    k = torch.zeros(1, heads, S, d, dtype=dt)
    for c0 in range(0, n, per_call):
        c1 = min(n, c0 + per_call)
        part = cols[c0:c1]
        v = probe_v(S, heads=heads, d=d, dtype=dtype, cols=part)
        out = target(q, k, v)
        survived[c0:c1] = survival(out, c1 - c0)
        keep = keep_v is None or keep_v(v.numel() * v.element_size())
        calls.append(Call(q, k, out, part, v if keep else None, dtype, what))
    return survived, calls


def modelled_survival(rec: Call) -> tuple[SwampColumns, np.ndarray]:
    """(the structure model's columns of a probe call, their survivals)."""
    keep = rec.cols.modelled()
    return rec.cols[keep], survival(rec.out, len(rec.cols))[keep]


def survival(out: torch.Tensor, n: int) -> np.ndarray:
    """(n,) whether probe i's column (2 i) differs in any bit from its control (2 i + 1)."""
    b = bits(out[0, :, 0, :].reshape(-1).contiguous())  # (C,) in column order
    return b[0:2 * n:2] != b[1:2 * n:2]


FIT_MAGNITUDES = (("seed", 1.0, 1.0), ("q x 4", 4.0, 1.0), ("v x 2^8", 1.0, 2.0 ** 8), ("q x 1/8", 0.125, 1.0))


def magnitude_inputs(S: int, *, heads: int, d: int, dtype: str, seed: int, variants=FIT_MAGNITUDES
                     ) -> tuple[list[str], tuple[torch.Tensor, ...]]:
    """(per-head labels, (q, k, v)): :func:`random_inputs` with head h's queries and values scaled by
    ``variants[h % len(variants)]`` ((label, q scale, v scale)): magnitudes in one call, for the search to
    tell apart arithmetics that agree on mild inputs (exp and exp2 with a folded scale, for one)."""
    q, k, v = random_inputs(S, heads=heads, d=d, dtype=dtype, seed=seed)
    which = [h % len(variants) for h in range(heads)]
    sq = torch.tensor([variants[w][1] for w in which], dtype=torch.float64).view(1, -1, 1, 1)
    sv = torch.tensor([variants[w][2] for w in which], dtype=torch.float64).view(1, -1, 1, 1)
    labels = [f"{variants[w][0]} {seed} at S={S}" if w == 0 else f"{variants[w][0]} at S={S}" for w in which]
    return labels, ((q.double() * sq).to(q.dtype), k, (v.double() * sv).to(v.dtype))


def random_inputs(S: int, *, heads: int, d: int, dtype: str, seed: int) -> tuple[torch.Tensor, ...]:
    """Fitting inputs (1, H, 1, d) x (1, H, S, d) x (1, H, S, d) that expose the rounding sites: per head
    a score spread from mild to wide (several running-max updates across tiles), and V either centred
    (cancellation in the accumulator) or offset from 0 (the accumulator's last bits)."""
    g = torch.Generator().manual_seed(seed)
    dt = torch_dtype(dtype)
    spread = torch.tensor([1.0, 3.0, 6.0, 2.0])[torch.arange(heads) % 4].view(1, heads, 1, 1)
    q = torch.randn(1, heads, 1, d, generator=g, dtype=torch.float64) * spread / math.sqrt(math.sqrt(d))
    k = torch.randn(1, heads, S, d, generator=g, dtype=torch.float64) / math.sqrt(math.sqrt(d))
    k = k + torch.linspace(0, 1, S, dtype=torch.float64).view(1, 1, S, 1) * q.sign()  # the max keeps moving
    offset = torch.tensor([0.0, 1.0])[torch.arange(heads) % 2].view(1, heads, 1, 1)
    v = torch.randn(1, heads, S, d, generator=g, dtype=torch.float64) * 0.1 + offset
    return q.to(dt), k.to(dt), v.to(dt)
