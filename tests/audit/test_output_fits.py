"""The audit's human view fits a terminal and says each thing once (issue 43, point 6).

- No line of the view's own is longer than 160 characters: the unsupported rows fold into one line per
  reason, each folded with "(+N more)" (the table's rows keep their values whole: a pipe or a file is read
  by a program).
- The verdict rule is printed once; the summary opens and closes the view.
- What a target's libraries warn (a DeprecationWarning) is the report's, not a verdict's note; a warning
  of its arithmetic (numpy's RuntimeWarning) stays in the note of the case it explains.
- Conventions are printed where they apply: a merge-only target has no causal alignment or empty rows.
"""

from __future__ import annotations

import io

import pytest

from attnum.audit.config import AuditConfig
from attnum.audit.probes import PROBES
from attnum.audit.report import WIDTH, fold, print_table, to_json
from attnum.audit.runner import run_audit


@pytest.fixture(scope="module")
def sdpa_lines():
    """torch-sdpa-math under every probe that cannot apply to an SDPA-only kernel (each is one unsupported row)."""
    unsupported = [n for n in PROBES if n.startswith(("merge-", "decode-", "split-", "page-", "block-", "lse-",
                                                     "inf-lse", "varlen", "empty-sequence", "mla-", "kv-scale",
                                                     "softcap", "window", "attention-sinks"))]
    cfg = AuditConfig(target="torch-sdpa-math", dtypes="fp32", probes=",".join(["below-sentinel", *unsupported]),
                      isolate=False)
    report = run_audit(cfg, isolate=False)
    out = io.StringIO()
    print_table(report, out)
    return report, out.getvalue().splitlines()


def test_no_line_of_the_view_is_wider_than_a_terminal(sdpa_lines):
    report, lines = sdpa_lines
    table_rows = {line for line in lines if line.split(" ", 1)[0] in PROBES or line.startswith(("probe ", "---"))}
    wide = [line for line in lines if line not in table_rows and len(line) > WIDTH]
    assert not wide, wide
    assert sum(r.status == "unsupported" for r in report.results) >= 15  # enough to have made a 3,000-character line


def test_the_rule_is_printed_once_and_the_summary_opens_and_closes(sdpa_lines):
    _, lines = sdpa_lines
    assert sum("rule: " in line for line in lines) == 1, lines
    assert lines[0] == lines[-1] and lines[0].startswith("torch-sdpa-math: PASSED")


def test_fold_keeps_the_head_and_counts_what_it_left_out():
    names = [f"probe-number-{i}" for i in range(40)]
    line = fold("  no entry point: ", names)
    assert len(line) <= WIDTH and line.startswith("  no entry point: probe-number-0, ") and line.endswith(" more)")
    shown = line.count("probe-number-")
    assert f"(+{40 - shown} more)" in line
    assert fold("x: ", ["a", "b"]) == "x: a, b"


TARGET = '''
import warnings
import numpy as np
import torch

def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    warnings.warn("this API is deprecated", DeprecationWarning)
    with np.errstate(over="warn"):
        np.float32(3e38) * np.float32(10)  # a RuntimeWarning of the arithmetic
    return torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask,
                                                            is_causal=is_causal, scale=scale)
'''


def test_library_warnings_stay_out_of_verdict_notes(tmp_path):
    path = tmp_path / "warns.py"
    path.write_text(TARGET, encoding="utf-8")
    report = run_audit(AuditConfig(target=f"{path}:attention", dtypes="fp32", probes="odd-lengths"))
    (row,) = report.results
    notes = [row.note, *(c.verdict.note for c in row.cases)]
    assert not any("DeprecationWarning" in n for n in notes), notes
    assert any("RuntimeWarning: overflow" in n for n in notes), notes
    assert len(report.warnings) == 1 and report.warnings[0].startswith("DeprecationWarning: this API is deprecated")
    assert to_json(report)["warnings"] == list(report.warnings)
    out = io.StringIO()
    print_table(report, out)
    assert sum("DeprecationWarning" in line for line in out.getvalue().splitlines()) == 1


def test_conventions_are_printed_only_for_a_target_that_computes_attention(sdpa_lines):
    from attnum.attention.serving.merge import merge_state
    from attnum.kernels.serving import ServingTarget

    _, lines = sdpa_lines
    assert any(line.startswith("conventions: causal top-left") for line in lines)
    merge_only = ServingTarget("merge-only", merge_state=lambda *a, **k: merge_state(*a, **k))
    report = run_audit(AuditConfig(dtypes="fp32", probes="merge-two-empty,below-sentinel"), target=merge_only)
    out = io.StringIO()
    print_table(report, out)
    text = out.getvalue()
    assert "merge-two-empty" in text and "conventions:" not in text and "causal" not in text, text
    assert report.conventions["attention"] is False


def test_html_says_where_it_wrote_and_json_stays_one_document(tmp_path, capsys):
    import json

    from attnum.cli import main

    page = tmp_path / "audit.html"
    code = main(["audit", "torch-sdpa-math", "--dtype", "fp32", "--probes", "below-sentinel", "--no-isolate",
                 "--html", str(page), "--json"])
    out, err = capsys.readouterr()
    assert code == 0 and page.is_file()
    assert json.loads(out)["html"] == str(page)  # stdout: the JSON document alone, saying where the page went
    code = main(["audit", "torch-sdpa-math", "--dtype", "fp32", "--probes", "below-sentinel", "--no-isolate",
                 "--html", str(page)])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0 and lines[0] == f"HTML report written to {page}" and lines[-1].startswith("torch-sdpa-math: PASSED")


def test_a_study_that_saves_json_says_where(tmp_path, capsys):
    from attnum.studies.consistency.cli import _save

    assert _save(str(tmp_path), "x.json", {"a": 1}, as_json=False) == str(tmp_path / "x.json")
    assert capsys.readouterr().out.strip() == f"wrote {tmp_path / 'x.json'}"
    assert _save(str(tmp_path), "y.json", {"a": 1}, as_json=True) == str(tmp_path / "y.json")
    got = capsys.readouterr()
    assert got.out == "" and got.err == ""  # with --json the path goes into the command's JSON document


def test_audit_list_needs_no_target(capsys):
    from attnum.cli import main

    assert main(["audit", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in PROBES)
