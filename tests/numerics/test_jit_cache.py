"""A compiled kernel is compiled once per machine, not once per program run: numba's cache, counted by numba.

The second process that calls the same kernels loads them from the cache: numba's own statistics say so
(``dispatcher.stats.cache_hits`` / ``cache_misses``), never a timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import _paths
import pytest

from attnum.numerics.jit import numba_cache_dir

# Calls round_to (attnum.numerics.jit) and attnum.mma.matmul (numerics/mma/dense_kernels), then prints numba's
# cache statistics over every compiled kernel of attnum.
PROGRAM = """
import importlib, json, torch, numba
from attnum.numerics.rounding import round_to
from attnum.mma import matmul
round_to(torch.randn(64, dtype=torch.float64), "bf16")
matmul(torch.randn(16, 32).half(), torch.randn(32, 8).half(), torch.zeros(16, 8), arch="sm90")
hits = misses = 0
for mod in ("attnum.numerics.jit", "attnum.attention.fused_kernels", "attnum.numerics.mma.dense_kernels",
            "attnum.numerics.mma.scaled_kernels"):
    m = importlib.import_module(mod)
    for f in vars(m).values():
        if isinstance(f, numba.core.registry.CPUDispatcher):
            hits += sum(f.stats.cache_hits.values())
            misses += sum(f.stats.cache_misses.values())
print(json.dumps({"hits": hits, "misses": misses}))
"""


def _run(cache: Path) -> dict:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONPATH": str(_paths.ROOT / "src")}
    out = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_second_program_run_loads_every_kernel_from_the_cache(tmp_path):
    first = _run(tmp_path / "numba")
    second = _run(tmp_path / "numba")
    assert first["misses"] > 0, f"a fresh cache must compile: {first}"
    assert second["misses"] == 0 and second["hits"] >= first["misses"], \
        f"the second run recompiled: first {first}, second {second}"


def test_numba_keeps_its_own_choice_where_the_package_folder_is_writable(tmp_path):
    assert numba_cache_dir(tmp_path, {}) is None
    assert numba_cache_dir(tmp_path / "not-there", {"NUMBA_CACHE_DIR": "/x"}) is None  # the user's choice


def test_a_package_folder_that_cannot_be_written_caches_under_attnums_cache(tmp_path, monkeypatch):
    ro = tmp_path / "site-packages" / "attnum" / "numerics"
    ro.mkdir(parents=True)
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # as a read-only install (root may write anywhere)
    assert numba_cache_dir(ro, {"ATTNUM_CACHE": str(tmp_path / "c")}) == str(tmp_path / "c" / "numba")
    assert numba_cache_dir(ro, {}) == str(Path.home() / ".cache" / "attnum" / "numba")
