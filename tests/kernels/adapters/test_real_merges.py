"""FlashInfer 0.7.2's Triton merges and ring-flash-attn 0.1.8's merge, run as fetched (attnum kernels fetch
flashinfer|ring-flash-attn; the wheels are cached in ~/.cache/attnum as vLLM's), Triton through the faithful
interpreter. A failed download skips, saying why. Small states on purpose (tests/_real_merges_check.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import _paths
import pytest
from _wheel_helpers import fetched_or_skip

from attnum.audit.config import AuditConfig
from attnum.audit.runner import run_audit
from attnum.kernels.wheels import source as wheels

HERE = _paths.TESTS  # the helper scripts


@pytest.fixture(scope="module")
def flashinfer():
    fetched_or_skip("flashinfer")


@pytest.fixture(scope="module")
def ring():
    fetched_or_skip("ring-flash-attn", triton=False)  # ring-flash-attn's merge is plain PyTorch


def small_merges(numerics, *targets):
    env = {**os.environ, "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join([str(HERE.parent / "src"), str(HERE), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, str(HERE / "_real_merges_check.py"), numerics, *targets],
                         capture_output=True, text=True, timeout=_paths.HANG_S, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.splitlines()[-1])


def test_flashinfer_triton_merges_under_the_gpu_model(flashinfer):
    got = small_merges("faithful", "flashinfer-triton-merge", "flashinfer-triton-merge-n",
                       "flashinfer-triton-merge-varlen")
    for dt in ("fp16", "bf16", "fp32"):
        two, n_way, varlen = (got[n][dt] for n in ("flashinfer-triton-merge", "flashinfer-triton-merge-n",
                                                    "flashinfer-triton-merge-varlen"))
        assert two["two live"][0] == n_way["two live"][0] == "pass", (two, n_way)
        # merge_state: exp2(-inf - (-inf)) = NaN for two empty states (flashinfer#4051); live beside empty is fine
        assert two["two empty"][0] == "fail" and "NaN" in two["two empty"][1], two
        assert two["empty + live lse~-6e4 base 2"][0] == "pass" and two["[empty, live, live]"][0] == "pass"
        # merge_states starts from (0, -5e4, 1): two empty states give lse -5e4, a live state below it is lost
        assert n_way["two empty"][0] == "fail" and "-50000" in n_way["two empty"][1], n_way
        assert n_way["empty + live lse~-6e4 base 2"][0] == "fail", n_way
        assert n_way["[empty, live, live]"][0] == "pass", n_way
        # the interpreter cannot run variable_length_merge_states: unsupported, never a pass
        assert {s for s, _ in varlen.values()} == {"unsupported"}, varlen
        assert all("iter.to(tl.int64)" in note for _, note in varlen.values())


def test_ring_flash_attn_merge_poisons_a_chain_that_starts_empty(ring):
    report = run_audit(AuditConfig(target="ring-flash-attn-merge", dtypes="fp16,bf16,fp32",
                                   probes="merge-empty-chain,merge-two-empty,lse-base"), isolate=False)
    rows = {(r.name, r.dtype): r for r in report.results}
    for dt in ("fp16", "bf16", "fp32"):
        assert rows[("lse-base", dt)].status == "pass", rows[("lse-base", dt)].note
        chain = rows[("merge-empty-chain", dt)]
        assert chain.status == "fail" and "NaN" in chain.note, chain.note
        status = {c.label: c.verdict.status for c in chain.cases}
        assert status["[live, empty, live] (merge_states)"] == "pass"
        assert status["[empty, live, live] (merge_states)"] == "fail"
        assert rows[("merge-two-empty", dt)].status == "fail" and "NaN" in rows[("merge-two-empty", dt)].note


def test_new_wheels_are_pinned_by_hash_and_unfetched_means_unavailable(monkeypatch, tmp_path):
    from attnum.kernels.registry import resolve

    assert {"flashinfer", "ring-flash-attn"} <= {n for n, (_, _, sha) in wheels.WHEELS.items() if len(sha) == 64}
    monkeypatch.setenv("ATTNUM_CACHE", str(tmp_path))
    for name, pkg in (("flashinfer-triton-merge-n", "flashinfer"), ("ring-flash-attn-merge", "ring-flash-attn")):
        if wheels.installed(pkg):
            continue
        t = resolve(name, "cpu")
        assert not t.available and f"attnum kernels fetch {pkg}" in t.reason


def test_a_wheel_whose_hash_differs_is_refused(monkeypatch, tmp_path):
    from attnum.errors import AttnumEnvironmentError

    monkeypatch.setenv("ATTNUM_CACHE", str(tmp_path))
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "ring_flash_attn-0.1.8-py3-none-any.whl").write_bytes(b"not the wheel")
    with pytest.raises(AttnumEnvironmentError, match="sha256"):
        wheels.fetch("ring-flash-attn", quiet=True)
