"""Verdicts do not depend on the CPU: the same pass/fail for every probe under every ISA and thread count.

Each setting audits torch-sdpa-math, torch-sdpa-flash and torch-flex (bf16, fp16, fp32, every probe)
in a fresh process - the kernels torch dispatches to are fixed at start-up - with
``ATEN_CPU_CAPABILITY`` = default, avx2 and unset (this machine's best), and 1 and 2 torch threads.

``ATEN_CPU_CAPABILITY`` alone does not make an AVX2 machine: oneDNN still sees AMX/AVX512 and
torch's bf16 CPU flash kernel then packs with a VNNI routine compiled only for AVX512 ("pack_vnni2
is only supported when avx512 is supported"); a real AVX2 CPU limits both, so each setting also
caps oneDNN (``ONEDNN_MAX_CPU_ISA``).

Run as a script (``python tests/audit/test_audit_cpu_invariance.py``) it is the child: it prints one JSON
document with every case's verdict and margin.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import _paths
import pytest
import torch

BACKENDS = ("torch-sdpa-math", "torch-sdpa-flash", "torch-flex")
ONEDNN_CAP = {"default": "SSE41", "avx2": "AVX2"}
TORCH_2_5 = tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 5)


def _child() -> None:
    from attnum.audit.config import AuditConfig
    from attnum.audit.runner import run_audit

    torch.set_num_threads(int(os.environ["ATTNUM_TEST_THREADS"]))
    doc = {"cases": [], "rows": []}
    for backend in BACKENDS:
        report = run_audit(AuditConfig(target=backend))
        doc["environment"] = report.environment
        for r in report.results:
            doc["rows"].append([backend, r.name, r.dtype, r.status, r.ratio])
            doc["cases"] += [[backend, r.name, r.dtype, c.label, c.verdict.status, c.verdict.ratio] for c in r.cases]
    print(json.dumps(doc))


def _clean_env() -> dict[str, str]:
    """This environment without CPU-capability overrides (the suite itself may run under one), with tests/ on
    the path: this file runs itself as a script, and its helpers (_paths) live there."""
    env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(__file__).resolve().parents[1]),
                                                    env.get("PYTHONPATH", "")) if p)
    return env


def _native_capability() -> str:
    """The machine's best capability, asked of a fresh process with no override."""
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    out = subprocess.run([sys.executable, "-c", code], env=_clean_env(), capture_output=True, text=True, timeout=_paths.HANG_S)
    return out.stdout.strip().splitlines()[-1]


def _settings() -> list[tuple[str, int]]:
    best = _native_capability()
    caps = ["default"] if best != "DEFAULT" else []
    if best.startswith("AVX512"):
        caps.append("avx2")
    return [(cap, t) for cap in [*caps, "best"] for t in (1, 2)]


def _run(setting: tuple[str, int]) -> dict:
    cap, threads = setting
    env = _clean_env()
    # Passive OpenMP waits: two settings share the cores; spinning threads would only cost time.
    env.update(ATTNUM_TEST_THREADS=str(threads), OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="PASSIVE")
    if cap != "best":
        env.update(ATEN_CPU_CAPABILITY=cap, ONEDNN_MAX_CPU_ISA=ONEDNN_CAP[cap])
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve())], env=env, capture_output=True,
                          text=True, timeout=_paths.HANG_S)
    assert proc.returncode == 0, f"{setting}: {proc.stderr[-2000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.skipif(not TORCH_2_5, reason="torch < 2.5 has no CPU flex attention and NaN empty rows")
def test_verdicts_identical_under_every_cpu_capability_and_thread_count(record_property):
    settings = _settings()
    workers = max(1, min(2, os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        docs = dict(zip(settings, pool.map(_run, settings), strict=True))
    best = _native_capability()
    for (cap, threads), doc in docs.items():
        env = doc["environment"]
        assert env["cpu_capability"] == (best if cap == "best" else cap.upper()), (cap, env)
        assert env["torch_threads"] == threads, (cap, threads, env)
    tables = {s: {tuple(r[:3]): r[3] for r in d["rows"]} for s, d in docs.items()}
    cases = {s: {tuple(c[:4]): c[4] for c in d["cases"]} for s, d in docs.items()}
    ref = settings[-1]
    # The margins, per backend and probe (max over dtypes and cases), one column per setting.
    margins: dict[tuple[str, str], dict[str, float]] = {}
    for s, d in docs.items():
        for backend, probe, _dtype, _label, status, ratio in d["cases"]:
            if status in ("pass", "fail", "note") and ratio == ratio and ratio != float("inf"):
                col = margins.setdefault((backend, probe), {})
                col[f"{s[0]}/{s[1]}"] = max(col.get(f"{s[0]}/{s[1]}", 0.0), ratio)
    lines = [f"{'backend':18s} {'probe':24s} " + " ".join(f"{f'{c}/{t}':>10s}" for c, t in settings)]
    for (backend, probe), col in sorted(margins.items()):
        lines.append(f"{backend:18s} {probe:24s} " + " ".join(f"{col.get(f'{c}/{t}', 0.0):10.3f}" for c, t in settings))
    print("\nmax margin (error / bound) per setting:\n" + "\n".join(lines))
    record_property("margins", json.dumps({f"{b}:{p}": col for (b, p), col in margins.items()}))
    assert any(st != "unsupported" for st in tables[ref].values())
    for s in settings:
        diff = {key: (tables[ref][key], st) for key, st in tables[s].items() if tables[ref].get(key) != st}
        assert tables[s].keys() == tables[ref].keys() and not diff, f"probe verdicts {ref} vs {s}: {diff}"
        diff = {key: (cases[ref].get(key), st) for key, st in cases[s].items() if cases[ref].get(key) != st}
        assert cases[s].keys() == cases[ref].keys() and not diff, f"case verdicts {ref} vs {s}: {diff}"


if __name__ == "__main__":
    _child()
