"""A CLI that never shows a traceback (issue 13, part 4), through the real entry point.

Every bad input, every configuration too large for the machine, every non-finite golden value and
every disk that refuses a write ends in exit 2 and exactly one stderr line, no "Traceback"; --help
and --version do not import torch; JSON is strict; progress reaches a log that is not a terminal.
"""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
import tempfile

import _paths
import pytest
import typer

import attnum.studies.paper.cli.compare as cli_compare
from attnum.cli import build_app, main

TINY = ["--seq-len", "8", "--head-dim", "4", "--heads", "1"]
TOO_BIG = "1000000000"  # bytes: ATTNUM_MEMORY_LIMIT_BYTES for the memory cases


@pytest.fixture
def temp_dir(tmp_path, monkeypatch):
    """Traceback files (there must be none) land here; the command runs here."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _one_error_line(capsys, code: int, fragments: tuple[str, ...], temp_dir) -> str:
    out = capsys.readouterr()
    lines = out.err.strip().splitlines()
    assert code == 2, (code, out.err)
    assert len(lines) == 1, lines
    assert lines[0].startswith("attnum: error: ") and "Traceback" not in out.err, lines
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    assert not list(temp_dir.glob("attnum-traceback-*"))
    return lines[0]


# --- 1, 2: --help and --version without torch ------------------------------------------------

_NO_TORCH = ("import sys; {code}; heavy = [m for m in ('torch', 'numpy', 'matplotlib') if m in sys.modules]; "
             "print(heavy); sys.exit(1 if heavy else 0)")


@pytest.mark.parametrize("code", [
    "import attnum.cli; attnum.cli.build_app()",
    "import attnum, attnum.errors",
    "from attnum.cli import main; main(['--version'])",
    "from attnum.cli import main; main(['compare', '--help'])",
    "from attnum.cli import main; [main([c, '--help']) for c in ('sweep', 'reproduce', 'validate', 'decode', "
    "'attribute', 'fp8-table', 'diverge', 'ring', 'spec', 'scan', 'fingerprint')]",
    "from attnum.cli import main; main(['kernels', 'fetch', '--help'])",
], ids=["build_app", "import-attnum", "--version", "compare--help", "every--help", "kernels-fetch--help"])
def test_help_and_version_do_not_import_torch(code):
    """``attnum audit --help`` is the exception: it lists the built-in targets, read from the registry, whose
    adapters import torch (tests/project/test_doc_lists.py checks that list against the registry)."""
    res = subprocess.run([sys.executable, "-c", _NO_TORCH.format(code=code)], capture_output=True, text=True,
                         timeout=_paths.HANG_S)
    assert res.returncode == 0, (res.stdout[-500:], res.stderr[-2000:])


def test_lazy_top_level_exports_still_work():
    import attnum

    assert attnum.wasserstein_distance([0.0, 1.0], [1.0, 2.0]) == 1.0
    assert attnum.get_format("bf16").name == "bf16"
    with pytest.raises(AttributeError):
        attnum.no_such_name  # noqa: B018


def test_version(capsys):
    assert main(["--version"]) == 0
    out = capsys.readouterr().out
    assert re.fullmatch(r"attnum 0\.1\.0 \(torch [^,]+, Python 3\.\d+\.\d+\S*\)\n", out), out


def test_reproduce_and_attribute_help_constants_match_the_studies():
    from attnum.cli.reproduce import PROFILES
    from attnum.studies.paper.attribute import METRICS as REAL_METRICS
    from attnum.studies.paper.cli.attribute import METRICS
    from attnum.sweep.registry import profiles

    assert METRICS == REAL_METRICS and PROFILES == tuple(profiles())


# --- 3: conventional metavars -----------------------------------------------------------------

_TYPER_METAVAR = re.compile(r"<(bool|int|float|str|path|list\[[^\]]*\]|[a-z]+,[a-z,]+)>")


def _commands() -> list[str]:
    return sorted(typer.main.get_command(build_app()).commands)


def test_every_help_has_conventional_metavars(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "240")
    texts = {}
    for cmd in [None, *_commands()]:
        code = main(["--help"] if cmd is None else [cmd, "--help"])
        texts[cmd] = capsys.readouterr().out
        assert code == 0, cmd
        assert not _TYPER_METAVAR.search(texts[cmd]), (cmd, _TYPER_METAVAR.search(texts[cmd]).group(0))
    compare = texts["compare"]
    assert re.search(r"--seq-len\s+INT\s", compare) and re.search(r"--logit-scale\s+FLOAT\s", compare)
    assert re.search(r"--format\s+FMT\s", compare) and re.search(r"--policy\s+TEXT\s", compare)
    assert re.search(r"--json\s+Print JSON", compare)  # a flag has no metavar
    assert re.search(r"--causal\s+--no-causal\s+Causal mask", compare)
    assert re.search(r"--merge-policy\s+TEXT\s", texts["ring"])
    assert re.search(r"--checkpoints\s+PATH PATH\s", texts["diverge"])
    assert re.search(r"--seq-lens\s+LIST\s", texts["validate"])
    assert re.search(r"OUT\s+PATH\s", texts["runs"])


# --- 4: every numeric flag range-checked ------------------------------------------------------

RANGE_CASES = [
    (["compare", *TINY, "--seed", "99999999999999999999"], ("--seed=99999999999999999999", "[0, 4294967295]")),
    (["compare", *TINY, "--seed", "-1"], ("--seed=-1",)),
    (["compare", *TINY, "--seq-len", "0"], ("seq_len=0",)),
    (["compare", *TINY, "--seq-len", "-1"], ("seq_len=-1",)),
    (["compare", *TINY, "--heads", "0"], ("heads=0",)),
    (["compare", *TINY, "--head-dim", "-3"], ("head_dim=-3",)),
    (["compare", *TINY, "--block-k", "0"], ("block_k=0",)),
    (["compare", *TINY, "--logit-scale", "nan"], ("--logit-scale=nan", "finite")),
    (["compare", *TINY, "--logit-scale", "inf"], ("--logit-scale=inf", "finite")),
    (["compare", *TINY, "--grad", "--seed", "18446744073709551616"], ("--seed=18446744073709551616",)),
    (["attribute", *TINY, "--seed", "99999999999999999999"], ("--seed=",)),
    (["decode", "--splits", "0"], ("splits=0",)),
    (["decode", "--cache-len", "-1"], ("cache_len=-1",)),
    (["decode", "--seed", "99999999999999999999"], ("--seed=",)),
    (["validate", "--seq-lens", "99999999999999999999"], ("--seq-lens=99999999999999999999", "64 bits")),
    (["validate", "--heads", "0"], ("heads=0",)),
    (["ring", "--kv-heads", "-1"], ("kv_heads=-1",)),
    (["ring", "--kv-heads", "0"], ("kv_heads=0",)),
    (["ring", "--seq-len", "-1"], ("seq_len=-1", "positive")),
    (["ring", "--timeout", "0"], ("timeout=0",)),
    (["ring", "--timeout", "nan"], ("--timeout=nan",)),
    (["spec", "--k", "99999999999999999999"], ("k=99999999999999999999",)),
    (["spec", "--k", "0"], ("k=0",)),
    (["spec", "--vocab", "99999999999999999999"], ("--vocab=",)),
    (["spec-audit", "attnum", "--seed", "-1"], ("--seed=-1",)),
    (["spec-audit", "attnum", "--alpha", "nan"], ("--alpha=nan",)),
    (["fp8-table", "--mla-kv-len", "0"], ("--mla-kv-len=0",)),
    (["fp8-table", "--seq-len", "0"], ("seq_len=0",)),
    (["diverge", "--seeds", "99999999999999999999,1", "--out", "o"], ("--seeds=99999999999999999999",)),
    (["diverge", "--data-seed", "-1", "--out", "o"], ("--data-seed=-1",)),
    (["diverge", "--steps", "0", "--out", "o"], ("steps=0",)),
    (["sweep", "missing.toml", "--out", "o", "--jobs", "99999999999999999999"], ("--jobs=",)),
    (["reproduce", "--jobs", "-5", "--out", "o"], ("--jobs=-5",)),
    (["compare", "--seq-len", "abc"], ("--seq-len",)),  # click's own parse error, one line
    (["compare", "--no-such-flag"], ("No such option",)),
]


def _case_id(args: list[str]) -> str:
    text = " ".join(args)
    return text.replace(" ".join(TINY) + " ", "").replace(" --out o", "")


@pytest.mark.parametrize("args, fragments", RANGE_CASES, ids=[_case_id(a) for a, _ in RANGE_CASES])
def test_numeric_flags_are_range_checked(args, fragments, temp_dir, capsys):
    _one_error_line(capsys, main(args), fragments, temp_dir)


# --- 5: memory estimated before allocating ----------------------------------------------------

MEMORY_CASES = [
    ["compare", "--seq-len", "10000000"],
    ["compare", "--seq-len", "100000", "--grad"],
    ["attribute", "--seq-len", "10000000"],
    ["decode", "--cache-len", "10000000000"],
    ["decode", "--cache-len", "4096", "--page-size", "99999999999999999"],
    ["validate", "--seq-lens", "256,1000000"],
    ["validate", "--seq-lens", "100000", "--eager"],
]


@pytest.mark.parametrize("args", MEMORY_CASES, ids=lambda a: " ".join(a))
def test_too_large_for_memory_is_refused_before_allocating(args, temp_dir, capsys, monkeypatch):
    monkeypatch.setenv("ATTNUM_MEMORY_LIMIT_BYTES", TOO_BIG)
    line = _one_error_line(capsys, main(args), ("needs about", "1 GB is available", "ATTNUM_MEMORY_LIMIT_BYTES"),
                           temp_dir)
    assert "lower --" in line


def test_memory_limit_from_meminfo_and_a_bad_override(monkeypatch):
    from attnum.errors import AttnumEnvironmentError
    from attnum.sweep.memory_budget import available_bytes

    monkeypatch.delenv("ATTNUM_MEMORY_LIMIT_BYTES", raising=False)
    have, source = available_bytes()
    assert have > 0 and ("MemAvailable" in source or "sysconf" in source)
    monkeypatch.setenv("ATTNUM_MEMORY_LIMIT_BYTES", "2.5e9")
    assert available_bytes() == (2_500_000_000, "ATTNUM_MEMORY_LIMIT_BYTES")
    for bad in ("lots", "-1", "0"):
        monkeypatch.setenv("ATTNUM_MEMORY_LIMIT_BYTES", bad)
        with pytest.raises(AttnumEnvironmentError, match="ATTNUM_MEMORY_LIMIT_BYTES"):
            available_bytes()


def test_a_sweep_point_too_large_fails_with_the_one_line(monkeypatch):
    from attnum.studies.paper.point import Point
    from attnum.sweep.point_runner import run_point

    monkeypatch.setenv("ATTNUM_MEMORY_LIMIT_BYTES", TOO_BIG)
    result = run_point(Point(seq_len=1_000_000, heads=8, head_dim=64).config())
    assert result["status"] == "failed" and "AttnumEnvironmentError" in result["error"], result["error"]
    assert "needs about" in result["error"]


_RSS = """
import json, sys
import torch
torch.set_num_threads(1)
from attnum.studies.paper.compare import CompareConfig, run_compare
from attnum.studies.paper.grad_compare import run_grad_compare
from attnum.sweep.memory_budget import backward_bytes, compare_shape, forward_bytes
grad, kw = sys.argv[1] == "grad", json.loads(sys.argv[2])
run = run_grad_compare if grad else run_compare
cfg = CompareConfig(**kw)
def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
run(CompareConfig(**{**kw, "seq_len": 16}))  # warm: lazy init belongs to the baseline
# The peak is reset first (VmHWM := VmRSS): ru_maxrss keeps an earlier transient peak (imports,
# the allocator's slack), under which part of this run's growth would hide.
with open("/proc/self/clear_refs", "w") as fh:
    fh.write("5")
