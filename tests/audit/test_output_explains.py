"""Output a newcomer can read without decoding it (issue 33, points 4-6).

- ``attnum audit``: the summary comes first; rows whose every case was unsupported fold into one line per
  reason naming the probes, unless ``--all``; --json keeps every row.
- Warnings the audited target raises (Triton's interpreter: numpy RuntimeWarnings) go into the case's
  note, not onto stderr between progress lines.
- Tables in files and pipes carry no padding spaces at the ends of lines; the consistency table says
  what its cells are.
- Progress of long commands says "k of n" and an ETA; elapsed time counts from the command's start.
- A mistyped audit target or sweep axis gets "did you mean".
"""

from __future__ import annotations

import io
import types

import pytest

from attnum.audit.config import AuditConfig
from attnum.audit.report import print_table, to_json
from attnum.audit.runner import run_audit
from attnum.errors import AttnumInputError


@pytest.fixture(scope="module")
def sdpa_report():
    cfg = AuditConfig(target="torch-sdpa-math", dtypes="fp32",
                      probes="below-sentinel,merge-empty-split,split-invariance,lse-base", isolate=False)
    return run_audit(cfg, isolate=False)


def test_audit_prints_the_summary_first_and_folds_unsupported_rows(sdpa_report):
    out = io.StringIO()
    print_table(sdpa_report, out)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("torch-sdpa-math: PASSED (1 pass, 3 unsupported)"), lines[0]
    assert lines[-1] == lines[0]  # and again last, for tail
    probe_rows = [line for line in lines if line.split(" ", 1)[0] in
                  ("below-sentinel", "merge-empty-split", "split-invariance", "lse-base")]
    assert [r.split()[0] for r in probe_rows] == ["below-sentinel"]
    head = [i for i, line in enumerate(lines) if "unsupported row(s) not shown" in line]
    assert len(head) == 1 and lines[head[0]].startswith("3 unsupported") and "--all" in lines[head[0]], lines
    folded = "\n".join(line for line in lines[head[0] + 1:] if line.startswith("  "))  # one line per reason
    for name in ("merge-empty-split", "split-invariance", "lse-base", "decode entry point"):
        assert name in folded, folded


def test_audit_all_shows_every_row_and_json_keeps_them(sdpa_report):
    out = io.StringIO()
    print_table(sdpa_report, out, show_all=True)
    text = out.getvalue()
    assert "not shown" not in text
    assert all(name in text for name in ("merge-empty-split", "split-invariance", "lse-base"))
    assert [p["verdict"] for p in to_json(sdpa_report)["probes"]].count("unsupported") == 3


def test_audit_cli_has_all_flag(capsys):
    from attnum.cli import main

    code = main(["audit", "torch-sdpa-math", "--dtype", "fp32", "--probes", "below-sentinel,lse-base", "--all",
                 "--no-isolate"])
    out = capsys.readouterr().out
    assert code == 0 and "lse-base" in out.split("\n", 3)[3] and "not shown" not in out


WARNING_TARGET = '''
import warnings
import torch

def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    warnings.warn("overflow encountered in multiply", RuntimeWarning)
    return torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask,
                                                            is_causal=is_causal, scale=scale)
'''


def test_target_warnings_go_into_the_case_note_not_stderr(tmp_path, capfd):
    path = tmp_path / "warns.py"
    path.write_text(WARNING_TARGET, encoding="utf-8")
    report = run_audit(AuditConfig(target=f"{path}:attention", dtypes="fp32", probes="odd-lengths"))
    err = capfd.readouterr().err
    (row,) = report.results
    assert row.status == "pass"
    notes = [c.verdict.note for c in row.cases]
    assert all("warned: RuntimeWarning: overflow encountered in multiply" in n for n in notes), notes
    assert "warned: RuntimeWarning" in row.note
    assert "overflow encountered" not in err, err


