"""The shape-contract probe: a kernel that is right, or refuses loudly, passes; one that silently assumes
N == S, reads V with K's head dim, or loads a last tile past the end of its inputs fails, and the case says
which shape. Planted kernels around torch's SDPA (float64 inside, the audited dtype out)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnum.audit.config import AuditConfig
from attnum.audit.probes import shape_contract
from attnum.audit.runner import run_audit


def _sdpa(q, k, v, is_causal=False, scale=None):
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=is_causal,
                                          scale=scale).to(q.dtype)


def planted(bug: str | None):
    def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        N, S, d, dv = query.shape[-2], key.shape[-2], query.shape[-1], value.shape[-1]
        if bug == "refuse" and (N != S or dv != d):
            raise ValueError(f"this kernel needs N == S and dv == d; got N={N}, S={S}, d={d}, dv={dv}")
        if bug == "n-is-s" and N < S:  # the key loop bounded by N
            return _sdpa(query, key[..., :N, :], value[..., :N, :], is_causal, scale)
        if bug == "dv-tile" and dv > d:  # one tile of d columns for V: the columns past d stay 0
            out = _sdpa(query, key, value[..., :d], is_causal, scale)
            return torch.cat([out, out.new_zeros(*out.shape[:-1], dv - d)], dim=-1)
        if bug == "tail-load" and S % 16:  # V loaded in 16-row tiles with no bound; scores masked (p = 0)
            pad = -(-S // 16) * 16
            vv = value.as_strided((*value.shape[:-2], pad, dv), value.stride(), value.storage_offset())
            out = _sdpa(query, key, value, is_causal, scale)
            return out + (0.0 * vv[..., S:, :].double().sum(-2, keepdim=True)).to(out.dtype)
        return _sdpa(query, key, value, is_causal, scale)

    attention.__name__ = f"planted-{bug}"
    return attention


def _row(fn, dtype="bf16"):
    return run_audit(AuditConfig(dtypes=dtype, probes="shape-contract"), fn).results[0]


def _failed(r):
    return [c.label for c in r.cases if c.verdict.status == "fail"]


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
def test_a_right_kernel_passes_every_case(dtype):
    r = _row(planted(None), dtype)
    assert r.status == "pass" and len(r.cases) == 2 + 2 * (len(shape_contract.SHAPES) + len(shape_contract.TAILS))


def test_a_loud_refusal_is_unsupported_never_a_failure():
    r = _row(planted("refuse"))
    assert r.status == "pass", r.note
    refused = [c for c in r.cases if c.verdict.status == "unsupported"]
    n_refused = sum(2 for n, s, dv in shape_contract.SHAPES if n != s or dv != 64)
    n_refused += sum(2 for n, s in shape_contract.TAILS if n != s)
    assert len(refused) == n_refused and all("refused: ValueError" in c.verdict.note for c in refused)


def test_a_key_loop_bounded_by_n_fails_where_n_is_below_s_and_says_so():
    r = _row(planted("n-is-s"))
    bad = _failed(r)
    # not causal only: under SDPA's top-left causal, query i < N sees no key past N anyway
    want = [f"N={n} S={s}" + (f" dv={dv} != d=64" if dv != 64 else "") for n, s, dv in shape_contract.SHAPES if n < s]
    want += [f"N={n} S={s} NaN behind q, k, v" for n, s in shape_contract.TAILS if n < s]
    assert r.status == "fail" and bad == want, bad
    assert all("silently wrong for N=" in c.verdict.note for c in r.cases if c.verdict.status == "fail")


def tile_minimum_kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                        enable_gqa=False):
    """SageAttention 1.0.3's contract and bug: it refuses q_len < 128 and takes q's length for K too (keys past
    q_len never read; with a shorter K, the first q_len rows of its storage, zeros here past its end)."""
    N, S = query.shape[-2], key.shape[-2]
    if N < 128:
        raise AssertionError("seq_len should be not less than 128")
    if N <= S:
        return _sdpa(query, key[..., :N, :], value[..., :N, :], is_causal, scale)
    pad = key.new_zeros(*key.shape[:-2], N - S, key.shape[-1])
    return _sdpa(query, torch.cat([key, pad], -2), torch.cat([value, pad], -2), is_causal, scale)


def test_a_kernel_refusing_short_queries_is_still_asked_unequal_lengths_and_caught():
    r = _row(tile_minimum_kernel)
    bad = _failed(r)
    assert r.status == "fail" and {"N=128 S=256", "N=256 S=128"} <= set(bad), bad
    # every shape below its minimum is a refusal, never a failure
    assert all(c.verdict.status == "unsupported" for c in r.cases if c.label.startswith(("N=5 ", "N=70 ", "N=1 ")))


def test_v_read_in_tiles_of_the_key_head_dim_fails_only_for_a_wider_v():
    r = _row(planted("dv-tile"))
    assert r.status == "fail" and _failed(r) == ["N=33 S=65 dv=128 != d=64", "N=33 S=65 dv=128 != d=64 causal"]


def test_a_tile_loaded_past_the_end_of_v_fails_on_the_nan_behind_it():
    r = _row(planted("tail-load"))
    bad = [c for c in r.cases if c.verdict.status == "fail"]
    want = [f"N={n} S={s} NaN behind q, k, v" + c for n, s in shape_contract.TAILS if s % 16 for c in ("", " causal")]
    assert [c.label for c in bad] == want
    assert all(c.verdict.note.startswith("read past the end of its inputs") for c in bad)


def test_a_kernel_wrong_at_every_shape_is_not_blamed_on_the_shape():
    """An fp32 kernel that computes in bf16 fails the square control too: its failures say so."""
    def low(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        return _sdpa(query.bfloat16(), key.bfloat16(), value.bfloat16(), is_causal, scale).to(query.dtype)

    r = _row(low, "fp32")
    bad = [c for c in r.cases if c.verdict.status == "fail"]
    assert [c.label for c in bad[:2]] == ["N=S=64 control", "N=S=64 control causal"] and len(bad) == len(r.cases)
    assert all(c.verdict.note.startswith("fails as the square control does") for c in bad[2:])


def test_an_access_outside_its_tensors_is_out_of_bounds_never_a_refusal():
    """What attnum's Triton model raises for a kernel that reads past an input (OutOfBounds) is that
    kernel's verdict, not a loud refusal of the shape."""
    from attnum.kernels.triton.addresses import OutOfBounds

    def reads_past_k(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if key.shape[-2] % 16:
            raise OutOfBounds("kernel _fwd read past the end of K by 3 elements (6 bytes): 3 of 64 lanes, "
                              "program (0, 0, 0); K is (1, 2, 5, 64) bfloat16")
        return _sdpa(query, key, value, is_causal, scale)

    r = _row(reads_past_k)
    oob = [c.label for c in r.cases if c.verdict.status == "out of bounds"]
    assert r.status == "out of bounds" and "read past the end of K by 3 elements" in r.note
    assert oob == [c.label for c in r.cases if c.verdict.status != "pass"] and len(oob) >= 2
