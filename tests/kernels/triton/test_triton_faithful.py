"""The faithful Triton interpreter: the model's arithmetic against float64 / exhaustive references, the
self-test bit for bit, and a verdict that the raw interpreter gets wrong (TF32 in fp32)."""

import importlib.util
import json
import math
import subprocess
import sys

import _paths
import pytest
import torch

from attnum.kernels.triton import model
from attnum.numerics.rounding import round_to

KERNEL = _paths.TESTS / "_interp_triton_attention.py"


def needs_triton():
    if importlib.util.find_spec("triton") is None:  # find_spec: triton must not be imported here
        pytest.skip("triton is not installed (pip install 'attnum[triton]')")


def test_nearest_away_rounds_ties_away_and_the_rest_to_nearest():
    # every fp32 whose low 13 bits hold a tie (0x1000), just below and just above one, on both signs
    base = torch.arange(0, 1 << 10, dtype=torch.int32) << 13 | (127 << 23)
    for low, up in ((0x1000, True), (0x0FFF, False), (0x1001, True)):
        x = (base | low).view(torch.float32)
        for sign in (1.0, -1.0):
            r = round_to(sign * x, "tf32", "nearest_away").double()
            lo = (base.view(torch.float32) * sign).double()
            want = lo + sign * 2.0 ** -10 if up else lo
            assert torch.equal(r, want), (low, sign)


def test_tf32_operand_is_truncation_and_rna_differs_only_at_and_above_half():
    x = torch.tensor([1 + 2 ** -11, 1 + 2 ** -11 - 2 ** -23, -(1 + 2 ** -11)], dtype=torch.float32)
    assert model.tf32_operand(x).tolist() == [1.0, 1.0, -1.0]
    assert model.tf32_rna(x).tolist() == [1 + 2 ** -10, 1.0, -(1 + 2 ** -10)]


def test_dot_precisions_against_float64():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(8, 64, generator=g), torch.randn(64, 8, generator=g)
    acc = torch.zeros(8, 8, dtype=torch.float64)
    gold = a.double() @ b.double()
    T = a.double().abs() @ b.double().abs()  # sum of |terms|
    u32, u_tf32 = 2.0 ** -24, 2.0 ** -11
    err = {p: ((model.dot(a, b, acc, precision=p) - gold).abs() / T).max().item() for p in model.PRECISIONS}
    # ieee: 64 fp32 fma roundings; tf32: operands truncated (2 x 2^-10 relative) + 8 fp32 roundings
    assert err["ieee"] <= 64 * u32 * 1.01
    assert err["tf32x3"] <= 64 * u32 * 1.01
    assert 2 * u_tf32 / 8 < err["tf32"] <= 2 * 2 * u_tf32 + 8 * u32  # truncation shows, and is bounded


def test_bf16_elementwise_is_torch_bf16_exhaustively_over_a_binade():
    x = torch.arange(0, 1 << 7, dtype=torch.int16) | 0x3F80  # every bf16 in [1, 2)
    a = x.view(torch.bfloat16)
    b = a.flip(0)
    for op in (torch.add, torch.mul, torch.sub):
        got = model.elementwise(op, a.float(), b.float(), "bf16")
        assert torch.equal(got, op(a, b).float())  # torch computes bf16 ops in fp32, rounds once


def test_tree_sum_rounds_every_level():
    x = torch.tensor([1.0, 2.0 ** -8, 2.0 ** -8, 2.0 ** -8])  # bf16: 1 + 2^-8 rounds back to 1
    assert model.tree_sum(x, 0, "bf16").item() == 1.0 + 2.0 ** -7  # (1 + 2^-8) + (2^-8 + 2^-8) -> 1, 2^-7
    assert model.tree_sum(x, 0, "fp32").item() == 1.0 + 3 * 2.0 ** -8


def test_integer_dot_wraps_and_float_to_int_truncates():
    a = torch.full((1, 64), 127, dtype=torch.int8)
    b = torch.full((64, 1), -128, dtype=torch.int8)
    assert model.dot_int(a, b, torch.zeros(1, 1, dtype=torch.int64)).item() == 64 * 127 * -128  # exact
    big = torch.full((1, 1), 2**31 - 1, dtype=torch.int64)
    assert model.dot_int(torch.ones(1, 1), torch.ones(1, 1), big).item() == -(2**31)  # int32 wraps
    assert model.to_int(torch.tensor([127.9, -127.9, 0.5, -0.5]), 8).tolist() == [127, -127, 0, 0]
    for bad in (math.nan, math.inf, 128.0, -129.0):  # LLVM poison: not modelled
        with pytest.raises(NotImplementedError, match="not modelled"):
            model.to_int(torch.tensor([bad]), 8)


