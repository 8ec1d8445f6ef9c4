"""Long commands say how far they are off a terminal too (a log, CI): a line at least every interval."""

import re

from _beats import Beats

from attnum.cli import main


def test_audit_heartbeat_in_a_log_counts_probes(capsys, monkeypatch):
    monkeypatch.setenv("ATTNUM_PROGRESS_INTERVAL", "0.05")
    from attnum.audit import runner

    real = runner.run_probe
    beats = Beats(monkeypatch)

    def slow(*args, **kwargs):  # each probe outlasts a heartbeat (however long the machine takes to print it)
        beats.wait(beats.lines() + 1)
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "run_probe", slow)
    code = main(["audit", "torch-sdpa-math", "--dtype", "fp32", "--probes", "scale-argument,odd-lengths",
                 "--no-isolate"])
    out = capsys.readouterr()
    assert code == 0 and "scale-argument" in out.out  # the table on stdout, the progress on stderr
    beats = [line for line in out.err.splitlines() if line.startswith("attnum audit torch-sdpa-math: running")]
    assert beats and all(re.search(r", [0-2]/2(,|$)", b) for b in beats), out.err
    assert any("last: scale-argument fp32 pass" in b for b in beats)
    assert "attnum audit torch-sdpa-math: finished in" in out.err
