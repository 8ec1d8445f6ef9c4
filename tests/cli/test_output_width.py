"""Lines of attnum's own fit a terminal (at most 160 characters) and stay whole in a pipe or a file."""

from __future__ import annotations

import io
import sys

import _paths

from attnum.cli import main
from attnum.console.tables import PROSE_WIDTH, say_prose


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_scan_fits_a_terminal_and_keeps_every_word_in_a_pipe(monkeypatch, capsys):
    tty = _Terminal()
    monkeypatch.setattr(sys, "stdout", tty)
    assert main(["scan", str(_paths.EXAMPLES)]) == 1
    lines = tty.getvalue().splitlines()
    assert lines and max(len(line) for line in lines) <= 160, max(lines, key=len)
    assert any(line.endswith(" ...") for line in lines)  # an explanation was cut: --json has it whole
    monkeypatch.undo()
    assert main(["scan", str(_paths.EXAMPLES)]) == 1
    piped = capsys.readouterr().out
    assert max(len(line) for line in piped.splitlines()) > 160 and " ..." not in piped  # whole in a pipe


def test_prose_wraps_on_a_terminal_only():
    sentence = " ".join(["word"] * 100)
    tty, pipe = _Terminal(), io.StringIO()
    say_prose(sentence, tty)
    say_prose(sentence, pipe)
    assert all(len(line) <= PROSE_WIDTH for line in tty.getvalue().splitlines())
    assert len(tty.getvalue().splitlines()) > 1
    assert pipe.getvalue() == sentence + "\n"