def test_table_lines_in_a_file_end_without_padding(monkeypatch):
    from attnum.console.tables import print_table as emit
    from attnum.studies.consistency.report import text_table

    rows = [["a", "1"], ["a much longer name", "12345"]]
    for mode in ("plain", "rich"):
        monkeypatch.setenv("ATTNUM_TABLE", mode)
        out = io.StringIO()
        emit(("name", "value"), rows, title="t", caption="c", stream=out)
        lines = out.getvalue().splitlines()
        assert lines and all(line == line.rstrip() for line in lines), (mode, lines)
    text = text_table(["rule", "B=1", "knob"], [["vllm", "100% / 0", ""], ["flash-attn-long", "5% / 3", "x"]])
    assert all(line == line.rstrip() for line in text.splitlines()), text


def test_consistency_cells_have_a_legend():
    from attnum.studies.consistency.report import html_section, invariance_legend

    legend = invariance_legend({"format": "bf16"})
    assert "identical / max ulp" in legend and "bit-identical" in legend and "ulps of bf16" in legend
    result = {"format": "bf16", "config": {"policy": "fa2:bf16", "length": 8, "heads": 1, "kv_heads": 1,
                                           "head_dim": 8, "seed": 0}, "rules": [], "modes": []}
    result["rules"] = [{"rule": "r", "batches": [{"B": 1, "identical": 1.0, "max_ulp": 0}], "breaks": [],
                        "alone_vs_golden_ulp": 0.5, "decode_vs_prefill": {"identical": 1.0, "max_ulp": 0},
                        "prefill_knobs": {}}]
    assert "identical / max ulp" in html_section(result)


def test_activity_says_k_of_n_and_an_eta(monkeypatch):
    from attnum.console import progress
    from attnum.console.progress import Activity

    now = [1000.0]  # the progress module's clock, stopped: the ETA is arithmetic, not a race with a loaded machine
    monkeypatch.setattr(progress, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    act = Activity("lowbit-table", unit="settings", eta=True, stream=io.StringIO())
    act.update(0, 4, "first")
    assert "0 of 4 settings" in act._text() and "eta" not in act._text()  # no estimate before a unit is done
    now[0] += 10.0  # one unit took 10 s
    act.update(1, 4, "second")
    text = act._text()
    assert "1 of 4 settings" in text and "eta 30s" in text, text
    counts = Activity("report", unit="figures drawn", stream=io.StringIO())
    counts.update(done=9)
    assert "9 figures drawn" in counts._text() and "done" not in counts._text()


def test_elapsed_counts_from_the_command_start(monkeypatch):
    from attnum.console import progress

    monkeypatch.setattr(progress, "_command_t0", None)
    monkeypatch.setattr(progress, "time", types.SimpleNamespace(perf_counter=lambda: 1000.0))  # a stopped clock
    progress.command_started(age_s=19.0)  # the command began 19 s ago (imports, setup)
    act = progress.Activity("compare", stream=io.StringIO())
    assert "19s elapsed" in act._text(), act._text()
    age = progress.process_age_s()
    assert age is None or age >= 0.0


def test_lowbit_table_reports_each_setting():
    from attnum.studies.lowbit import table

    seen = []
    table.run_lowbit_table(table.LowbitTableConfig(seq_len=64, heads=1, head_dim=16, dists=("normal",)),
                           progress=lambda done, total, label: seen.append((done, total)))
    n = len(table.SETTINGS)
    assert seen == [(i, n) for i in range(n)]


def test_unknown_audit_target_gets_did_you_mean():
    from attnum.kernels.registry import resolve

    with pytest.raises(AttnumInputError, match="did you mean 'torch-sdpa-math'\\? expected a built-in"):
        resolve("torch-sdpa-maht", param="target")


def test_unknown_sweep_axis_gets_did_you_mean():
    from attnum.sweep.spec import spec_from_dict

    with pytest.raises(AttnumInputError, match="axes.seq_lne is not a known axis; did you mean 'seq_len'\\?"):
        spec_from_dict({"name": "x", "axes": {"seq_lne": [64]}})
    with pytest.raises(AttnumInputError) as err:
        spec_from_dict({"name": "x", "axes": {"zzzzqqq": [64]}})
    assert "did you mean" not in str(err.value)  # nothing close: the list alone


def test_a_command_start_does_not_outlive_the_command():
    from attnum.cli import main
    from attnum.console import progress

    assert main(["--version"]) == 0
    assert progress._command_t0 is None  # an Activity after the command counts from its own start
