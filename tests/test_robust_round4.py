"""Nothing forged, round 4 (issue 32): lies a target can tell, caches it can poison, runs that ask for the
whole machine, and the API's edge inputs. Each test is one numbered case of the issue (the replay script,
scripts/replay_attacks.py, runs the same ones end to end from the CLI)."""

from __future__ import annotations

import textwrap

import pytest
import torch

from attnum.audit.config import AuditConfig
from attnum.audit.runner import run_audit
from attnum.kernels.serving import ServingTarget, reference

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.timeout(300)]
REF = reference("fa2")


def _rows(report) -> dict:
    return {(r.name, r.dtype): r for r in report.results}


# ---- 1. accepts_out: the poison check reads the buffer ------------------------------------------------

def _fresh_decode(q, k, v, *, cache_seqlens, out=None, lse_out=None, return_lse=False, **kw):
    """Declares accepts_out, never touches ``out`` and returns a fresh (correct) tensor."""
    return REF.decode(q, k, v, cache_seqlens=cache_seqlens, return_lse=return_lse, **kw)


def test_1_a_target_that_leaves_the_out_buffer_poisoned_is_unwritten_though_it_returns_a_fresh_tensor():
    row = _rows(run_audit(AuditConfig(dtypes="fp32", probes="empty-sequence", isolate=False),
                          target=ServingTarget("fresh", decode=_fresh_decode, accepts_out=True)))
    row = row[("empty-sequence", "fp32")]
    assert row.status == "unwritten" and "never written" in row.note, (row.status, row.note)


def test_1_through_the_kernel_server_a_class_adapter_that_ignores_out_is_unwritten(tmp_path):
    (tmp_path / "fresh.py").write_text(textwrap.dedent('''
        from attnum.kernels.serving import reference
        REF = reference("fa2")
        class Fresh:
            accepts_out = True
            @staticmethod
            def decode(q, k, v, *, cache_seqlens, out=None, lse_out=None, return_lse=False, **kw):
                return REF.decode(q, k, v, cache_seqlens=cache_seqlens, return_lse=return_lse, **kw)
        '''))
    report = run_audit(AuditConfig(target=f"{tmp_path / 'fresh.py'}:Fresh", dtypes="fp32", probes="empty-sequence"))
    row = _rows(report)[("empty-sequence", "fp32")]
    assert report.isolated and row.status == "unwritten", (row.status, row.note)


def test_1_a_target_that_writes_the_buffer_but_returns_something_else_fails():
    def liar(q, k, v, *, cache_seqlens, out=None, lse_out=None, return_lse=False, **kw):
        o = REF.decode(q, k, v, cache_seqlens=cache_seqlens, **kw)
        out.copy_(o)
        return o + 1.0  # what the caller reads from the buffer is not what is returned

    row = _rows(run_audit(AuditConfig(dtypes="fp32", probes="empty-sequence", isolate=False),
                          target=ServingTarget("liar", decode=liar, accepts_out=True)))[("empty-sequence", "fp32")]
    assert row.status == "fail" and "differs from the out= buffer" in row.note, (row.status, row.note)


# ---- 2. attnum_batch_invariant on a class adapter ------------------------------------------------------

BATCH_VARIANT = '''
import torch
from attnum.kernels.serving import reference
REF = reference("fa2")

class Moves:
    attnum_batch_invariant = True

    @staticmethod
    def decode(q, k, v, *, cache_seqlens, **kw):
        o = REF.decode(q, k, v, cache_seqlens=cache_seqlens, **kw)
        if q.shape[0] > 1:  # one ulp up whenever request 0 has neighbours
            o = torch.nextafter(o, torch.full_like(o, float("inf")))
        return o
'''


def test_2_a_class_adapters_batch_invariance_claim_is_read_and_a_one_ulp_move_fails(tmp_path):
    from attnum.kernels.user import load_user_target

    (tmp_path / "moves.py").write_text(BATCH_VARIANT)
    target = load_user_target(f"{tmp_path / 'moves.py'}:Moves")
    assert target.attnum_batch_invariant is True
    row = _rows(run_audit(AuditConfig(dtypes="fp32", probes="decode-batch-invariance", isolate=False),
                          target=target))[("decode-batch-invariance", "fp32")]
    assert row.status == "fail" and "claims attnum_batch_invariant" in row.note, (row.status, row.note)


