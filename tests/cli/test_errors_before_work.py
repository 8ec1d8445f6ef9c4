"""A user's mistake is the command's first and only line, exit 2, before any work starts.

No progress line before it (no :class:`attnum.console.progress.Activity` or sweep progress was even
started: counted, not timed, so a slow machine changes nothing), no "finished in" after it. The mistakes a
file check can catch are caught before torch is imported (a child process says which modules it loaded).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import _paths
import pytest

from attnum.cli import main
from attnum.console import progress

WRONG_SIGNATURE = "def attention(q, k):\n    return q\n"
TWO_ARG_MATMUL = "def mm(a, b):\n    return a.float() @ b.float()\n"
RAISING_MATMUL = "def mm(a, b, c):\n    raise TypeError('not today')\n"


@pytest.fixture
def started(monkeypatch):
    """The titles of every progress display a command started."""
    titles: list[str] = []
    enter, sweep_enter = progress.Activity.__enter__, progress.SweepProgress.__enter__

    def activity(self):
        titles.append(self.title)
        return enter(self)

    def sweep(self):
        titles.append(self.title)
        return sweep_enter(self)

    monkeypatch.setattr(progress.Activity, "__enter__", activity)
    monkeypatch.setattr(progress.SweepProgress, "__enter__", sweep)
    return titles


@pytest.fixture
def files(tmp_path):
    (tmp_path / "wrong_sig.py").write_text(WRONG_SIGNATURE)
    (tmp_path / "mm2.py").write_text(TWO_ARG_MATMUL)
    (tmp_path / "mm_raises.py").write_text(RAISING_MATMUL)
    (tmp_path / "folder.py").mkdir()
    return tmp_path


# (argv with {d} for the test's folder, a fragment of the one line)
MISTAKES = {
    "audit-missing-file": (["audit", "{d}/missing.py:attention"], "does not exist"),
    "audit-folder-as-file": (["audit", "{d}/folder.py:attention"], "is a folder"),
    "audit-no-such-module": (["audit", "no_such_module_xyz:attention"], "no module named 'no_such_module_xyz'"),
    "audit-wrong-signature": (["audit", "{d}/wrong_sig.py:attention"], "does not follow"),
    "audit-no-target": (["audit"], "TARGET is missing"),
    "audit-probe-misspelt": (["audit", "torch-sdpa-math", "--probes", "below-sentinal"], "did you mean 'below-sentinel'"),
    "audit-target-misspelt": (["audit", "torch-sdpa-mth"], "did you mean 'torch-sdpa-math'"),
    "fingerprint-num-splits-0": (["fingerprint", "torch-sdpa-math", "--num-splits", "0"], "--num-splits=0"),
    "fingerprint-missing-file": (["fingerprint", "{d}/missing.py:attention"], "does not exist"),
    "fingerprint-matmul-two-args": (["fingerprint", "torch-sdpa-math", "--matmul", "{d}/mm2.py:mm"],
                                    "cannot take (a, b, c)"),
    "fingerprint-matmul-raises": (["fingerprint", "torch-sdpa-math", "--matmul", "{d}/mm_raises.py:mm"],
                                  "raised TypeError: not today"),
    "fingerprint-matmul-missing": (["fingerprint", "torch-sdpa-math", "--matmul", "{d}/missing.py:mm"],
                                   "does not exist"),
    "kernels-fetch-misspelt": (["kernels", "fetch", "vlm"], "did you mean 'vllm'"),
    "reproduce-profile-misspelt": (["reproduce", "--profile", "quik", "--out", "{d}/o"], "did you mean 'quick'"),
    "sweep-missing-spec": (["sweep", "{d}/missing.toml", "--out", "{d}/o"], "no such file"),
    "compare-policy-misspelt": (["compare", "--policy", "fa22:bf16"], "did you mean 'fa2'"),
    "diverge-missing-attention": (["diverge", "--attention", "{d}/missing.py:attn", "--out", "{d}/o"],
                                  "does not exist"),
    "spec-audit-missing-file": (["spec-audit", "{d}/missing.py:sampler"], "does not exist"),
}


@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_a_mistake_is_the_first_and_only_line_before_any_work(name, files, started, capsys, monkeypatch):
    monkeypatch.setenv("ATTNUM_PROGRESS_INTERVAL", "0.001")  # a heartbeat would print at once, were one running
    argv, fragment = MISTAKES[name]
    code = main([a.format(d=files) for a in argv])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2, (code, err)
    assert len(lines) == 1 and lines[0].startswith("attnum: error: ") and fragment in lines[0], err
    assert started == [], f"progress started before the error: {started}"
    assert "finished in" not in err and out == ""


# Caught by a look at the file system or the flags alone: torch is never imported.
BEFORE_TORCH = ["audit-missing-file", "audit-folder-as-file", "audit-no-such-module", "audit-no-target",
                "fingerprint-num-splits-0", "fingerprint-missing-file", "fingerprint-matmul-missing",
                "kernels-fetch-misspelt", "reproduce-profile-misspelt", "sweep-missing-spec",
                "diverge-missing-attention", "spec-audit-missing-file"]

PROBE = """
import json, sys
from attnum.cli import main
code = main(json.loads(sys.argv[1]))
print(json.dumps({"code": code, "torch": "torch" in sys.modules}))
"""


@pytest.mark.parametrize("name", BEFORE_TORCH)
def test_a_file_or_flag_mistake_is_reported_before_torch_is_imported(name, files):
    argv = [a.format(d=files) for a in MISTAKES[name][0]]
    env = {**os.environ, "PYTHONPATH": str(_paths.ROOT / "src")}
    run = subprocess.run([sys.executable, "-c", PROBE, json.dumps(argv)], capture_output=True, text=True, env=env,
                         cwd=files)
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got == {"code": 2, "torch": False}, (got, run.stderr)
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr


def test_an_input_error_inside_a_running_activity_prints_no_finished_line(capsys, monkeypatch):
    """The safety net: should a check still land inside an Activity, its end says nothing more."""
    from attnum.errors import AttnumInputError

    monkeypatch.setenv("ATTNUM_PROGRESS_INTERVAL", "0.001")
    act = progress.Activity("x")
    act.lines = 1  # as if a heartbeat had printed
    act.__enter__()
    act.__exit__(AttnumInputError, AttnumInputError("bad"), None)
    assert "finished in" not in capsys.readouterr().err
