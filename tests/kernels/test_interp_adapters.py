"""Interpreter adapters: a Triton kernel under TRITON_INTERPRET=1 and JAX Pallas kernels in interpret mode.

The Triton kernel is attnum's own (tests/_interp_triton_attention.py); the Pallas kernels are the ones
that ship inside jax. Each test skips, saying which extra installs the package, when it is absent.
The interpreters are slow: every test here runs a probe or two at fp32/bf16.
"""

import importlib.util
import json
import math
import subprocess
import sys

import _paths
import pytest
import torch

from attnum.audit.config import AuditConfig
from attnum.audit.harness import ProbeContext
from attnum.audit.runner import run_audit
from attnum.kernels import registry
from attnum.numerics.formats import get_format

pytestmark = [pytest.mark.usefixtures("one_thread")]

KERNEL = _paths.TESTS / "_interp_triton_attention.py"
TRITON = f"triton-interpret:{KERNEL}:attention"
TRITON_BUG = f"triton-interpret:{KERNEL}:attention_unmasked_tail"


def audit(target, probes, dtypes="fp32"):
    # Triton targets in a child process (as `attnum audit` runs them): this test process may already
    # have imported triton (torch's inductor does) before TRITON_INTERPRET=1 could be set.
    isolate = target.startswith("triton-interpret:")
    report = run_audit(AuditConfig(target=target, dtypes=dtypes, probes=probes), isolate=isolate)
    assert report.available, report.reason
    return {(r.name, r.dtype): r for r in report.results}


def needs(package, extra):
    # find_spec, not import: triton must not be imported before TRITON_INTERPRET=1 is set.
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} is not installed (pip install 'attnum[{extra}]')")


@pytest.mark.parametrize("name, package, extra", [("pallas-mha", "jax", "jax"), ("pallas-tpu-flash", "jax", "jax"),
                                                  (TRITON, "triton", "triton")])
def test_missing_package_names_its_extra(monkeypatch, name, package, extra):
    real = registry._installed
    monkeypatch.setattr(registry, "_installed", lambda p: p != package and real(p))
    t = registry.resolve(name, "cpu")
    assert not t.available and f"attnum[{extra}]" in t.reason, t.reason


def test_interpreters_run_on_cpu_only():
    assert not registry.resolve("pallas-mha", "cuda").available
    assert "cpu" in registry.resolve(TRITON, "cuda").reason  # refused before anything is imported


def test_triton_imported_before_the_interpreter_is_one_line(monkeypatch):
    needs("triton", "triton")
    from attnum.errors import AttnumEnvironmentError
    from attnum.kernels.triton import interp as triton_interp

    class Compiled:  # what tl.max is when triton was imported without TRITON_INTERPRET=1
        pass

    Compiled.__name__ = "JITFunction"
    import triton.language.standard as standard

    monkeypatch.setattr(standard, "max", Compiled())
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # load() sets it to 1; restored after the test
    with pytest.raises(AttnumEnvironmentError, match="fresh process"):
        triton_interp.load(f"{KERNEL}:attention")


# --- Triton ---------------------------------------------------------------------------------------


def test_own_triton_kernel_passes_through_the_isolated_cli():
    needs("triton", "triton")
    run = subprocess.run([sys.executable, "-m", "attnum", "audit", TRITON, "--probes", "scale-argument,causal-alignment",
                          "--dtype", "fp32", "--json"], capture_output=True, text=True, timeout=_paths.HANG_S)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    report = json.loads(run.stdout)
    assert report["passed"] is True and report["isolated"] is True
    assert {p["name"] for p in report["probes"]} == {"scale-argument", "causal-alignment"}


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_own_triton_kernel_matches_golden(dtype):
    needs("triton", "triton")
    rows = audit(TRITON, "scale-argument,causal-alignment", dtype)
    assert all(r.status == "pass" for r in rows.values()), {k: (r.status, r.note) for k, r in rows.items()}