def test_self_test_passes_and_the_raw_interpreter_fails_it():
    needs_triton()
    code = ("import json; from attnum.kernels import triton_selftest as s\n"
            "faithful = [(c.name, c.ok) for c in s.run()]\n"
            "raw = [(n, s._bits_equal(g, w)[0]) for n, g, w, *_ in s._checks()]\n"
            "print(json.dumps({'faithful': faithful, 'raw': raw}))")
    env = {"TRITON_INTERPRET": "1", "PATH": "/usr/bin:/bin", **{k: v for k, v in __import__("os").environ.items()
                                                                 if k in ("PYTHONPATH", "HOME", "VIRTUAL_ENV")}}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=_paths.HANG_S, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout.splitlines()[-1])
    assert len(out["faithful"]) >= 10 and all(ok for _, ok in out["faithful"]), out["faithful"]
    raw = dict(out["raw"])
    assert not raw["bf16 q * k"] and not raw["fp32 -> bf16 store"] and not raw["fp32 tl.dot tf32"], raw
    # SageAttention's dots: numpy's int8 matmul is exact (as the GPU's); its fp16 accumulator is not the MMA's
    assert raw["int8 tl.dot -> int32"] and not raw["fp16 tl.dot out_dtype=fp16"], raw
    # numpy rounds a * b before the add: the contracted checks fail raw, the uncontracted ones pass
    assert not raw["fp32 a * b + c (fp-fusion)"] and not raw["fp32 c - a * b (fp-fusion)"], raw
    assert raw["fp32 a * b + c (no fp-fusion)"] and raw["fp32 c - a * b (no fp-fusion)"], raw
    assert not raw["fp32 acc * s + tl.dot(a, b) (combined)"], raw


def test_fused_and_unfused_mul_add_differ_on_the_self_test_inputs():
    """Else the self-test's fp-fusion checks could not tell the two models apart."""
    from attnum.kernels.triton import model
    from attnum.kernels.triton.selftest import mul_add_inputs

    a, b, c = mul_add_inputs(32)
    fused, unfused = model.mul_add(a, b, c, fused=True), model.mul_add(a, b, c, fused=False)
    assert int((fused != unfused).sum()) >= 8
    assert torch.equal(fused, model.mul_add(b, a, c, fused=True))


def test_combined_dot_add_differs_from_adding_after_and_from_an_fma():
    """The self-test's dot-add inputs tell the combine pass (acc as the MMA's accumulator) from both
    wrong models: the dot from zero then one add, and the rescale fused into the add."""
    from attnum.kernels.triton.selftest import dot_add_inputs

    a, b, acc, s = dot_add_inputs()
    start = model.cast(acc.double() * s.double()[:, None], "fp32")
    zero = torch.zeros(16, 16, dtype=torch.float64)
    d = model.dot(a.double(), b.double(), zero, operand_bits=16)
    combined = model.dot(a.double(), b.double(), start, operand_bits=16)
    added = model.cast(d + start, "fp32")
    fused = model.mul_add(acc, s[:, None].expand(16, 16), d, fused=True)
    assert int((combined != added).sum()) >= 16 and int((combined != fused).sum()) >= 16


_FUSION_PROBE = """
import json, os, torch
os.environ["TRITON_INTERPRET"] = "1"
from attnum.kernels import triton_faithful, triton_model as model
from attnum.kernels import triton_selftest_kernels as K
from attnum.kernels.triton.selftest import mul_add_inputs
a, b, c = mul_add_inputs(32)
y, z, w = (torch.empty(32) for _ in range(3))
with triton_faithful.faithful():
    K.mul_add[(1,)](a, b, c, y, z, w, N=32)
print(json.dumps({"label": triton_faithful.name("faithful"),
                  "fused": torch.equal(y.double(), model.mul_add(a, b, c, fused=True)),
                  "unfused": torch.equal(y.double(), model.mul_add(a, b, c, fused=False))}))
"""


@pytest.mark.parametrize(("env", "fused"), [({}, True), ({"TRITON_DEFAULT_FP_FUSION": "0"}, False),
                                            ({"TRITON_FORCE_DISABLE_FP_FUSION": "1"}, False)])
def test_fp_fusion_follows_tritons_own_switches(env, fused):
    """Triton 3.9 fuses unless TRITON_DEFAULT_FP_FUSION=0 or TRITON_FORCE_DISABLE_FP_FUSION=1; the
    model, and the label verdicts carry, follow the same switches."""
    needs_triton()
    base = {k: v for k, v in __import__("os").environ.items()
            if k in ("PYTHONPATH", "HOME", "VIRTUAL_ENV") or k.startswith("ATEN")}
    run = subprocess.run([sys.executable, "-c", _FUSION_PROBE], capture_output=True, text=True, timeout=_paths.HANG_S,
                         env={"PATH": "/usr/bin:/bin", **base, **env})
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout.splitlines()[-1])
    assert (out["fused"], out["unfused"]) == (fused, not fused), out
    assert out["label"] == "triton-interp:nvidia-sm90" + (",fp-fusion" if fused else "")


