"""P and V on different formats under ``mma=ARCH`` (issue 42): one MMA instruction reads one operand type,
so the pair runs in the type of the operand that holds the other exactly, or the policy is refused.

The refused pairs once cast V to P's format: Q = K = 0 with V = 2^17 in bf16 and P in fp16 gave O = inf
(exact 131072); V = 1 + 2^-9 in fp16 with P in bf16 gave 1.0 (exact 1.001953125). The accepted pairs are
checked against the float64 golden value, which they reach exactly (Q = K = 0: P = 1 on every key, O = V)."""

import pytest
import torch

from attnum.attention.flash import flash_attention
from attnum.attention.golden import golden_attention
from attnum.errors import AttnumInputError


def _zero_qk_with(v_value: float, dtype: torch.dtype, S: int = 4):
    """Q = K = 0 (every score 0, P = 1), V = v_value on every key: O = v_value exactly. (1, 1, 2, S, d=16)"""
    q = torch.zeros(1, 1, 2, 16, dtype=dtype)
    k = torch.zeros(1, 1, S, 16, dtype=dtype)
    v = torch.full((1, 1, S, 16), v_value, dtype=dtype)
    assert v.double().eq(v_value).all()  # the value is on the input format's grid
    return q, k, v


@pytest.mark.parametrize("policy,v_value,dtype", [
    ("fa2:bf16,probs=fp16,mma=sm90", 2.0**17, torch.bfloat16),  # old: inf (V cast to fp16)
    ("fa2:fp16,probs=bf16,mma=sm90", 1 + 2.0**-9, torch.float16),  # old: 1.0 (V cast to bf16)
    ("fa2:fp16,probs=bf16,mma=sm80", 1 + 2.0**-9, torch.float16),
])
def test_bf16_with_fp16_under_mma_is_refused_in_one_line(policy, v_value, dtype):
    q, k, v = _zero_qk_with(v_value, dtype)
    golden = golden_attention(q.double(), k.double(), v.double())
    assert golden.eq(v_value).all()
    with pytest.raises(AttnumInputError, match="neither format holds the other") as err:
        flash_attention(q, k, v, policy=policy)
    assert len(str(err.value).splitlines()) == 1
    assert "probs=" in str(err.value) and "inputs=" in str(err.value)


@pytest.mark.parametrize("policy,v_value,dtype", [
    ("fa2:bf16,probs=e4m3fn,mma=sm90", 2.0**17 + 2.0**10, torch.bfloat16),  # fp8 P -> bf16 (exact)
    ("fa2:bf16,probs=e5m2,mma=sm89", 1 + 2.0**-7, torch.bfloat16),
    ("fa2:fp16,probs=e4m3fn,mma=sm90", 1 + 2.0**-10, torch.float16),  # fp8 P -> fp16 (exact)
    ("fa2:fp32,probs=bf16,mma=sm90", 2.0**17 + 2.0**7, torch.float32),  # bf16 P -> tf32 (exact)
    ("fa2:fp32,probs=fp16,mma=sm80", 1 + 2.0**-10, torch.float32),  # fp16 P -> tf32 (exact)
    ("fa2:bf16,probs=bf16,mma=sm90", 2.0**17, torch.bfloat16),  # control: one format
])
def test_accepted_pairs_reach_the_golden_value(policy, v_value, dtype):
    q, k, v = _zero_qk_with(v_value, dtype)
    golden = golden_attention(q.double(), k.double(), v.double())
    out = flash_attention(q, k, v, policy=policy).double()
    # O = V exactly: P = 1 is exact in every format, the sums S * V and S * 1 are exact in fp32 and
    # the division by l = S a power of two; any rounding of V on its way to the MMA shows here
    assert torch.equal(out, golden), (policy, out.flatten()[:2].tolist(), v_value)


def test_operand_dtypes_convert_only_the_operand_the_other_holds():
    from attnum.numerics.mma.sites import operand_dtypes

    assert operand_dtypes("e4m3fn", "bf16", arch="sm90") == (torch.bfloat16, torch.bfloat16)
    assert operand_dtypes("bf16", "e5m2", arch="sm90") == (torch.bfloat16, torch.bfloat16)
    assert operand_dtypes("fp16", "fp32", arch="sm80") == (torch.float32, torch.float32)
    assert operand_dtypes("e4m3fn", "e5m2", arch="sm90") == (torch.float8_e4m3fn, torch.float8_e5m2)  # .e4m3.e5m2
    with pytest.raises(AttnumInputError, match="neither format"):
        operand_dtypes("bf16", "fp16", arch="sm100")
    assert operand_dtypes("e4m3fn", "fp16", arch="sm75") == (torch.float16, torch.float16)  # Turing: f16 only
    with pytest.raises(AttnumInputError, match="sm80"):
        operand_dtypes("e4m3fn", "e5m2", arch="sm80")  # Ampere has no FP8 instruction, and fp8 holds no fp8
