"""The serving probes: attnum's reference passes them, each planted bug fails exactly its probe, SDPA-only
targets get "unsupported", and the real-kernel adapters report "unavailable" without their package."""

from __future__ import annotations

import _paths
import pytest
import torch.nn.functional as F

from attnum.audit.config import AuditConfig
from attnum.audit.probes import PROBES
from attnum.audit.runner import run_audit
from attnum.kernels.registry import KERNELS, kernel_status, resolve
from attnum.kernels.serving import ServingTarget

EXAMPLES = _paths.EXAMPLES
SERVING = ("merge-empty-split", "merge-two-empty", "lse-base", "inf-lse-empty-rows", "split-invariance",
           "page-padding-leak", "block-table-past-end", "empty-sequence", "decode-causal-alignment",
           "kv-scale-overflow")
ADAPTERS = ("flashinfer-merge", "flashinfer-decode", "flash-attn-kvcache", "vllm-merge")

pytestmark = pytest.mark.usefixtures("one_thread")


def audit(target, probes=None, dtypes="bf16,fp32", fn=None, **kw):
    report = run_audit(AuditConfig(target=target, dtypes=dtypes, probes=probes, **kw), target=fn)
    return {(r.name, r.dtype): r for r in report.results}, report


def test_every_serving_probe_is_in_the_catalogue():
    assert set(SERVING) <= set(PROBES)


@pytest.mark.parametrize("policy", ["fa2", "fp32"])
def test_the_reference_serving_target_passes_every_serving_probe(policy):
    rows, report = audit(f"decode:{policy}", ",".join(SERVING))
    assert report.available and report.passed
    for (name, dtype), row in rows.items():
        allowed = ("pass", "note") if name == "split-invariance" else ("pass",)
        if name == "kv-scale-overflow":  # attnum's reference declares no FP8 cache: nothing to overflow
            assert row.status == "unsupported" and "kv_cache_dtype" in row.note, row.note
            continue
        assert row.status in allowed, (name, dtype, row.note)


# padding_leak_decode reads every slot of a sequence's cache row: the padding past L (page-padding-leak) and,
# since empty-sequence poisons the slots of its length-0 sequence too, those (the same bug, a second probe)
@pytest.mark.parametrize("example,probes", [("sentinel_merge", {"merge-empty-split"}),
                                            ("nan_merge", {"merge-two-empty"}),
                                            ("padding_leak_decode", {"page-padding-leak", "empty-sequence"}),
                                            ("fp8_kv_fixed_scale", {"kv-scale-overflow"})],
                         ids=["sentinel_merge-merge-empty-split", "nan_merge-merge-two-empty",
                              "padding_leak_decode-page-padding-leak+empty-sequence",
                              "fp8_kv_fixed_scale-kv-scale-overflow"])
def test_each_planted_bug_fails_exactly_its_probe(example, probes):
    rows, report = audit(f"{EXAMPLES}/{example}.py:target", dtypes="bf16", strict=True)
    failed = {name for (name, _), r in rows.items() if not r.passed}
    assert failed == probes, {n: rows[(n, "bf16")].note for n in failed}
    assert not report.passed


def test_sdpa_targets_get_unsupported_not_passed_by_accident():
    rows, _ = audit("sdpa", ",".join(SERVING), dtypes="fp32", fn=F.scaled_dot_product_attention)
    assert len(rows) == len(SERVING)
    assert all(r.status == "unsupported" and "entry point" in r.note for r in rows.values())


def test_a_merge_only_target_is_unsupported_by_the_attention_probes():
    from attnum.attention.serving.merge import merge_state

    def merge(o_a, lse_a, o_b, lse_b):
        o, lse = merge_state((o_a, lse_a), (o_b, lse_b))
        return o.to(o_a.dtype), lse

    rows, _ = audit("m", "odd-lengths,merge-two-empty", dtypes="fp32", fn=ServingTarget("m", merge_state=merge))
    assert rows[("odd-lengths", "fp32")].status == "unsupported"
    assert rows[("merge-two-empty", "fp32")].status == "pass"


@pytest.mark.parametrize("name", ADAPTERS)
def test_real_kernel_adapters_are_unavailable_here_with_the_reason(name):
    assert name in KERNELS
    ok, why = kernel_status(name, "cuda")
    target = resolve(name, "cuda")
    if not ok:  # no package or no CUDA: never "passed"
        assert not target.available and target.fn is None and why
        rows, report = audit(name, "merge-two-empty", device="cuda")
        assert not report.available and not report.passed and rows == {}


