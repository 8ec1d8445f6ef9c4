"""Tables that fit where they go (attnum.console.tables): off a terminal, every value and name is whole on its line."""

import io
import json
import re

import pytest

from attnum.cli import main
from attnum.console.tables import print_table, render_plain, render_tsv, table_mode

LONG = ["a-probe-name-well-past-any-column-width-" * 3, "4.62e-12", "x" * 200]


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_keeps_every_value_whole_on_one_line(monkeypatch):
    monkeypatch.delenv("ATTNUM_TABLE", raising=False)
    out = io.StringIO()
    print_table(("name", "err", "note"), [LONG, ["b", "1.00e+00", "short"]], title="t", caption="c",
                justify=("left", "right", "left"), stream=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "t" and lines[-1] == "c"
    row = next(line for line in lines if line.startswith(LONG[0]))
    assert row.split() == LONG  # each value whole, on the row's own line
    # right-justified numbers end in the same column
    assert lines[3].index("4.62e-12") + 8 == lines[4].index("1.00e+00") + 8


def test_multiline_cell_stays_on_its_row():
    text = render_plain(("a", "b"), [["one\ntwo", "x\ty"]])
    assert text.splitlines()[-1].split() == ["one", "two", "x", "y"]


def test_tsv_and_mode_choice(monkeypatch):
    assert render_tsv(("a", "b"), [["1", "2"]]) == "a\tb\n1\t2"
    monkeypatch.setenv("ATTNUM_TABLE", "tsv")
    assert table_mode(io.StringIO()) == "tsv"
    monkeypatch.setenv("ATTNUM_TABLE", "bogus")
    assert table_mode(io.StringIO()) == "plain" and table_mode(_Tty()) == "rich"
    monkeypatch.delenv("ATTNUM_TABLE")
    assert table_mode(io.StringIO()) == "plain" and table_mode(_Tty()) == "rich"


@pytest.mark.parametrize("columns", [40, 100])
def test_terminal_table_fits_its_width_and_numbers_never_wrap(monkeypatch, columns):
    monkeypatch.delenv("ATTNUM_TABLE", raising=False)
    monkeypatch.setenv("COLUMNS", str(columns))
    out = _Tty()
    print_table(("name", "err"), [["a long name that must wrap on a narrow terminal", "4.62e-12"]],
                justify=("left", "right"), stream=out)
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue())
    assert max(len(line) for line in text.splitlines()) <= columns
    assert "4.62e-12" in text  # the number on one line, not split


def test_compare_to_a_pipe_prints_every_metric_whole(capsys):
    args = ["compare", "--policy", "fa2:bf16", "--seq-len", "64", "--heads", "1", "--block-k", "16"]
    assert main([*args, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert main(args) == 0
    out = capsys.readouterr().out  # captured: not a terminal
    for pair, metrics in result["metrics"].items():
        line = next(line for line in out.splitlines() if line.startswith(pair))
        assert f"{metrics['max_abs']:.3e}" in line.split() and f"{metrics['rmse']:.3e}" in line.split()


def test_audit_probe_list_to_a_pipe_keeps_names_and_summaries_whole(capsys):
    from attnum.audit.probes import PROBES

    assert main(["audit", "x", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for p in PROBES.values():
        assert any(line.split()[:1] == [p.name] and p.summary in line for line in lines), p.name


def test_runs_to_a_pipe_keeps_timestamps_status_and_command_whole(tmp_path, capsys):
    from attnum.store.db import Store

    command = "attnum reproduce --profile quick --out " + str(tmp_path / ("a-long-folder-name-" * 4))
    with Store(tmp_path, command=command) as store:
        store.bind_spec(name="spec-with-a-name", spec_hash="0123456789abcdef", canonical="{}", source="test")
        store.plan([])
        run_id = store.begin_run(command=command, n_todo=0, executor="local", jobs=2)
        store.end_run(run_id, "complete-with-failures")
    assert main(["runs", str(tmp_path)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.lstrip().startswith("1 "))
    assert "complete-with-failures" in row.split() and row.endswith(command)
    assert __import__("re").search(r" \d{4}-\d\d-\d\d \d\d:\d\d:\d\d ", row)
