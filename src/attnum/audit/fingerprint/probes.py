"""The crafted inputs of a fingerprint and the counted calls of the target.

Shape alphabet: B = 1 batch, H heads, N = 1 query, S keys, d head dim (= dv), C = H * d probe columns.

Swamping probes (FPRev, Xie et al., USENIX ATC'25, arXiv 2411.00442, carried into attention): Q = 0 and
K = 0 make every score exactly 0, so P = exp(0) = 1 at every key in every format and the row sum is
the key count; each output column is then (sum of its V column) / S summed in the kernel's order. A
column holds +M at key ``plus``, -M at key ``minus``, ``e`` at key ``epos`` and 0 elsewhere, with
M + e == M in every accumulator format a kernel of the input dtype uses (e = M 2**-25 < ulp(M) / 2 in
fp32) and e / S still visible in the output format. +M and -M cancel exactly where they meet, so e
survives exactly when it is added after that node: which tiles and splits hold which keys, and in
which order a kernel walks them, is read off which e survive. Every probe column sits beside a control
column without e (same cancellations, same merge noise): e survived when the two differ in any bit.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from attnum.errors import bad_value

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
# M and e for every input dtype: M = 2**15 is finite in fp16 (an fp16 input or accumulator: a kernel of
# bf16 or fp32 inputs may still accumulate in fp16), e = M 2**-25 is swamped by M in fp32 and every
# narrower accumulator, and e / S stays a normal or subnormal value of the output format.
SWAMP = {"fp16": (2.0 ** 15, 2.0 ** -10), "bf16": (2.0 ** 15, 2.0 ** -10), "fp32": (2.0 ** 15, 2.0 ** -10)}


def torch_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise bad_value("--dtype", name, f"one of {tuple(DTYPES)}")
    return DTYPES[name]


@dataclass
class CountedTarget:
    """The target as the fingerprint calls it, on (1, H, 1, d) queries, every call counted and timed.

    ``entry``: ``"sdpa"`` calls fn(q, k, v, is_causal=False); ``"decode"`` calls a serving target's decode
    entry point (attnum.kernels.serving): fn.decode(q, k_cache, v_cache, cache_seqlens=[S]) with the
    cache (1, H, S, d) and the kernel's own split choice (``num_splits`` left out). ``"auto"`` (the
    default) is sdpa, or decode when the first SDPA call says the target has no SDPA entry point
    (NotImplementedError) and it has a decode one. ``num_splits``: passed to decode (the split count a
    serving framework would ask for); None leaves it out. The target gets copies of the inputs (the probes
    reuse theirs, and the replays read them)."""

    fn: object
    entry: str = "auto"
    num_splits: int | None = None
    calls: int = 0
    seconds: float = 0.0
    shapes: list = field(default_factory=list)

    def _call(self, q, k, v):
        q, k, v = q.clone(), k.clone(), v.clone()  # a target may write into its inputs: never into ours
        if self.entry == "decode":
            lens = torch.full((q.shape[0],), k.shape[-2], dtype=torch.int32)
            splits = {} if self.num_splits is None else {"num_splits": self.num_splits}
            return self.fn.decode(q, k, v, cache_seqlens=lens, **splits)
        try:
            out = self.fn(q, k, v, is_causal=False)
        except NotImplementedError as exc:
            if self.entry == "auto" and not self.calls and not callable(getattr(self.fn, "decode", None)):
                name = getattr(self.fn, "__name__", type(self.fn).__name__)
                # a serving target without SDPA (a merge): attnum.kernels.serving.ServingTarget says so
                if getattr(self.fn, "_sdpa", ...) is None or "no SDPA entry point" in str(exc):
                    raise bad_value("target", name, "an attention kernel with an SDPA or a decode entry point "
                                    f"(this one has neither: {exc})") from None
                raise bad_value("target", name, "a kernel that runs the fingerprint's inputs (its first call "
                                f"raised NotImplementedError: {exc})") from None
            if self.entry != "auto" or self.calls or not callable(getattr(self.fn, "decode", None)):
                raise
            self.entry = "decode"
            return self._call(q, k, v)
        if self.entry == "auto":
            self.entry = "sdpa"
        return out

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        t0 = time.perf_counter()
        out = self._call(q, k, v)
        if isinstance(out, tuple):  # a decode entry point asked for no LSE may still return (o, lse)
            out = out[0]
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(q.shape[:-1]) + (v.shape[-1],):
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise bad_value("target output", got, f"a tensor of shape {tuple(q.shape[:-1]) + (v.shape[-1],)}")
        return out.detach().to("cpu")


def bits(x: torch.Tensor) -> np.ndarray:
    """The raw bit patterns of a float tensor (int view of its dtype), flattened."""
    view = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
            torch.float64: torch.int64}[x.dtype]
    return x.contiguous().view(view).reshape(-1).numpy()


@dataclass(frozen=True)
class SwampColumns:
    """Probe columns: key positions (n,) of +M, -M and e (-1: no e); probe i is column 2 i (with e)
    and its control column 2 i + 1 (without)."""

    plus: np.ndarray
    minus: np.ndarray
    epos: np.ndarray


def swamp_columns(S: int) -> SwampColumns:
    """Two families over j = 1 .. S-2: forward (+M at 0, -M at j, e at j+1) and reverse (+M at S-1,
    -M at j, e at j-1). A kernel that walks its tiles forward shows its tile ends in the first, one
    that walks them backward its tile starts in the second; both show its split ends."""
    j = np.arange(1, S - 1)
    plus = np.concatenate([np.zeros_like(j), np.full_like(j, S - 1)])
    minus = np.concatenate([j, j])
    epos = np.concatenate([j + 1, j - 1])
    return SwampColumns(plus, minus, epos)


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


def run_swamp(target: CountedTarget, S: int, *, heads: int, d: int, dtype: str, cols: SwampColumns
              ) -> tuple[np.ndarray, list[tuple]]:
    """Survival of e in each probe ((n,) bool) and the calls' (q, k, v, out, their columns) for replay.

    Columns are packed H * d per call (2 per probe); a call of fewer probes pads with zero columns."""
    dt = torch_dtype(dtype)
    M, e = SWAMP[dtype]
    n = len(cols.plus)
    per_call = heads * d // 2
    survived = np.zeros(n, dtype=bool)
    calls = []
    q = torch.zeros(1, heads, 1, d, dtype=dt)
    k = torch.zeros(1, heads, S, d, dtype=dt)
    for c0 in range(0, n, per_call):
        c1 = min(n, c0 + per_call)
        v = torch.zeros(1, heads, S, d, dtype=torch.float64)
        flat = v[0].permute(0, 2, 1).reshape(heads * d, S)  # (C, S): column c is head c // d, dim c % d
        idx = np.arange(c1 - c0)
        for col in (2 * idx, 2 * idx + 1):
            flat[col, cols.plus[c0:c1]] = M
            flat[col, cols.minus[c0:c1]] = -M
        has_e = cols.epos[c0:c1] >= 0
        flat[2 * idx[has_e], cols.epos[c0:c1][has_e]] = e
        v = flat.reshape(heads, d, S).permute(0, 2, 1).unsqueeze(0).to(dt).contiguous()
        out = target(q, k, v)
        survived[c0:c1] = survival(out, c1 - c0)
        calls.append((q, k, v, out, SwampColumns(cols.plus[c0:c1], cols.minus[c0:c1], cols.epos[c0:c1])))
    return survived, calls


def survival(out: torch.Tensor, n: int) -> np.ndarray:
    """(n,) whether probe i's column (2 i) differs in any bit from its control (2 i + 1)."""
    b = bits(out[0, :, 0, :].reshape(-1))  # (C,) in column order
    return b[0:2 * n:2] != b[1:2 * n:2]


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