def test_2_a_decode_functions_claim_still_counts_under_a_target_without_one():
    from attnum.audit.probes.decode_batch_invariance import claims_invariance

    def decode(*a, **kw):
        return None

    decode.attnum_batch_invariant = True
    assert claims_invariance(ServingTarget("f", decode=decode))
    assert not claims_invariance(ServingTarget("g", decode=lambda *a, **kw: None))


def test_2_a_non_boolean_claim_is_one_line():
    from attnum.errors import AttnumInputError

    with pytest.raises(AttnumInputError, match="attnum_batch_invariant"):
        ServingTarget("x", decode=lambda *a, **kw: None, attnum_batch_invariant="yes")


# ---- 3. a declared arithmetic far from float64 never passes silently ------------------------------------

def _e4m3(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    from attnum.attention.flash import flash_attention

    return flash_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale,
                           policy="uniform:e4m3fn").to(q.dtype)


@pytest.mark.parametrize("strict", [False, True])
def test_3_a_kernel_equal_to_a_declared_e4m3_arithmetic_is_not_a_bf16_pass(strict):
    _e4m3.attnum_emulation = "uniform:e4m3fn"
    report = run_audit(AuditConfig(dtypes="bf16", probes="odd-lengths", isolate=False, strict=strict), target=_e4m3)
    row = _rows(report)[("odd-lengths", "bf16")]
    assert row.status == ("fail" if strict else "note"), (row.status, row.note)
    assert "judged against the declared arithmetic uniform:e4m3fn" in row.note
    assert "only against the declared arithmetic" in row.note and "misses the bf16 bound" in row.note
    assert all(c.verdict.status != "pass" for c in row.cases)  # no case of it passes either
    from attnum.audit.report import to_json

    probe = to_json(report)["probes"][0]
    assert probe["verdict"] == row.status and "declared arithmetic" in probe["note"]


def test_3_a_declared_arithmetic_within_the_dtypes_rule_still_passes():
    from attnum.kernels.reference import family

    fa2 = family("flash", "fa2:bf16")
    fa2.attnum_emulation = "fa2:bf16"
    row = _rows(run_audit(AuditConfig(dtypes="bf16", probes="odd-lengths", isolate=False), target=fa2))
    row = row[("odd-lengths", "bf16")]
    assert row.status == "pass" and "judged against the declared arithmetic fa2:bf16" in row.note, row.note


# ---- 4. a policy a path cannot run is an error, never a substitution -----------------------------------

@pytest.mark.parametrize("policy", ["sage1:fp16", "sage3:bf16"])
def test_4_decode_paths_refuse_a_low_bit_policy_instead_of_running_fa2(policy):
    from attnum.attention.decode import decode_attention
    from attnum.attention.paged import paged_decode_attention, to_pages
    from attnum.errors import AttnumInputError

    q, k = torch.randn(1, 2, 1, 64), torch.randn(1, 2, 16, 64)
    with pytest.raises(AttnumInputError, match="policy=.*one-pass prefill"):
        decode_attention(q, k, k, policy=policy)
    kp, table = to_pages(k, 8, cache_seqlens=torch.tensor([16]))
    with pytest.raises(AttnumInputError, match="policy=.*one-pass prefill"):
        paged_decode_attention(q, kp, kp, block_table=table, cache_seqlens=torch.tensor([16]), policy=policy)


def test_4_the_consistency_studies_refuse_a_low_bit_policy_before_they_start():
    from attnum.errors import AttnumInputError
    from attnum.studies.consistency.config import ConsistencyConfig
    from attnum.studies.consistency.tokens import TokensConfig

    with pytest.raises(AttnumInputError, match="sage1:fp16"):
        ConsistencyConfig(policy="sage1:fp16")
    with pytest.raises(AttnumInputError, match="sage1"):
        TokensConfig(policy="sage1")
    ConsistencyConfig(policy="fa4:fp16")  # a policy every path runs stays allowed


def test_4_cli_consistency_policy_sage1_is_one_line(capsys):
    from _sweep_helpers import cli

    assert cli("consistency", "--policy", "sage1:fp16") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "one-pass prefill" in err[0], err