before = status("VmRSS")
run(cfg)
after = status("VmHWM")
est = (backward_bytes if grad else forward_bytes)(compare_shape(cfg))
print(json.dumps({"peak": after - before, "estimate": est}))
"""


@pytest.mark.parametrize("kind, cfg", [
    ("fwd", {"seq_len": 4096, "heads": 4, "head_dim": 64}),
    ("grad", {"seq_len": 1024, "heads": 2, "head_dim": 64}),
], ids=["forward-N4096", "grad-N1024"])
@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux /proc/self/clear_refs to reset the peak RSS")
def test_memory_estimate_is_an_upper_bound_of_measured_peak_rss(kind, cfg):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    res = subprocess.run([sys.executable, "-c", _RSS, kind, json.dumps(cfg)], capture_output=True, text=True,
                         timeout=_paths.HANG_S, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    print(f"{kind} {cfg}: peak RSS growth {got['peak'] / 1e6:.0f} MB, estimate {got['estimate'] / 1e6:.0f} MB")
    # An upper bound, and not absurdly loose (the 40 GB refusals must not refuse what fits).
    assert got["peak"] <= got["estimate"] <= 12 * max(got["peak"], 1)


# --- 6: a non-finite golden value is an error ---------------------------------------------------

@pytest.mark.parametrize("args", [
    ["compare", *TINY, "--logit-scale", "1e308"],
    ["compare", *TINY, "--logit-scale", "1e308", "--json"],
    ["compare", *TINY, "--logit-scale", "1e307", "--grad"],
    ["attribute", *TINY, "--logit-scale", "1e308"],
], ids=["compare", "compare-json", "grad", "attribute"])
def test_non_finite_golden_is_refused(args, temp_dir, capsys):
    _one_error_line(capsys, main(args), ("logit_scale=1e+30", "non-finite", "float64"), temp_dir)


# --- 7: strict JSON -----------------------------------------------------------------------------

def test_compare_json_is_strict_with_nan_and_inf(capsys, monkeypatch):
    fake = {"metrics": {"flash_vs_golden": {"max_abs": float("nan"), "rmse": 1.5}}, "ratio": {"max_abs": float("inf")}}
    monkeypatch.setattr(cli_compare, "run_compare", lambda cfg: fake)
    assert main(["compare", *TINY, "--json"]) == 0
    out = capsys.readouterr().out
    doc = json.loads(out, parse_constant=lambda c: pytest.fail(f"bare {c} in JSON"))
    assert doc["metrics"]["flash_vs_golden"] == {"max_abs": None, "rmse": 1.5, "nonfinite": {"max_abs": "nan"}}
    assert doc["ratio"] == {"max_abs": None, "nonfinite": {"max_abs": "inf"}}


def test_no_cli_module_uses_plain_json_dumps():
    import pathlib

    import attnum.cli

    root = pathlib.Path(attnum.cli.__file__).parent
    offenders = [p.name for p in root.glob("*.py") if "json.dumps(" in p.read_text() and p.name not in ("audit.py",)]
    assert offenders == []


# --- 8: NaN-aware maxima ----------------------------------------------------------------------

def test_diverge_checkpoints_reports_nan_not_a_finite_max(tmp_path, temp_dir, capsys):
    import torch

    a, b = tmp_path / "A", tmp_path / "B"
    a.mkdir(), b.mkdir()
    # 'w' is all NaN in A; 'x' sorts after it and differs by exactly 0.5, so Python's max() over the
    # per-tensor maxima in name order reports 0.5 (and with the NaN tensor last, whatever came first).
    torch.save({"w": torch.full((3,), float("nan")), "x": torch.zeros(4)}, a / "step_000001.pt")
    torch.save({"w": torch.zeros(3), "x": torch.full((4,), 0.5)}, b / "step_000001.pt")
    assert main(["diverge", "--checkpoints", str(a), str(b), "--out", str(tmp_path / "o"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"bare {c}"))
    pair = doc["pairs"][0]
    assert pair["max_abs"] is None and pair["nonfinite"]["max_abs"] == "nan", pair
    assert pair["per_tensor"]["x"]["max_abs"] == 0.5
    written = json.loads((tmp_path / "o" / "checkpoints.json").read_text(), parse_constant=lambda c: pytest.fail(c))
    assert written["pairs"][0]["max_abs"] is None


def test_nan_max_is_order_independent():
    import math

    from attnum.numerics.nanmath import nan_max, nan_min

    assert math.isnan(nan_max([1.0, float("nan")])) and math.isnan(nan_max([float("nan"), 1.0]))
    assert math.isnan(nan_min([0.0, float("nan")])) and nan_max([1.0, 3.0, 2.0]) == 3.0
    assert nan_max([1.0, float("inf")]) == float("inf") and math.isnan(nan_max([]))


# --- 9, 10: progress off a terminal, a spinner on one ---------------------------------------------

def _slow(result, beats):
    def run(*args, **kwargs):
        beats.wait(1)  # the command's Activity printed a heartbeat (however long a loaded machine takes)
        return result

    return run


PROGRESS_CASES = [
    ("validate", "attnum.studies.validation.validate", "run_validate", [], ["validate", "--json"]),
    ("compare --grad", "attnum.studies.paper.grad_compare", "run_grad_compare", {},
     ["compare", *TINY, "--grad", "--json"]),
    ("decode", "attnum.studies.serving.decode", "run_decode", {}, ["decode", "--json"]),
    ("ring", "attnum.studies.parallel.ring_study", "run_ring", {"rows": []}, ["ring", "--json"]),
    ("spec", "attnum.studies.speculative.spec_decode", "run_spec", {}, ["spec", "--json"]),
    ("fp8-table", "attnum.studies.serving.fp8_table", "run_fp8_table", [], ["fp8-table", "--json"]),
    ("diverge", "attnum.studies.training.diverge", "run_diverge", {"headline": {}, "wall_s": 0.5},
     ["diverge", "--json", "--out", "o"]),
    ("diverge --profile bias", "attnum.studies.training.bias.study", "run_bias", {"headline": {}, "wall_s": 0.5},
     ["diverge", "--profile", "bias-tiny", "--workload", "lm", "--json", "--out", "o"]),
]


@pytest.mark.parametrize("title, module, name, result, args", PROGRESS_CASES, ids=[c[0] for c in PROGRESS_CASES])
def test_long_commands_print_plain_progress_off_a_terminal(title, module, name, result, args, temp_dir, capsys,
                                                           monkeypatch):
    import importlib

    from _beats import Beats

    monkeypatch.setenv("ATTNUM_PROGRESS_INTERVAL", "0.1")
    monkeypatch.setattr(importlib.import_module(module), name, _slow(result, Beats(monkeypatch)))
    assert main(args) == 0
    out = capsys.readouterr()
    json.loads(out.out)  # progress never reaches stdout
    lines = out.err.strip().splitlines()
    assert lines and all(line.startswith(f"attnum {title}: ") for line in lines), lines
    assert any("running" in line and "elapsed" in line for line in lines), lines
    assert lines[-1].startswith(f"attnum {title}: finished in "), lines


def test_sweep_progress_off_a_terminal_is_heartbeats_and_failures(monkeypatch):
    import io

    from _beats import wait_until

    from attnum.console.progress import SweepProgress

    monkeypatch.setenv("ATTNUM_PROGRESS_INTERVAL", "0.05")
    log = io.StringIO()  # not a terminal, and not --quiet
    with SweepProgress(total=3, skipped=1, title="t", quiet=False, stream=log) as p:
        p.advance("a", {"status": "done", "wall_s": 0.1})
        wait_until(lambda: ", 1/3, 0 failed, eta " in log.getvalue(), "a heartbeat after the first point")
        p.advance("b", {"status": "failed", "error": "boom", "wall_s": 0.2})
        p.advance("c", {"status": "done", "wall_s": 0.1})
    lines = log.getvalue().splitlines()
    assert lines[0] == "t: 3 points to run, 1 already done (skipped)"
    assert any(line.startswith("attnum t: running, ") and ", 1/3, 0 failed, eta " in line for line in lines), lines
    assert sum(line.startswith("[2/3] b FAILED boom") for line in lines) == 1
    assert not any(" a ok " in line or " c ok " in line for line in lines)  # successes only in heartbeats
    assert lines[-1].startswith("t: 3/3 points in ") and lines[-1].endswith("1 failed")


def test_sweep_progress_on_a_terminal_is_rich_s_bar():
    from attnum.console.progress import SweepProgress

    tty = _Terminal()
    with SweepProgress(total=1, skipped=0, title="t", quiet=False, stream=tty) as p:
        assert p._bar is not None and p._beat is None
        p.advance("a", {"status": "done", "wall_s": 0.1})
    assert "t: 1/1 points in " in tty.buf.getvalue()


class _Terminal:
    """A stream that says it is a terminal."""

    def __init__(self):
        import io

        self.buf = io.StringIO()

    def isatty(self):
        return True

    def write(self, s):
        return self.buf.write(s)

    def flush(self):
        pass


def test_spinner_on_a_terminal_plain_lines_off_it(monkeypatch):
    import io

    from _beats import wait_until

    from attnum.console.progress import Activity

    monkeypatch.setenv("ATTNUM_PROGRESS_INTERVAL", "0.05")
    tty = _Terminal()
    with Activity("validate", spinner=True, stream=tty) as act:
        # live across several redraws (rich's are 80 ms apart, the heartbeat's interval 50 ms): had a heartbeat
        # thread started beside the spinner, its line would have had time to come; on events, not a sleep
        wait_until(lambda: tty.buf.getvalue().count("\r\x1b[2K") >= 4, "four spinner redraws")
    assert act.mode == "spinner" and "running" not in "".join(
        line for line in tty.buf.getvalue().splitlines() if line.startswith("attnum "))
    log = io.StringIO()
    with Activity("validate", spinner=True, stream=log) as act:
        act.update(done=1, total=3, label="bf16 N=256")
        wait_until(lambda: "running" in log.getvalue(), "a heartbeat line in the log")
    assert act.mode == "lines"
    assert "attnum validate: running, 0s elapsed, 1/3, bf16 N=256" in log.getvalue().splitlines()


# --- 11: a disk that refuses a write ------------------------------------------------------------

@pytest.mark.parametrize("code, words", [
    (errno.EROFS, "read-only"), (errno.ENOSPC, "disk is full"), (errno.EACCES, "permission denied"),
    (errno.EDQUOT, "quota"), (errno.EPERM, "not permitted"),
], ids=lambda c: errno.errorcode.get(c, str(c)) if isinstance(c, int) else c)
def test_disk_errors_are_one_line_naming_the_file(code, words, temp_dir, capsys, monkeypatch):
    def refuse(cfg):
        raise OSError(code, os.strerror(code), "/results/out/points.json")

    monkeypatch.setattr(cli_compare, "run_compare", refuse)
    _one_error_line(capsys, main(["compare", *TINY]), ("/results/out/points.json", words, "--out"), temp_dir)


def test_disk_error_in_a_real_write(tmp_path, temp_dir, capsys, monkeypatch):
    """diverge --checkpoints writes checkpoints.json: a full disk there is one line, exit 2."""
    import torch

    a, b = tmp_path / "A", tmp_path / "B"
    a.mkdir(), b.mkdir()
    torch.save({"w": torch.zeros(2)}, a / "m.pt")
    torch.save({"w": torch.ones(2)}, b / "m.pt")
    import attnum.store.outfile

    real = attnum.store.outfile.os.fsync  # outputs are written to a temp file, synced, renamed into place

    def full(fd):
        if os.readlink(f"/proc/self/fd/{fd}").split("/")[-1].startswith(".checkpoints.json."):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd)

    monkeypatch.setattr(attnum.store.outfile.os, "fsync", full)
    _one_error_line(capsys, main(["diverge", "--checkpoints", str(a), str(b), "--out", str(tmp_path / "o")]),
                    ("checkpoints.json", "disk is full", "ENOSPC"), temp_dir)


def test_other_os_errors_stay_internal(temp_dir, capsys, monkeypatch):
    def broken(cfg):
        raise OSError(errno.ECONNREFUSED, "Connection refused")

    monkeypatch.setattr(cli_compare, "run_compare", broken)
    assert main(["compare", *TINY]) == 1
    assert "internal error: ConnectionRefusedError" in capsys.readouterr().err


def test_console_script_one_line_no_traceback(tmp_path):
    """The installed entry point itself, in a fresh process, for the cases of the issue."""
    env = {**os.environ, "ATTNUM_MEMORY_LIMIT_BYTES": TOO_BIG, "TMPDIR": str(tmp_path)}
    script = "import sys; from attnum.cli import main; sys.exit(main(sys.argv[1:]))"
    for args in (["compare", "--seq-len", "10000000"], ["compare", "--seed", "99999999999999999999"],
                 ["compare", *TINY, "--logit-scale", "1e308"]):
        res = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=_paths.HANG_S,
                             env=env)
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, (args, res.stderr)
        assert "Traceback" not in res.stderr and res.stdout == ""


# --- an interrupt says so ------------------------------------------------------------------------

def test_interrupted_command_says_so_on_stderr(temp_dir, capsys, monkeypatch):
    """typer turns a KeyboardInterrupt into Exit(130) silently; the CLI must still say why it stopped."""
    def interrupted(*args, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_compare, "run_compare", interrupted)
    code = main(["compare", *TINY])
    err = capsys.readouterr().err
    assert code == 130, err
    assert err.strip().splitlines()[-1] == "attnum: interrupted"
    assert "Traceback" not in err
