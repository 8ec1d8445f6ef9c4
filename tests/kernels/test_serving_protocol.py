"""The serving protocol's declared attributes: a plain class is a target; poisoned buffers catch rows
left unwritten; declared empty rows, single-query decode and FP8 caches are honoured."""

from __future__ import annotations

import pytest

from attnum.audit.config import AuditConfig
from attnum.audit.runner import run_audit
from attnum.kernels.serving import ServingTarget, declared_target, reference

pytestmark = pytest.mark.usefixtures("one_thread")
REF = reference("fa2")


def audit(fn, probes, dtypes="fp32"):
    report = run_audit(AuditConfig(dtypes=dtypes, probes=probes), target=fn)
    return {(r.name, r.dtype): r for r in report.results}


def _writer(skip_empty: bool):
    """A decode that writes into the given buffers (accepts_out); ``skip_empty`` leaves L = 0 rows alone."""
    def decode(q, k, v, *, cache_seqlens, out=None, lse_out=None, return_lse=False, **kw):
        o, lse = REF.decode(q, k, v, cache_seqlens=cache_seqlens, return_lse=True, **kw)
        for b, L in enumerate(cache_seqlens.tolist()):
            if L or not skip_empty:
                out[b] = o[b]
                if lse_out is not None:
                    lse_out[b] = lse[b]
        return (out, lse_out) if return_lse else out
    return decode


def test_rows_left_unwritten_fail_as_unwritten_and_written_ones_pass():
    bad = ServingTarget("skip", decode=_writer(True), accepts_out=True)
    row = audit(bad, "empty-sequence")[("empty-sequence", "fp32")]
    assert row.status == "unwritten" and "never written" in row.note, row.note
    good = ServingTarget("all", decode=_writer(False), accepts_out=True)
    assert audit(good, "empty-sequence")[("empty-sequence", "fp32")].status == "pass"


def test_declared_nan_empty_rows_are_the_expected_output():
    def nan_rows(q, k, v, *, cache_seqlens, return_lse=False, **kw):
        o, lse = REF.decode(q, k, v, cache_seqlens=cache_seqlens, return_lse=True, **kw)
        for b, L in enumerate(cache_seqlens.tolist()):
            if L == 0:
                o[b] = float("nan")
        return (o, lse) if return_lse else o

    undeclared = audit(ServingTarget("n", decode=nan_rows), "empty-sequence")[("empty-sequence", "fp32")]
    assert undeclared.status == "fail" and "NaN" in undeclared.note
    declared = ServingTarget("n", decode=nan_rows, empty_rows={"decode": "nan"})
    assert audit(declared, "empty-sequence")[("empty-sequence", "fp32")].status == "pass"


def test_single_query_only_refuses_multi_query_cases_without_calling():
    calls = []

    def decode(q, *a, **kw):
        calls.append(q.shape[2])
        return REF.decode(q, *a, **kw)

    row = audit(ServingTarget("one", decode=decode, single_query_only=True), "lse-base")[("lse-base", "fp32")]
    assert row.status == "pass" and set(calls) == {1} and "unsupported" in row.note


def test_a_plain_class_is_a_target_and_bad_declarations_are_one_line():
    class Adapter:  # what a user's file holds: no attnum import
        lse_base = "e"
        empty_rows = {"decode": "zeros"}
        split_rule = "power-of-two"
        decode = staticmethod(REF.decode)

    t = declared_target(Adapter, "adapter")
    assert t.split_rule == "power-of-two" and t.empty_rows == {"decode": "zeros"}
    assert audit(t, "split-invariance")[("split-invariance", "fp32")].status in ("pass", "note")
    Adapter.split_rule = "sometimes"
    with pytest.raises(Exception, match="split_rule"):
        declared_target(Adapter, "adapter")
