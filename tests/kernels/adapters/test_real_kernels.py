"""SGLang's and vLLM's Triton attention kernels, audited on CPU through the faithful interpreter.

The kernel files come from the installed package or the pinned wheel, fetched once into ~/.cache/attnum
(``attnum kernels fetch``; the vLLM wheel is 336 MB: CI caches that folder). A failed download skips,
saying why. Lean on purpose: a few small cases per kernel and dtype (tests/_real_kernels_check.py), in
one child process per numerics model (TRITON_INTERPRET=1 must precede triton's import)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import _paths
import pytest
import torch
from _wheel_helpers import fetched_or_skip

from attnum.kernels.wheels import source as wheels

HERE = _paths.TESTS  # the helper scripts
ADAPTER = f"triton-interpret:{HERE.parent / 'examples' / 'sglang_decode_adapter.py'}:SGLangDecode"
TRITON_ATTENTION = ("sglang-decode", "vllm-unified", "sglang-extend", "vllm-triton-decode", "vllm-prefix-prefill",
                    "sglang-context", ADAPTER)
TARGETS = ("sglang-merge", "vllm-triton-merge", *TRITON_ATTENTION)


@pytest.fixture(scope="module")
def fetched():
    fetched_or_skip("sglang", "vllm")


def lean_audit(numerics, *targets):
    env = {**os.environ, "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join([str(HERE.parent / "src"), str(HERE), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, str(HERE / "_real_kernels_check.py"), numerics, *targets],
                         capture_output=True, text=True, timeout=_paths.HANG_S, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.splitlines()[-1])


def statuses(rows):
    return {status for _, status, _, _ in rows}


@pytest.mark.slow  # tens of seconds to minutes: left out of pytest -m "not slow" (README)
def test_real_kernels_under_the_gpu_model(fetched):
    got = lean_audit("faithful", *TARGETS)
    for dt in ("fp16", "bf16", "fp32"):
        # SGLang's merge: two empty states (lse = -inf) merge to NaN; vLLM's guards it
        assert statuses(got["sglang-merge"][dt]) == {"fail"}, got["sglang-merge"][dt]
        assert all("NaN" in note for *_, note in got["sglang-merge"][dt])
        assert statuses(got["vllm-triton-merge"][dt]) == {"pass"}, got["vllm-triton-merge"][dt]
    for name in TRITON_ATTENTION:
        for dt in ("fp16", "bf16"):  # bf16 margins of the same order as fp16's (<= 1 both)
            assert statuses(got[name][dt]) == {"pass"}, (name, dt, got[name][dt])
        # fp32: their tl.dot runs TF32 (Triton's NVIDIA default): far outside an fp32 bound
        assert all(status == "fail" and ratio > 100 for _, status, ratio, _ in got[name]["fp32"]), got[name]["fp32"]


@pytest.mark.slow  # 20-40 s each measured under load: not in -m "not slow"
@pytest.mark.parametrize("name", ["sglang-decode", "sglang-context"])
def test_the_raw_interpreter_gets_bf16_and_fp32_wrong(fetched, name):
    got = lean_audit("raw", name)[name]
    assert all(status == "fail" and ratio > 1e6 for _, status, ratio, _ in got["bf16"]), got["bf16"]  # bits as ints
    assert statuses(got["fp32"]) == {"pass"} and statuses(got["fp16"]) == {"pass"}  # exact fp32 dots


def test_unavailable_is_never_a_pass(monkeypatch, tmp_path):
    from attnum.audit.config import AuditConfig
    from attnum.audit.runner import run_audit
    from attnum.kernels.registry import resolve

    monkeypatch.setenv("ATTNUM_CACHE", str(tmp_path))
    monkeypatch.setattr(wheels, "installed", lambda pkg: False)
    t = resolve("vllm-unified", "cpu")
    assert not t.available and "attnum kernels fetch vllm" in t.reason
    report = run_audit(AuditConfig(target="sglang-merge", dtypes="fp32", probes="merge-two-empty"), isolate=False)
    assert not report.available and not report.passed


def test_the_docs_decode_adapter_is_short_and_needs_no_attnum():
    text = (HERE.parent / "examples" / "sglang_decode_adapter.py").read_text()
    code = text.split('"""', 2)[2]  # after the module docstring
    assert len(code.strip().splitlines()) < 40 and "import attnum" not in code and "from attnum" not in code


def test_kernels_fetch_extracts_from_a_cached_wheel_and_refuses_unknown_names(tmp_path, tmp_path_factory,
                                                                             monkeypatch, capsys):
    import shutil

    from _wheel_helpers import pinned_wheel

    from attnum.cli import main

    wheel = pinned_wheel(tmp_path_factory, "sglang")  # 2.5 MB; skipped where the registry cannot be reached
    (tmp_path / "wheels").mkdir()
    shutil.copy(wheel, tmp_path / "wheels")
    monkeypatch.setenv("ATTNUM_CACHE", str(tmp_path))
    monkeypatch.setattr(wheels, "installed", lambda pkg: False)
    assert wheels.missing("sglang")
    assert main(["kernels", "fetch", "sglang"]) == 0  # no download: the wheel is in the cache
    assert not wheels.missing("sglang") and not (tmp_path / "wheels" / wheel.name).exists()  # kept: the files
    assert main(["kernels", "fetch", "sglang"]) == 0  # fetched: one line at once, nothing downloaded
    assert "already fetched, sha256 checked" in capsys.readouterr().out
    assert main(["kernels", "fetch", "nope"]) == 2


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_vllm_prefix_prefill_cache_layout_is_vllms(dtype):
    from attnum.kernels.adapters.vllm import vllm_cache_layout

    pool_k, pool_v = torch.randn(3, 16, 2, 64).to(dtype), torch.randn(3, 16, 2, 64).to(dtype)
    k, v = vllm_cache_layout(pool_k, pool_v)
    x = 16 // pool_k.element_size()  # vLLM: 16 bytes per innermost vector
    assert k.shape == (3, 2, 64 // x, 16, x) and v.shape == (3, 2, 64, 16)
    for blk, p, g, dd in ((0, 0, 0, 0), (2, 15, 1, 63), (1, 7, 0, 9), (2, 3, 1, x)):
        assert k[blk, g, dd // x, p, dd % x] == pool_k[blk, p, g, dd]
        assert v[blk, g, dd, p] == pool_v[blk, p, g, dd]


def test_interpreted_kernels_run_on_one_thread_and_restore_it():
    from attnum.kernels.triton.interp import one_thread

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        seen = one_thread(lambda: torch.get_num_threads())()
        assert seen == 1 and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