def test_kv_scale_overflow_catches_nan_and_clamping_in_every_dtype():
    from attnum.kernels.serving import reference

    rows, _ = audit(f"{EXAMPLES}/fp8_kv_fixed_scale.py:target", "kv-scale-overflow", dtypes="bf16,fp16,fp32")
    assert all(r.status == "fail" and "NaN" in r.note for r in rows.values()), {k: r.note for k, r in rows.items()}
    attend = reference("fa2").decode

    def saturating(q, k, v, **kw):  # a saturating FP8 store at scale 1.0: clamps to 448 instead of NaN
        return attend(q, k.clamp(-448, 448), v.clamp(-448, 448), **kw)

    rows, _ = audit("sat", "kv-scale-overflow", dtypes="bf16", fn=ServingTarget("sat", decode=saturating,
                                                                                kv_cache_dtype="e4m3fn"))
    assert rows[("kv-scale-overflow", "bf16")].status == "fail"


def _lying(ref, *, decode=None, merge=None) -> ServingTarget:
    """attnum's reference serving target with one entry point's result changed (no SDPA entry)."""
    return ServingTarget("liar", merge_state=merge and (lambda *a: merge(ref.merge_state(*a))),
                         decode=decode and (lambda *a, **kw: decode(ref.decode(*a, **kw))))


DECODE_PROBES = ("page-padding-leak", "block-table-past-end", "decode-causal-alignment", "kv-scale-overflow",
                 "split-invariance", "lse-base", "inf-lse-empty-rows")


@pytest.mark.parametrize("change,words", [
    (lambda res: res.double() if not isinstance(res, tuple) else (res[0].double(), res[1]),
     "decode output dtype torch.float64 != expected torch.bfloat16"),
    (lambda res: res[..., :-1] if not isinstance(res, tuple) else (res[0], res[1]),
     "decode output shape"),
    (lambda res: (res[0], res[1].double()) if isinstance(res, tuple) else res,
     "decode lse dtype torch.float64 != expected torch.float32"),
])
def test_decode_outputs_of_the_wrong_dtype_or_shape_fail_and_say_so(change, words):
    """The dtype/shape check of the SDPA probes holds for the serving entry points too: a decode kernel
    returning float64 for bf16 inputs (closer to golden than any bf16 kernel) must not pass."""
    ref = resolve("decode:fa2").fn
    rows, report = audit("liar", ",".join(DECODE_PROBES), dtypes="bf16", fn=_lying(ref, decode=change))
    assert not report.passed
    hit = [r for r in rows.values() if words in r.note]
    assert hit and all(r.status == "fail" for r in hit), {k: (r.status, r.note) for k, r in rows.items()}


@pytest.mark.parametrize("change,words", [
    (lambda res: (res[0], res[1].double()), "merged lse dtype torch.float64 != expected torch.float32"),
    (lambda res: (res[0].float(), res[1]), "merged o dtype torch.float32 != expected torch.bfloat16"),
    (lambda res: res[0], "merge_state returned Tensor, expected a pair (o, lse)"),
])
def test_merge_outputs_of_the_wrong_dtype_or_kind_fail_and_say_so(change, words):
    ref = resolve("decode:fa2").fn
    rows, report = audit("liar", "merge-empty-split,merge-two-empty", dtypes="bf16", fn=_lying(ref, merge=change))
    assert not report.passed
    assert rows and all(r.status == "fail" and words in r.note for r in rows.values()), \
        {k: (r.status, r.note) for k, r in rows.items()}


HANGING_DECODE = '''
import time
import torch.nn.functional as F
from attnum.kernels.registry import resolve
from attnum.kernels.serving import ServingTarget

_ref = resolve("decode:fa2").fn

def _decode(*a, **kw):
    time.sleep(600)

target = ServingTarget("hangs", sdpa=F.scaled_dot_product_attention, merge_state=_ref.merge_state,
                       decode=_decode)
'''


def test_a_hanging_decode_kernel_times_out_naming_its_case(tmp_path, capsys):
    """The serving entry points run inside the heartbeat: the verdict names the case that hung."""
    import json

    from attnum.cli import main

    path = tmp_path / "hangs.py"
    path.write_text(HANGING_DECODE)
    rc = main(["audit", f"{path}:target", "--dtype", "bf16", "--probes", "page-padding-leak,odd-lengths",
               "--timeout", "20", "--json"])  # 20 s: the healthy calls before the hang, on a loaded machine
    rows = {p["name"]: p for p in json.loads(capsys.readouterr().out)["probes"]}
    assert rc == 1
    hung = rows["page-padding-leak"]
    assert hung["verdict"] == "timed out" and "in the target's call" in hung["note"], hung
    assert hung["note"].startswith("contiguous"), hung  # the first case's label, from the heartbeat
    assert rows["odd-lengths"]["verdict"] == "pass"  # a fresh child went on
