"""`attnum bugs` (issue 40): the corpus as data, the verdict of one version, the recall table, bad input refused
before anything is written, and a lean slice of the corpus run end to end (small pure-Python wheels)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from attnum.audit.bugs import corpus as corpus_mod
from attnum.audit.bugs.corpus import corpus, parse, select
from attnum.audit.bugs.point import judge
from attnum.audit.bugs.table import failed, summarize, table_rows, totals
from attnum.cli import main

# Small wheels (20 kB, 25 kB, 1 MB): the CI slice, fetched when missing.
LEAN = ("ring-flash-attn-update-out-and-lse-nan", "sageattention-noncausal-ragged-kv-phantom-keys",
        "fla-nsa-empty-selection-nan")


def _one_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("attnum bugs:")]
    assert len(err) == 1 and "Traceback" not in err[0] and "internal error" not in err[0], err
    return err[0]


@pytest.fixture
def bugs_family(monkeypatch):
    """The installed attnum's entry points may predate the bugs family (pip install -e . registers it): add it
    for `attnum report`."""
    from attnum.studies.bugs.family import FAMILY
    from attnum.sweep import registry

    have = registry.families()
    if all(f.name != "bugs" for f in have):
        monkeypatch.setattr(registry, "families", lambda: (*have, FAMILY))
        registry.kinds.cache_clear()
        yield
        registry.kinds.cache_clear()
    else:
        yield


# ---- the corpus -------------------------------------------------------------------------------------------

def test_the_corpus_holds_at_least_15_cases_from_5_packages_each_checked_against_the_pin_table():
    cases = corpus()
    assert len(cases) >= 15 and len({c.package for c in cases}) >= 5
    for c in cases:
        assert c.links or c.id.startswith("sageattention-noncausal"), c.id  # attnum's own finding has no issue yet
        assert c.spec("broken").startswith(c.target)
    fixed = [c for c in cases if not c.open]
    assert len(fixed) >= 5 and all(c.spec("fixed").endswith("@" + c.fixed) for c in fixed)


def _entry(**over) -> str:
    from attnum.kernels.wheels.pins import table

    w = table()["ring-flash-attn"].versions["0.1.8"]
    e = {"id": "x", "package": "ring-flash-attn", "links": [], "kernel": "ring_flash_attn/utils.py",
         "target": "ring-flash-attn-merge", "broken": "0.1.8", "fixed": "open", "dtype": "fp16",
         "probes": ["merge-empty-chain"], "broken_wheel": w.name, "broken_sha256": w.sha256, "symptom": "s", **over}
    return "[[case]]\n" + "\n".join(f"{k} = {json.dumps(v)}" for k, v in e.items()) + "\n"


@pytest.mark.parametrize("over, what", [
    ({}, ""),
    ({"broken_sha256": "0" * 64}, "not the pinned"),
    ({"broken_wheel": "ring_flash_attn-0.1.8-zzz.whl"}, "not the pinned"),
    ({"target": "vllm-unified"}, "does not run ring-flash-attn"),
    ({"probes": ["no-such-probe"]}, "not in the catalogue"),
    ({"broken": "9.9"}, "not in the pin table"),
    ({"kernel": "ring_flash_attn/other.py"}, "not a pinned file"),
    ({"dtype": "fp64"}, "dtype"),
    ({"fixed": "0.1.9"}, "not in the pin table"),
])
def test_a_doctored_case_is_refused_as_the_table_loads(over, what):
    if not what:
        assert parse(_entry())[0].versions() == (("broken", "0.1.8"),)
        return
    with pytest.raises(ValueError, match=what):
        parse(_entry(**over))


def test_bugs_list_names_every_case(capsys):
    assert main(["bugs", "list", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [d["id"] for d in doc] == [c.id for c in corpus()]
    assert all(d["wheels"] or d["source"] == "installed" for d in doc)


# ---- the verdict of one version ---------------------------------------------------------------------------

def _r(probe, status, note="n", ratio=None):
    return {"probe": probe, "dtype": "fp16", "status": status, "note": note, "ratio": ratio}


def test_the_broken_version_is_caught_only_by_a_verdict_on_the_output_of_the_cases_probes():
    got = judge("broken", ("p",), [_r("p", "pass", ratio=0.1), _r("p", "fail", "NaN")], True, "")
    assert got["verdict"] == "caught" and got["probe"] == "p" and got["line"] == "p fp16: fail: NaN"
    assert judge("broken", ("p",), [_r("p", "unwritten")], True, "")["verdict"] == "caught"
    for status in ("crashed", "timed out", "error", "pass", "unsupported", "note"):
        got = judge("broken", ("p",), [_r("p", status, "why")], True, "")
        assert got["verdict"] == "missed" and status in got["line"], got
    assert judge("broken", ("p",), [_r("q", "fail")], True, "")["verdict"] == "missed"  # another probe's failure
    got = judge("broken", ("p",), [_r("p", "unsupported")], False, "nothing was tested: declares no softcap")
    assert got["verdict"] == "missed" and got["line"] == "nothing was tested: declares no softcap"


def test_the_fixed_version_is_silent_only_when_no_case_probe_counts_against_it():
    assert judge("fixed", ("p",), [_r("p", "pass", ratio=0.2), _r("q", "fail")], True, "") == {
        "verdict": "silent", "probe": "p", "line": "p fp16: pass (20%): n", "other_failing": ["q"]}
    for status in ("fail", "unwritten", "crashed", "error"):
        assert judge("fixed", ("p",), [_r("p", status)], True, "")["verdict"] == "fails"
    assert judge("fixed", ("p",), [_r("p", "unsupported")], False, "refused")["verdict"] == "untested"


def _stored(case, role, verdict, line="l", status="done"):
    return {"kind": "bug-case", "key": f"{case}-{role}", "status": status, "wall_s": 2.0, "error": None,
            "config": {"case": case, "role": role, "target": "t"},
            "metrics": {"verdict": verdict, "line": line, "numerics": "triton-interp:nvidia-sm90,fp-fusion"}}


def test_the_recall_table_and_its_totals_come_from_the_stored_rows():
    rows = [_stored("vllm-merge-attn-states-two-empty-nan", "broken", "caught", "merge-two-empty fp16: fail: NaN"),
            _stored("vllm-merge-attn-states-two-empty-nan", "fixed", "silent"),
            _stored("vllm-softcap-tanh-nan", "broken", "missed", "nothing was tested"),
            _stored("vllm-softcap-tanh-nan", "fixed", "fails", "softcap-overflow fp16: fail")]
    s = summarize(rows)
    assert [x["case"] for x in s] == ["vllm-softcap-tanh-nan", "vllm-merge-attn-states-two-empty-nan"]  # corpus order
    t = totals(s)
    assert (t["caught"], t["broken_run"], t["silent"], t["fixed_run"], t["false_alarms"]) == (1, 2, 1, 2, 1)
    assert t["seconds"] == 8.0 and t["numerics"] == ["triton-interp:nvidia-sm90,fp-fusion"]
    cells = {r[0]: r for r in table_rows(s)}
    assert cells["vllm-merge-attn-states-two-empty-nan"][3] == "yes: merge-two-empty fp16: fail: NaN"
    assert cells["vllm-softcap-tanh-nan"][3].startswith("MISSED") and cells["vllm-softcap-tanh-nan"][4].startswith("NO")
    assert failed(s) and not failed(s[1:])
    open_case = summarize([_stored("fla-nsa-empty-selection-nan", "broken", "caught")])
    assert table_rows(open_case)[0][4] == "open (no fixed release)" and not failed(open_case)


# ---- bad input: one line, nothing written -----------------------------------------------------------------

def test_an_unknown_case_id_is_one_line_exit_2_and_nothing_is_written(tmp_path, capsys):
    assert main(["bugs", "run", "vllm-softcap-tanh", "--out", str(tmp_path / "o")]) == 2
    line = _one_line(capsys)
    assert "vllm-softcap-tanh" in line and "did you mean 'vllm-softcap-tanh-nan'" in line, line
    assert not (tmp_path / "o").exists()
    with pytest.raises(Exception, match="case="):
        select(["nope"])


def test_a_wheel_whose_hash_does_not_match_is_one_line_exit_3_and_nothing_is_written(tmp_path, monkeypatch, capsys):
    """A doctored pin table: ring-flash-attn 0.1.8's sha256 is not the registry's (the download is refused)."""
    from attnum.kernels.wheels import cache as wheel_cache
    from attnum.kernels.wheels import source as wheels
    from attnum.kernels.wheels.pins import table

    monkeypatch.setenv("ATTNUM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(wheel_cache, "_VERIFIED", {})
    monkeypatch.setattr(wheels, "installed", lambda pkg: False)
    pkg = table()["ring-flash-attn"]
    bad = dataclasses.replace(pkg.versions["0.1.8"], sha256="0" * 64)
    doctored = {**table(), "ring-flash-attn": dataclasses.replace(pkg, versions={"0.1.8": bad})}
    monkeypatch.setattr(wheels, "table", lambda: doctored)
    code = main(["bugs", "run", "ring-flash-attn-update-out-and-lse-nan", "--out", str(tmp_path / "o")])
    line = _one_line(capsys)
    assert code == 3 and "ring-flash-attn-update-out-and-lse-nan" in line, line
    assert ("not the pinned" in line or "pip download" in line), line  # offline: the download itself fails
    assert not (tmp_path / "o").exists() and not wheels.source_dir("ring-flash-attn").exists()


def test_a_changed_signature_is_one_line_exit_3_and_nothing_is_written(tmp_path, monkeypatch, capsys):
    """The adapter's call no longer fits the version's entry point (as if 1.0.6 had moved ``v``)."""
    pytest.importorskip("triton")
    from _wheel_helpers import fetched_or_skip

    from attnum.kernels.adapters import sageattention as sage
    from attnum.kernels.wheels import signature as sig

    fetched_or_skip("sageattention")
    monkeypatch.setattr(sage, "CORE_CALL", sig.Call(leaf="core", function="sageattn", positional=("q", "v", "k")))
    code = main(["bugs", "run", "sageattention-noncausal-ragged-kv-phantom-keys", "--out", str(tmp_path / "o")])
    line = _one_line(capsys)
    assert code == 3 and "signature changed" in line and "sage1-triton@1.0.6" in line, line
    assert not (tmp_path / "o").exists()


def test_an_installed_package_of_another_version_is_one_line_exit_3(tmp_path, monkeypatch, capsys):
    from importlib import metadata

    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "0.0.1" if name == "jax" else real(name))
    code = main(["bugs", "run", "jax-pallas-mha-causal-q-longer-than-kv", "--out", str(tmp_path / "o")])
    line = _one_line(capsys)
    assert code == 3 and ("jax 0.0.1 is installed" in line or "not installed" in line), line
    assert not (tmp_path / "o").exists()


# ---- the lean slice: real kernels, end to end -------------------------------------------------------------

@pytest.mark.slow  # about a minute of interpreted Triton here: out of pytest -m "not slow", in CI
def test_the_lean_slice_is_caught_stored_and_reported(tmp_path, capsys, bugs_family):
    """Three open upstream bugs in small pure-Python wheels (ring-flash-attn 0.1.8, SageAttention 1.0.6, fla-core
    0.6.0), each caught at its release by the probe that names its symptom; the store feeds `attnum report`."""
    pytest.importorskip("triton")
    from _wheel_helpers import fetched_or_skip

    fetched_or_skip("ring-flash-attn", "sageattention", "fla")
    out = tmp_path / "run"
    code = main(["bugs", "run", *LEAN, "--out", str(out), "--json"])
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert code == 0, (doc, captured.err[-2000:])
    assert [c["case"] for c in doc["cases"]] == list(LEAN)  # in the order asked
    by = {c["case"]: c for c in doc["cases"]}
    want = {LEAN[0]: "merge-empty-chain", LEAN[1]: "odd-lengths", LEAN[2]: "block-select"}
    for cid, probe in want.items():
        assert by[cid]["broken"]["verdict"] == "caught" and by[cid]["broken"]["probe"] == probe, by[cid]["broken"]
    assert "NaN" in by[LEAN[0]]["broken"]["line"] and "NaN" in by[LEAN[2]]["broken"]["line"]
    assert doc["totals"]["caught"] == 3 and doc["totals"]["fixed_run"] == 0
    assert "triton-interp:nvidia-sm90,fp-fusion" in doc["totals"]["numerics"]
    assert "[1 of 3]" in captured.err and "[3 of 3]" in captured.err  # progress, k of n
    # a re-run into the same store does nothing again and prints the same table
    assert main(["bugs", "run", *LEAN, "--out", str(out), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert [c["broken"]["line"] for c in again["cases"]] == [c["broken"]["line"] for c in doc["cases"]]
    from attnum.report.html import write_report

    page = write_report(out).read_text()
    assert "Upstream bugs: recall of the auditor" in page and all(cid in page for cid in LEAN)
    assert "caught 3 of 3 cases" in page


def test_the_corpus_module_reads_the_shipped_table_once():
    assert corpus_mod.corpus() is corpus_mod.corpus()


# ---- the recall belongs to the probes: a kernel attnum never saw, through the plain protocol ---------------

@pytest.mark.parametrize("case_id, broken, fixed", [
    ("vllm-merge-attn-states-two-empty-nan", "BuggyMerge", "GuardedMerge"),
    ("sglang-triton-decode-zero-seqlen-nan", "BuggyDecode", "GuardedDecode"),
])
def test_a_kernel_attnum_never_saw_is_caught_through_the_plain_protocol(case_id, broken, fixed, capsys):
    """Written for the tests (tests/_unseen_kernels.py), broken the way the case's upstream kernel was, declared as
    the docs say (lse_base, single_query_only, split_rule) and audited as `attnum audit triton-interpret:FILE:CLASS`
    with the case's probes and dtype: caught when broken, silent when guarded."""
    pytest.importorskip("triton")
    import _paths

    (case,) = select([case_id])
    verdicts = {}
    for role, cls in (("broken", broken), ("fixed", fixed)):
        code = main(["audit", f"triton-interpret:{_paths.TESTS / '_unseen_kernels.py'}:{cls}", "--probes",
                     ",".join(case.probes), "--dtype", case.dtype, "--json"])
        doc = json.loads(capsys.readouterr().out)
        rows = [{"probe": p["name"], "dtype": p["dtype"], "status": p["verdict"], "note": p["note"], "ratio": None}
                for p in doc["probes"]]
        verdicts[role] = (code, judge(role, case.probes, rows, doc["available"], doc.get("reason", ""))["verdict"])
    assert verdicts == {"broken": (1, "caught"), "fixed": (0, "silent")}, verdicts
