"""The torch-eager policy against PyTorch eager attention on CPU (as validate does for the flash kernel)."""

import pytest

from attnum.numerics.policy import parse_policy
from attnum.studies.validation.validate_eager import EagerValidateConfig, validate_eager_point


def test_torch_eager_policy_sites():
    p = parse_policy("torch-eager:bf16")
    assert (p.inputs.name, p.scores.name, p.exp.name, p.row_sum.name, p.probs.name, p.acc.name, p.out.name) == (
        "bf16", "bf16", "fp32", "fp32", "bf16", "fp32", "bf16")
    assert p.matmul_acc.name == "fp32" and p.normalize == "divide" and p.name == "torch-eager:bf16"
    assert parse_policy("torch-eager", "fp16").scores.name == "fp16"


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
@pytest.mark.parametrize("seq_len", [256, 1000])
def test_torch_eager_matches_eager_attention(fmt, seq_len, one_thread):
    row = validate_eager_point(fmt, seq_len, EagerValidateConfig(heads=2, seq_lens=(seq_len,), formats=(fmt,)))
    print(row)
    # One output rounding landing on the other neighbour (GEMM summation order, torch's vectorised exp)
    # is 1 ULP; the policy must leave nothing larger, and match bit for bit almost everywhere.
    assert row["max_ulp"] <= 1.0
    # How many elements the GEMM's summation order flips to the other neighbour depends on the ISA
    # (measured 99.3-99.98% identical with AVX512, 98.5-99.0% with AVX2): the claim tested is that the
    # policy models eager attention and the other policies do not (~40% identical), on any CPU.
    assert row["identical"] >= 0.95
    assert row["identical_uniform"] < 0.6 and row["identical_fa2"] < 0.6
