"""Exit codes: bad input is one line and exit 2; anything else is an internal error, exit 1, with the
traceback in a file whose path is printed. And the compare flags map 1:1 onto CompareConfig."""

from __future__ import annotations

import dataclasses
import re
import tempfile

import _paths
import pytest
import typer

import attnum.studies.paper.cli.compare as cli_compare
from attnum.cli import build_app, main
from attnum.errors import AttnumInputError
from attnum.studies.paper.compare import CompareConfig

TINY = ["compare", "--seq-len", "8", "--head-dim", "4", "--heads", "1"]
_PATH = re.compile(r"\(traceback written to (\S+)\)$")


@pytest.fixture
def temp_dir(tmp_path, monkeypatch):
    """Traceback files land in this test's folder, not the machine's temp dir."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _raise(err: Exception):
    def broken_run_compare(cfg):
        raise err

    return broken_run_compare


@pytest.mark.parametrize("err", [RuntimeError("boom at the core"), ValueError("an internal ValueError"),
                                 KeyError("missing")], ids=lambda e: type(e).__name__)
def test_internal_error_exits_1_and_writes_the_traceback(err, temp_dir, monkeypatch, capsys):
    monkeypatch.setattr(cli_compare, "run_compare", _raise(err))
    assert main(TINY) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith(f"attnum: internal error: {type(err).__name__}: "), line
    assert str(err).strip("'") in line and "Traceback" not in line
    path = _PATH.search(line).group(1)
    text = open(path).read()
    assert str(temp_dir) in path
    assert "Traceback (most recent call last)" in text and "broken_run_compare" in text and str(err).strip("'") in text
    assert "command: attnum compare --seq-len 8" in text


def test_traceback_goes_to_stderr_when_no_file_can_be_written(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "does-not-exist"))
    monkeypatch.setattr(cli_compare, "run_compare", _raise(RuntimeError("boom")))
    assert main(TINY) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "broken_run_compare" in err
    assert err.strip().splitlines()[-1].startswith("attnum: internal error: RuntimeError: boom (traceback printed above")


@pytest.mark.parametrize("args, fragment", [
    (["--seq-len", "0"], "seq_len=0"),
    (["--causal-alignment", "diagonal"], "causal_alignment='diagonal'"),
    (["--kv-heads", "3"], "kv_heads=3"),
    (["--grad", "--block-k", "0"], "block_k=0"),
])
def test_bad_input_exits_2_one_line_no_traceback_file(args, fragment, temp_dir, capsys):
    assert main([*TINY, *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnum: error: ") and fragment in err and "expected" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert list(temp_dir.iterdir()) == []


def test_input_error_raised_inside_a_study_is_still_exit_2(temp_dir, monkeypatch, capsys):
    monkeypatch.setattr(cli_compare, "run_compare", _raise(AttnumInputError("dist='x' is not allowed; expected y")))
    assert main(TINY) == 2
    assert capsys.readouterr().err == "attnum: error: dist='x' is not allowed; expected y\n"


@pytest.mark.parametrize("args, fragment", [
    (["runs", "{tmp}/no-store"], "out="),
    (["sweep", "{tmp}/missing.toml", "--out", "{tmp}/o"], "spec="),
    (["diverge", "--checkpoints", "{tmp}/A", "{tmp}/B", "--out", "{tmp}/o"], "A"),
    (["diverge", "--seeds", "3,3", "--out", "{tmp}/o"], "seeds='3,3'"),
    (["validate", "--formats", "e5m2"], "format='e5m2'"),
    (["validate", "--seq-lens", "1,x"], "seq_lens='1,x'"),
])
def test_user_paths_and_flags_of_other_commands_exit_2(args, fragment, tmp_path, temp_dir, capsys):
    assert main([a.format(tmp=tmp_path) for a in args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnum: error: ") and fragment in err and len(err.strip().splitlines()) == 1, err
    assert not list(temp_dir.glob("attnum-traceback-*"))


def test_usage_error_is_click_exit_2(capsys):
    assert main(["compare", "--no-such-flag"]) == 2
    assert "No such option" in capsys.readouterr().err


def test_compare_flags_map_one_to_one_onto_compare_config():
    command = typer.main.get_command(build_app()).commands["compare"]
    options = {p.name for p in command.params}
    fields = {f.name for f in dataclasses.fields(CompareConfig)}
    assert options - fields == {"grad", "as_json"}
    assert fields - options == set()
    # And each flag is the field's name with dashes.
    for p in command.params:
        if p.name in fields:
            assert f"--{p.name.replace('_', '-')}" in p.opts, p.opts


@pytest.mark.parametrize("argv,usage", [([], "Usage: attnum [OPTIONS] COMMAND"),
                                        (["kernels"], "Usage: attnum kernels [OPTIONS] COMMAND")])
def test_a_command_group_alone_prints_its_help_once(argv, usage):
    """typer's rich help is printed while click builds the no-arguments error; printing the context's help
    again showed it twice. Exit 2, as click's."""
    import subprocess
    import sys

    from _sweep_helpers import cli_env

    p = subprocess.run([sys.executable, "-m", "attnum", *argv], capture_output=True, text=True, env=cli_env(),
                       timeout=_paths.HANG_S)
    text = p.stdout + p.stderr
    assert p.returncode == 2 and text.count("Usage:") == 1 and usage in " ".join(text.split()), text[:400]
