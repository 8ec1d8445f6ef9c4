"""Executor options and progress reporting."""

from __future__ import annotations

import io

import pytest

from attnum.console.progress import SweepProgress
from attnum.errors import AttnumInputError
from attnum.sweep.executors import SweepOptions


@pytest.mark.parametrize("kw, where", [({"jobs": 0}, "--jobs=0"), ({"executor": "dask"}, "--executor='dask'")])
def test_bad_options_are_one_line_input_errors(tmp_path, kw, where):
    with pytest.raises(AttnumInputError, match=where):
        SweepOptions(out=tmp_path, **kw)


@pytest.mark.parametrize("quiet", [True, False])
def test_progress_reports_every_point_and_failures(quiet):
    stream = io.StringIO()
    with SweepProgress(total=3, skipped=2, title="t", quiet=quiet, stream=stream) as bar:
        bar.advance("p1", {"status": "done", "wall_s": 0.1})
        bar.advance("p2", {"status": "failed", "error": "ValueError: x", "wall_s": 0.1})
        bar.advance("p3", {"status": "done", "wall_s": 0.1})
    text = stream.getvalue()
    assert "3 points to run, 2 already done" in text and "t: 3/3 points" in text and "1 failed" in text
    assert "ValueError: x" in text
    # quiet: one plain line per point; a stream that is not a terminal (a StringIO, a log, CI) gets
    # failures at once and heartbeats; the rich bar is for terminals only, where it redraws (issue 13)
    assert "[2/3] p2 FAILED" in text and "eta" in text
    assert ("[1/3] p1 ok" in text) == quiet
