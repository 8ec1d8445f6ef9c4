"""Helpers for the sweep, store, report, executor and Ray tests: tiny specs, the CLI in a subprocess, the processes below one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import _paths

import attnum

PACKAGE_ROOT = str(Path(attnum.__file__).resolve().parent.parent)
CLI = "import sys; from attnum.cli import main; sys.exit(main(sys.argv[1:]))"

TINY_SPEC = """
name = "tiny"
[defaults]
heads = 1
head_dim = 16
block_q = 16
block_k = 16
[axes]
format = ["bf16", "fp16", "e5m4"]
policy = ["uniform", "fa2"]
seq_len = [48, 80]
seed = [0, 1]
"""
# 3 formats x 2 policies x 2 lengths x 2 seeds compare points, plus one kernel point per
# (native format, length, seed): 24 + 2 * 2 * 2.
TINY_COMPARE_POINTS = 24
TINY_KERNEL_POINTS = 8


def write_spec(tmp_path: Path, text: str = TINY_SPEC, name: str = "spec.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [PACKAGE_ROOT, env.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = "1"
    return env


def run_cli(*args: str, timeout: float = _paths.HANG_S, check: bool = True) -> subprocess.CompletedProcess:
    """``attnum ARGS`` in a fresh interpreter; returns the completed process (text output)."""
    proc = subprocess.run([sys.executable, "-c", CLI, *map(str, args)], capture_output=True, text=True,
                          env=cli_env(), timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"attnum {' '.join(map(str, args))} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def popen_cli(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CLI, *map(str, args)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=cli_env())


def cli(*args: str) -> int:
    """``attnum ARGS`` in this process (faster than a subprocess); returns the exit status."""
    from attnum.cli import main

    return main([str(a) for a in args])


def smoke_reproduction(tmp_path_factory) -> Path:
    """``attnum reproduce --profile smoke`` once per test session (figures, store, report.html)."""
    out = tmp_path_factory.getbasetemp() / "smoke-reproduce"
    if not (out / "report.html").is_file():
        assert cli("reproduce", "--profile", "smoke", "--out", out, "--jobs", "1", "--quiet") == 0
    return out


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (pool workers, multiprocessing's resource tracker)."""
    parent = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            parent[int(stat.parent.name)] = int(fields[1])
    out, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        frontier += kids
    return out