def test_triton_tail_mask_bug_is_caught():
    needs("triton", "triton")
    rows = audit(TRITON_BUG, "scale-argument,causal-alignment")
    scale = rows[("scale-argument", "fp32")]  # S = 48 < BLOCK_N = 64: the padded keys score 0
    assert scale.status == "fail" and scale.target_error > 1e4 * scale.bound, scale.note
    assert rows[("causal-alignment", "fp32")].status == "fail"


# --- JAX Pallas -----------------------------------------------------------------------------------


def test_bf16_crosses_to_jax_bit_for_bit():
    needs("jax", "jax")
    from attnum.kernels.adapters import pallas

    codes = torch.arange(-(2 ** 15), 2 ** 15, dtype=torch.int32).to(torch.int16)
    x = codes.view(torch.bfloat16)
    back = pallas.to_torch(pallas.to_jax(x))
    assert back.dtype == torch.bfloat16 and torch.equal(back.view(torch.int16), codes)  # NaN payloads too
    with pytest.raises(NotImplementedError, match="x64"):
        pallas.to_jax(torch.zeros(2, dtype=torch.float64))


def test_pallas_tpu_flash_adds_its_bias_before_the_scale():
    needs("jax", "jax")
    rows = audit("pallas-tpu-flash", "float-bias,scale-argument")
    bias = rows[("float-bias", "fp32")]
    worst = max(c.verdict.target_error for c in bias.cases)
    print(f"pallas-tpu-flash float-bias fp32: target error {worst:.3g}, bound {bias.bound:.3g}")
    assert bias.status == "fail" and worst > 1.0, bias.note
    assert rows[("scale-argument", "fp32")].status == "pass"  # no bias: the kernel is right


def test_pallas_mha_nan_for_causal_with_more_queries_than_keys():
    needs("jax", "jax")
    row = audit("pallas-mha", "causal-alignment")[("causal-alignment", "fp32")]
    assert row.status == "fail" and math.isinf(row.target_error), row.note
    bad = [c for c in row.cases if c.verdict.status == "fail"]
    assert bad and all(int(c.label.split("x")[0]) > int(c.label.split("x")[1].split()[0]) for c in bad), \
        [c.label for c in bad]  # only N > S


def test_pallas_mha_refuses_what_it_cannot_express():
    needs("jax", "jax")
    from attnum.kernels.adapters import pallas

    q = torch.zeros(1, 2, 8, 16)
    with pytest.raises(NotImplementedError, match="attn_mask"):
        pallas.mha_sdpa(q, q, q, attn_mask=torch.ones(8, 8, dtype=torch.bool))
    with pytest.raises(NotImplementedError, match="GQA"):
        pallas.mha_sdpa(q, q[:, :1], q[:, :1], enable_gqa=True)
    with pytest.raises(NotImplementedError, match="multiple"):
        pallas.mha_sdpa(torch.zeros(1, 2, 130, 16), q, q)


def test_pallas_mha_backward_rounds_d_to_the_input_dtype():
    """N = S = 1: the softmax has one key, so dK is exactly 0 in float64 (and in an fp32-D backward);
    mha's backward computes D = rowsum(dO * O) in bf16, and dK comes out nonzero."""
    needs("jax", "jax")
    from attnum.kernels.adapters import pallas

    cases = {}
    for dt in ("fp32", "bf16"):
        ctx = ProbeContext(target=pallas.mha_sdpa, dtype=getattr(torch, {"fp32": "float32", "bf16": "bfloat16"}[dt]),
                           fmt=get_format(dt))
        q, k, v = ctx.cast(5 * ctx.randn(1, 2, 1, 32, salt=1), 3 * ctx.randn(1, 2, 1, 32, salt=2),
                           3 * ctx.randn(1, 2, 1, 32, salt=3))
        cases[dt] = ctx.check_grad("N=S=1", q, k, v).verdict
    assert cases["fp32"].status == "pass", cases["fp32"]
    assert cases["bf16"].status == "fail" and cases["bf16"].baseline_error == 0, cases["bf16"]
    assert cases["bf16"].note.startswith("dk"), cases["bf16"].note