def test_tf32_kernel_fails_fp32_under_the_gpu_model_and_passes_raw():
    needs_triton()
    from attnum.audit.config import AuditConfig
    from attnum.audit.runner import run_audit
    from attnum.kernels.triton import faithful as triton_faithful

    rows = {}
    for numerics in ("faithful", "raw"):
        cfg = AuditConfig(target=f"triton-interpret:{KERNEL}:attention_tf32", dtypes="fp32", probes="scale-argument",
                          numerics=numerics)
        report = run_audit(cfg, isolate=True)
        assert report.environment["numerics"] == (triton_faithful.name("faithful") if numerics == "faithful"
                                                  else "triton-interp:raw")
        rows[numerics] = report.results[0]
    assert rows["raw"].status == "pass", rows["raw"].note
    assert rows["faithful"].status == "fail" and rows["faithful"].ratio > 10, rows["faithful"].note


def test_a_triton_the_model_does_not_fit_makes_every_case_unsupported(monkeypatch):
    needs_triton()
    from attnum.audit.harness import raised
    from attnum.kernels.triton import interp as triton_interp
    from attnum.kernels.triton import selftest as triton_selftest

    monkeypatch.setattr(triton_selftest, "failure", lambda arch="sm90": "bf16 q * k: 32 of 32 differ")
    fn = triton_interp.under(lambda *a, **kw: 1 / 0, "faithful", "k")  # never reached
    with pytest.raises(NotImplementedError, match="does not fit") as err:
        fn()
    assert raised(err.value).status == "unsupported"
    raw = triton_interp.under(len, "raw")  # raw: the self-test is not consulted
    assert raw("abc") == 3 and raw.__wrapped__ is len


@pytest.mark.parametrize(("env", "version", "fused"), [
    ({}, (3, 9), True), ({}, (3, 10), False), ({"TRITON_DEFAULT_FP_FUSION": "off"}, (3, 9), False),
    ({"TRITON_DEFAULT_FP_FUSION": "TRUE"}, (3, 10), True), ({"TRITON_DEFAULT_FP_FUSION": "maybe"}, (3, 9), True),
    ({"TRITON_FORCE_DISABLE_FP_FUSION": "1"}, (3, 9), False), ({"TRITON_FORCE_DISABLE_FP_FUSION": "1"}, (3, 8), True),
])
def test_fp_fusion_default_without_importing_triton(env, version, fused, monkeypatch):
    """Before triton is imported the switch is read from the environment and the installed version
    (3.10 announced fusion off by default; 3.8 has no force-disable switch)."""
    import sys

    from attnum.kernels.triton import fusion as triton_fusion

    monkeypatch.delitem(sys.modules, "triton", raising=False)
    for key in ("TRITON_DEFAULT_FP_FUSION", "TRITON_FORCE_DISABLE_FP_FUSION"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(triton_fusion, "_version", lambda: version)
    assert triton_fusion.fp_fusion_default() is fused


def test_device_function_calls_are_not_repatched_and_tl_core_is_restored():
    """A helper called in a kernel's loop: Triton's interpreter re-patches triton.language on each call
    (13 patches for one launch here); the faithful model patches once per launch (2 launches: 2),
    restores tl.core afterwards, and computes the same output."""
    needs_triton()
    import os

    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, str(_paths.TESTS / "_interp_device_fn_check.py")],
                         capture_output=True, text=True, timeout=_paths.HANG_S, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.splitlines()[-1])
    assert got["equal"] and got["restored"], got
    assert got["faithful_patches"] == 2 and got["raw_patches"] > 2, got


def test_a_float_argument_is_an_fp32_scalar_and_a_float_constexpr_stays_weak():
    """Triton's launcher types a float kernel argument fp32, so ``x_bf16 * scale`` is an fp32 product on
    the GPU; its interpreter passes the Python float on as a weak scalar (the product stays bf16, the
    scale rounded to bf16). Under the model the argument is fp32; a float constexpr stays weak (bf16),
    as compiled Triton treats it. (The raw interpreter's bf16 products are not comparable: it stores
    bf16 bit patterns as integers.)"""
    needs_triton()
    import os

    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, str(_paths.TESTS / "_interp_float_arg_check.py")],
                         capture_output=True, text=True, timeout=_paths.HANG_S, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.splitlines()[-1])
    x = torch.tensor(got["x"], dtype=torch.float64)
    fp32 = model.cast(x * model.cast(torch.tensor(0.1, dtype=torch.float64), "fp32"), "fp32")
    weak = model.cast(x * model.cast(torch.tensor(0.1, dtype=torch.float64), "bf16"), "bf16")
    by_arg, by_const = (torch.tensor(v, dtype=torch.float64) for v in got["faithful"])
    assert torch.equal(by_arg, fp32) and torch.equal(by_const, weak)
    assert int((fp32 != weak).sum()) > 32  # the two typings differ on most of these inputs
