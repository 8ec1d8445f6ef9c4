"""FlashAttention-4's software exp2 and conditional rescaling (attnum.attention.lowbit.exp2, fa4_steps)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnum.attention import flash_attention, golden_attention
from attnum.attention.lowbit.exp2 import POLY_EX2, binade, exp2_poly, exp2_poly_reference, fma32, ulp_error
from attnum.attention.lowbit.fa4_steps import lazy_max
from attnum.errors import AttnumInputError
from attnum.numerics.policy import parse_policy


def _f32(values) -> torch.Tensor:
    return torch.tensor(np.asarray(values, dtype=np.float32))


def test_coefficients_are_fp32_values():
    for coeffs in POLY_EX2.values():
        assert all(float(np.float32(c)) == c for c in coeffs)


def test_fma32_is_one_rounding():
    g = torch.Generator().manual_seed(1)
    a = _f32(torch.rand(4000, generator=g).numpy() * 2)
    b = _f32(torch.rand(4000, generator=g).numpy())
    c = _f32(torch.rand(4000, generator=g).numpy() * 0.3)
    a[:3], b[:3], c[:3] = _f32([1 + 2**-23] * 3), _f32([1 - 2**-24] * 3), _f32([-1.0, 2**-30, -2**-20])
    ours = fma32(a.double(), b.double(), c.double())
    from fractions import Fraction

    from attnum.attention.lowbit.exp2 import _f32 as frac_to_f32

    want = [frac_to_f32(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))) for x, y, z in zip(a, b, c)]
    assert ours.tolist() == want


def test_vectorized_equals_the_exact_scalar_reference():
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(600, generator=g, dtype=torch.float64) * 257 - 130).float()
    edge = _f32([0.0, -0.0, -1e-30, 1e-30, -2**-25 * (1 + 2**-23), -0.3, -127, -127.5, -200, 126.9, -2**-126,
                 1 - 2**-24, -1 + 2**-24, 0.5, -8.0, -7.999999])
    x = torch.cat([x, edge])
    got = exp2_poly(x).tolist()
    for degree in (1, 3, 5):
        got = exp2_poly(x, degree).tolist()
        assert got == [exp2_poly_reference(float(v), degree) for v in x]


def test_degree3_error_within_the_polynomial_bound():
    """Max ulp error on a strided sweep of two binades stays within the polynomial's own relative
    error (computed here in float64 on a dense grid of [0, 1]) plus 4 fp32 roundings."""
    f = torch.linspace(0, 1, 50001, dtype=torch.float64)
    c = POLY_EX2[3]
    p = ((c[3] * f + c[2]) * f + c[1]) * f + c[0]
    rel = float((p / torch.exp2(f) - 1).abs().max())
    bound = rel * 2**24 + 4  # y in [2**e, 2**(e+1)) has an fp32 ulp of 2**(e-23) >= y * 2**-24
    for e, neg in ((0, False), (-1, True)):
        x = binade(e, neg)[::64]
        u = ulp_error(exp2_poly(x), x)
        assert float(u.max()) <= bound
        assert float(u.max()) > 0.25 * rel * 2**23  # the polynomial error is really there (not a no-op)


def test_lazy_max_rule():
    m_old = torch.tensor([[-math.inf], [0.0], [0.0], [0.0]])
    m_new = torch.tensor([[1.0], [5.0], [8.0 / math.log2(math.e)], [6.0]])
    out = lazy_max(m_old, m_new, 8.0)
    # first tile takes the new max; 5 * log2 e = 7.2 <= 8 keeps 0; exactly 8 keeps; 6 * log2 e = 8.66 rescales
    assert out.squeeze(-1).tolist() == [1.0, 0.0, 0.0, 6.0]


def test_lazy_rescale_is_exact_in_fp64_and_kicks_in_late():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 64, 32, generator=g, dtype=torch.float64)
    k = torch.randn(1, 2, 512, 32, generator=g, dtype=torch.float64)
    v = torch.randn(1, 2, 512, 32, generator=g, dtype=torch.float64)
    k[:, :, 450] = q[:, :, :1].mean(dim=2) * 4  # a late key with a large score jump for some rows
    gold = golden_attention(q, k, v)
    o = flash_attention(q, k, v, policy="uniform:fp64,rescale_threshold=8", block_k=64)
    assert float((o - gold).abs().max()) <= 64 * 512 * 2**-52 * float(v.abs().max())
    lazy = flash_attention(q, k, v, policy="fa2:bf16,rescale_threshold=8", block_k=64)
    eager = flash_attention(q, k, v, policy="fa2:bf16", block_k=64)
    assert not torch.equal(lazy, eager)  # P lies on another grid offset: the bits move
    for o in (lazy, eager):  # both within bf16's output rounding plus P's rounding of the reference
        assert float((o.double() - gold).abs().max()) <= 4 * 2**-8 * float(gold.abs().max())


def test_fa4_policy_and_bad_thresholds():
    p = parse_policy("fa4:bf16")
    assert (p.exp2, p.rescale_threshold, p.describe()["exp2"]) == ("poly3", 8.0, "poly3")
    assert parse_policy("fa2:bf16,exp2=poly5,rescale_threshold=4").rescale_threshold == 4.0
    for bad in ("0", "-1", "inf"):
        with pytest.raises(AttnumInputError, match=r"^rescale_threshold=.* is not allowed; expected a positive"):
            parse_policy(f"fa2:bf16,rescale_threshold={bad}")
    with pytest.raises(AttnumInputError, match=r"^exp2='poly9' is not allowed"):
        parse_policy("fa2:bf16,exp2=poly9")
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 128, 16, generator=g, dtype=torch.float64) for _ in range(3))
    gold = golden_attention(q, k, v)
    o = flash_attention(q, k, v, policy="fa4:bf16")
    assert float((o.double() - gold).abs().max()) <= 8 * 2**-8 * float(gold.abs().max())
