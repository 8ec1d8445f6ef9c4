"""The mla-latent-decode probe (MLA: one latent KV head, keys = latent + rope, values = the latent's first dv
dims): a correct decode passes, one that drops the rope part of the score fails for that reason, and a
target that does not declare attnum_mla is not asked. Planted kernels on attnum's own decode; the real one
(vLLM's Triton MLA decode) in tests/kernels/adapters/test_real_kernels.py's style, slow."""

from __future__ import annotations

import pytest
import torch
from _wheel_helpers import fetched_or_skip

from attnum.audit.config import AuditConfig
from attnum.audit.runner import run_audit
from attnum.kernels import serving


def _target(name: str, drop_rope: bool = False, declare: bool = True):
    ref = serving.reference("fa2")

    def decode(q, k_cache, v_cache, **kw):
        if drop_rope:  # the bug: only the latent dims enter the score
            dv = v_cache.shape[-1]
            q = torch.cat([q[..., :dv], torch.zeros_like(q[..., dv:])], dim=-1)
        return ref.decode(q, k_cache, v_cache, **kw)

    return serving.ServingTarget(name, decode=decode, single_query_only=True, features=("mla",) if declare else ())


def _row(fn, dtype="bf16"):
    report = run_audit(AuditConfig(dtypes=dtype, probes="mla-latent-decode"), fn)
    return report.results[0]


def test_a_correct_latent_decode_passes_every_case():
    r = _row(_target("ok"))
    assert r.status == "pass", r.note
    assert len(r.cases) == 16 and all(c.verdict.status == "pass" for c in r.cases)


def test_dropping_the_rope_part_of_the_score_fails():
    r = _row(_target("no-rope", drop_rope=True))
    assert r.status == "fail" and r.target_error > 10 * r.bound, r.note


def test_a_target_that_does_not_declare_mla_is_not_asked():
    r = _row(_target("mha", declare=False))
    assert r.status == "unsupported" and "attnum_mla" in r.note


@pytest.mark.slow  # about a minute of interpreted Triton: left out of pytest -m "not slow" (README)
def test_vllm_mla_decode_reads_latent_and_rope_and_gives_nan_for_an_empty_sequence():
    fetched_or_skip("vllm")
    report = run_audit(AuditConfig(target="vllm-mla-decode", dtypes="bf16",
                                   probes="mla-latent-decode,lse-base,empty-sequence"))
    assert report.available, report.reason
    mla, lse, empty_seq = report.results
    live = [c for c in mla.cases if "L=(1, 37, 200)" in c.label]
    empty = [c for c in mla.cases if "L=(0, 16)" in c.label]
    assert len(live) == len(empty) == 8
    assert all(c.verdict.status == "pass" for c in live), [c.verdict.note for c in live]
    assert all(c.verdict.status == "fail" and "NaN" in c.verdict.note for c in empty)  # stage 2: 0 / 0
    # the generic decode probes hand an attnum_mla target its latent (v = k): they reach it (before issue 40's change
    # every one was unsupported, "v = k[..., :dv]"), and empty-sequence fails the length-0 rows (vllm#57017)
    assert lse.status == "pass", lse.note
    assert empty_seq.status == "fail" and all("NaN" in c.verdict.note for c in empty_seq.cases
                                              if c.verdict.status == "fail"), empty_seq.note
