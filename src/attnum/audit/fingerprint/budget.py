"""The fingerprint's memory: every allocation it makes sized before it is made, against one budget.

The budget defaults to :data:`DEFAULT_FRACTION` of the memory available when the fingerprint starts
(``MemAvailable``, and the headroom under this process's ``RLIMIT_AS`` / ``RLIMIT_DATA`` when they are
set); ``--memory`` (``fingerprint(memory=...)``) sets it. Two things are sized:

- the target calls (:func:`call_bytes`): the probe's V built in float64, the copies the target is
  handed, the output; a shape whose single call exceeds the budget is refused before any call, in one
  line naming the flag (:func:`check_shape`); the recorded probe calls keep their V only while the kept
  total stays under a quarter of the budget, and rebuild it from their columns after that;
- each replay of a candidate (:func:`replay_bytes`): its largest arrays, from the candidate's family,
  tile and split ranges. A replay over the budget is not run: the candidate is skipped, with a line in
  the document (``skipped``), never allocated. A MemoryError in a replay is the same skip.

A ``--memory`` above the memory this process may take (:func:`available_bytes`) is refused: it would size
nothing. ``peak_rss_bytes`` is this process's high-water resident memory (``getrusage``), reported beside
``seconds``.
"""

from __future__ import annotations

import math
import re
import resource

from attnum.errors import AttnumEnvironmentError, bad_value

DEFAULT_FRACTION = 0.5
_UNITS = {"": 1, "b": 1, "k": 2 ** 10, "kb": 2 ** 10, "kib": 2 ** 10, "m": 2 ** 20, "mb": 2 ** 20, "mib": 2 ** 20,
          "g": 2 ** 30, "gb": 2 ** 30, "gib": 2 ** 30, "t": 2 ** 40, "tb": 2 ** 40, "tib": 2 ** 40}
_ITEM = {"fp16": 2, "bf16": 2, "fp32": 4}


def parse_memory(text: object, *, param: str = "--memory") -> int:
    """Bytes from ``4G``, ``512MiB``, ``2.5gb``, ``1000000`` (binary units), or ``auto`` (None is auto too):
    :func:`default_budget`."""
    if text is None or (isinstance(text, str) and text.strip().lower() == "auto"):
        return default_budget()
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value, unit = float(text), ""
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
        if m is None or m.group(2).lower() not in _UNITS:
            raise bad_value(param, text, "a size such as 4G, 512M or 2.5GiB (binary units), or auto")
        value, unit = float(m.group(1)), m.group(2).lower()
    n = value * _UNITS[unit]
    if not math.isfinite(n) or n < 64 * 2 ** 20:
        raise bad_value(param, text, "at least 64M (the fingerprint's own arrays need more), or auto")
    avail = available_bytes()
    if n > avail:  # a budget the machine cannot give sizes nothing: the allocation it allowed would fail
        raise bad_value(param, text, f"at most {_gib(avail)} (the memory this process may take now: MemAvailable, "
                                     "and its RLIMIT_AS / RLIMIT_DATA headroom), or auto")
    return int(n)


def _status(key: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def available_bytes() -> int:
    """Memory this process may still take: MemAvailable (else the physical memory), less what the
    address-space and data limits leave (RLIMIT_AS against VmSize, RLIMIT_DATA against VmData)."""
    avail = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
    except OSError:
        pass
    if avail is None:
        import os

        try:
            avail = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            avail = 8 * 2 ** 30
    for limit, key in ((resource.RLIMIT_AS, "VmSize"), (resource.RLIMIT_DATA, "VmData")):
        soft, _ = resource.getrlimit(limit)
        used = _status(key)
        if soft != resource.RLIM_INFINITY and used is not None:
            avail = min(avail, max(0, soft - used))
    return avail


def default_budget() -> int:
    return max(64 * 2 ** 20, int(DEFAULT_FRACTION * available_bytes()))


def peak_rss_bytes() -> int:
    """This process's high-water resident memory (ru_maxrss: KiB on Linux)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def call_bytes(S: int, *, heads: int, d: int, dtype: str) -> int:
    """One target call's arrays on this side: V built in float64, q / k / v and the target's copies of
    them, the output (the target's own work is its own)."""
    n = heads * S * d
    return n * 8 + 4 * n * _ITEM[dtype] + heads * d * 8


def check_shape(lengths, *, heads: int, d: int, dtype: str, budget: int) -> None:
    """Refuse a shape whose single target call does not fit ``budget``, before any call: one line naming
    --heads / --lengths / --head-dim and the sizes."""
    S = max(lengths)
    need = call_bytes(S, heads=heads, d=d, dtype=dtype) + 4 * replay_bytes_plain(S, heads=heads, d=d)
    if need > budget:
        raise AttnumEnvironmentError(
            f"--heads={heads}, --head-dim={d}, --lengths={','.join(map(str, lengths))}: one call of the fingerprint "
            f"at S={S} needs about {_gib(need)} and the memory budget is {_gib(budget)}; use fewer heads or "
            "shorter lengths, or raise the budget with --memory")


def replay_bytes_plain(S: int, *, heads: int, d: int) -> int:
    """A tiled or un-tiled replay's carriers: K and V loaded (float64 at most), the scores row, the output."""
    return heads * S * d * 8 * 2 + heads * S * 8 * 4 + heads * d * 8 * 4


def replay_bytes(policy, bounds, block_k: int | None, *, S: int, heads: int, d: int) -> int:
    """The largest arrays one replay of a candidate on S keys allocates. The Triton decode family pads every
    split to whole tiles and steps all splits at once: (H, splits, Bc, D) arrays of float32 and float64
    temporaries; the others hold K, V and a tile's or a row's scores."""
    from attnum.kernels.triton.sum_decode import SumDecode

    base = replay_bytes_plain(S, heads=heads, d=d)
    if isinstance(policy, SumDecode):
        D = 1 << max(d - 1, 0).bit_length()
        P = sum(1 for j0, j1 in bounds if j1 > j0)
        return base + heads * P * (block_k or 1) * D * 28 + heads * S * D * 8
    return base


def _gib(n: int) -> str:
    return f"{n / 2 ** 30:.2f} GiB" if n >= 2 ** 30 else f"{n / 2 ** 20:.0f} MiB"


class Budget:
    """The fingerprint's memory budget in bytes, and the lines of what it skipped."""

    def __init__(self, limit: int) -> None:
        self.limit = int(limit)
        self.kept = 0  # bytes of recorded V kept
        self.skipped: list[str] = []

    def keep_v(self, nbytes: int) -> bool:
        """Whether a probe call's V of ``nbytes`` may be kept (the kept total under a quarter of the budget)."""
        if self.kept + nbytes > self.limit // 4:
            return False
        self.kept += nbytes
        return True

    def allows(self, nbytes: int) -> bool:
        return nbytes + self.kept <= self.limit

    def skip(self, what: str, nbytes: int | None = None, why: str | None = None) -> None:
        line = f"{what}: " + (why or f"its replay needs about {_gib(nbytes or 0)}, over the memory budget of "
                              f"{_gib(self.limit)} (--memory)")
        if line not in self.skipped:
            self.skipped.append(line)


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is an allocation that failed: Python's MemoryError, or torch's allocators' errors, which
    are RuntimeErrors ("DefaultCPUAllocator: can't allocate memory", torch.OutOfMemoryError)."""
    return isinstance(exc, MemoryError) or (isinstance(exc, RuntimeError) and (
        type(exc).__name__ == "OutOfMemoryError" or "can't allocate memory" in str(exc)))
