"""Versioned third-party kernel files (issue 40): the pin table, fetch at a version, the checks on every use,
the cache's refusals, concurrent fetches, one version per process, and adapters reading a version's signature."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys

import pytest

from attnum.kernels.wheels import cache as wheel_cache
from attnum.kernels.wheels import signature as sig
from attnum.kernels.wheels import source as wheels
from attnum.kernels.wheels.pins import _parse, table


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNUM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(wheels, "installed", lambda pkg: False)
    monkeypatch.setattr(wheel_cache, "_VERIFIED", {})
    return tmp_path / "cache"


@pytest.fixture
def sage_wheels(tmp_path_factory):
    from _wheel_helpers import pinned_wheel

    return {v: pinned_wheel(tmp_path_factory, "sageattention", v) for v in ("1.0.3", "1.0.6")}


def _put(cache, wheel) -> None:
    import shutil

    (cache / "wheels").mkdir(parents=True, exist_ok=True)
    shutil.copy(wheel, cache / "wheels" / wheel.name)


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0] and "internal error" not in err[0], err
    return err[0]


# ---- the table --------------------------------------------------------------------------------------------

def test_the_pins_of_attnum_0_1_stay_the_defaults():
    assert {p: pkg.default for p, pkg in table().items()} == {
        "sglang": "0.5.3", "vllm": "0.33.0", "sageattention": "1.0.6", "flashinfer": "0.7.2.post1",
        "ring-flash-attn": "0.1.8", "fla": "0.6.0"}
    # vLLM's kernel files moved between versions: the table says where each version keeps them
    assert wheels.wheel("vllm", "0.13.0").paths[0].startswith("vllm/attention/ops/")
    assert wheels.wheel("vllm", "0.30.0").paths[0].startswith("vllm/v1/attention/ops/")
    assert wheels.wheel("sglang", "0.5.23").paths[0].startswith("sglang/kernels/ops/attention/")


@pytest.mark.parametrize("doctored, what", [
    ('sha256 = "abc"', "64 hex digits"),
    ('default = "9.9"', "default"),
    ('"../evil.py" = "' + "0" * 64 + '"', "relative .py path"),
])
def test_a_malformed_table_is_refused_as_it_loads(doctored, what):
    text = ('[p]\ndefault = "1.0"\n[p.versions."1.0"]\nwheel = "p-1.0-py3-none-any.whl"\nsize = 1\n'
            f'sha256 = "{"a" * 64}"\n[p.versions."1.0".files]\n"p/k.py" = "{"b" * 64}"\n')
    assert _parse(text)["p"].versions["1.0"].paths == ("p/k.py",)
    if doctored.startswith("sha256"):
        text = text.replace(f'sha256 = "{"a" * 64}"', doctored)
    elif doctored.startswith("default"):
        text = text.replace('default = "1.0"', doctored)
    else:
        text += doctored + "\n"
    with pytest.raises(ValueError, match=what):
        _parse(text)


# ---- bad input: one line, exit 2 or 3, nothing written ----------------------------------------------------

def test_a_version_with_no_wheel_is_one_line_exit_2_listing_the_pinned_ones(cache, capsys):
    from attnum.cli import main

    assert main(["kernels", "fetch", "vllm@9.9.9"]) == 2
    line = _one_line(capsys)
    assert "vllm@9.9.9" in line and "0.30.0" in line and "0.33.0" in line, line
    assert main(["kernels", "fetch", "vllm@"]) == 2
    _one_line(capsys)
    assert main(["audit", "vllm-unified@9.9.9", "--probes", "scale-argument"]) == 2
    assert "0.31.0" in _one_line(capsys)
    assert main(["audit", "torch-sdpa@2.0", "--probes", "scale-argument"]) == 2
    assert "installed" in _one_line(capsys)
    assert not cache.exists()


def test_a_cache_that_is_a_file_is_one_line_not_a_traceback(tmp_path, monkeypatch, capsys):
    """Before: NotADirectoryError, exit 1 (an internal error) for both."""
    from attnum.cli import main

    monkeypatch.setattr(wheels, "installed", lambda pkg: False)
    (tmp_path / "cachefile").write_text("")
    monkeypatch.setenv("ATTNUM_CACHE", str(tmp_path / "cachefile"))
    assert main(["kernels", "fetch", "ring-flash-attn"]) == 3
    assert "not a folder" in _one_line(capsys)
    (tmp_path / "c2").mkdir()
    (tmp_path / "c2" / "wheels").write_text("")
    monkeypatch.setenv("ATTNUM_CACHE", str(tmp_path / "c2"))
    assert main(["kernels", "fetch", "ring-flash-attn"]) == 3
    line = _one_line(capsys)
    assert "wheels is a file" in line and "rm " in line, line
    (tmp_path / "c2" / "wheels").unlink()
    if (tmp_path / "c2" / "src").is_dir():
        (tmp_path / "c2" / "src").rmdir()
    (tmp_path / "c2" / "src").write_text("")
    assert main(["kernels", "fetch", "ring-flash-attn"]) == 3
    assert "src is a file" in _one_line(capsys)
    assert wheels.missing("ring-flash-attn")  # and nothing to run


def test_a_wheel_whose_file_is_not_the_pinned_one_is_refused_and_nothing_is_written(cache, sage_wheels, monkeypatch,
                                                                                     capsys):
    """A doctored table (one kernel file's sha256 changed): the verified wheel's member does not match it."""
    import dataclasses

    from attnum.cli import main

    w = table()["sageattention"].versions["1.0.3"]
    bad = dataclasses.replace(w, files=((w.files[0][0], "0" * 64), *w.files[1:]))
    doctored = {**table(), "sageattention": dataclasses.replace(
        table()["sageattention"], versions={**table()["sageattention"].versions, "1.0.3": bad})}
    monkeypatch.setattr(wheels, "table", lambda: doctored)
    _put(cache, sage_wheels["1.0.3"])
    assert main(["kernels", "fetch", "sageattention@1.0.3"]) == 3
    line = _one_line(capsys)
    assert w.files[0][0] in line and "not the pinned file" in line, line
    assert not wheels.source_dir("sageattention", "1.0.3").exists()
    assert [p.name for p in (cache / "src").iterdir() if not p.name.startswith(".")] == []  # no tree, half or whole


def test_fetch_at_a_version_keeps_only_the_kernel_files_and_checks_them_on_every_use(cache, sage_wheels, capsys):
    from attnum.cli import main

    _put(cache, sage_wheels["1.0.3"])
    assert main(["kernels", "fetch", "sageattention@1.0.3"]) == 0
    dest = wheels.source_dir("sageattention", "1.0.3")
    assert str(dest) in capsys.readouterr().out
    assert not (cache / "wheels" / sage_wheels["1.0.3"].name).exists()  # the wheel is deleted once extracted
    got = sorted(str(p.relative_to(dest)) for p in dest.rglob("*.py"))
    assert got == sorted(wheels.wheel("sageattention", "1.0.3").paths)  # no __init__.py, nothing else
    assert wheels.missing("sageattention", "1.0.3") == ""
    assert wheels.missing("sageattention").startswith("sageattention 1.0.6 is neither")  # the default is apart
    # the trust anchor is the table: a file edited in the cache is refused at the next use
    wheel_cache._VERIFIED.clear()
    core = dest / "sageattention" / "core.py"
    core.write_text(core.read_text().replace("seq_len should be", "seq_len shall be"))
    assert "differs from the pinned file" in wheels.missing("sageattention", "1.0.3")
    assert main(["kernels", "list"]) == 0


# ---- concurrency ------------------------------------------------------------------------------------------

def _fetch_in_child(env_cache: str, q) -> None:
    import os

    os.environ["ATTNUM_CACHE"] = env_cache
    try:
        wheels.fetch("sageattention", "1.0.3", quiet=True)
        q.put(wheels.missing("sageattention", "1.0.3") or "ok")
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        q.put(f"{type(exc).__name__}: {exc}")


def _extract_in_child(root, wheel, dest, q) -> None:
    try:
        wheel_cache.extract(root, wheel, wheels.wheel("sageattention", "1.0.3").files, dest, "fix")
        q.put("ok")
    except BaseException as exc:  # noqa: BLE001
        q.put(f"{type(exc).__name__}: {exc}")


def test_six_concurrent_fetches_re_extracting_an_edited_tree_all_succeed(cache, sage_wheels):
    """Before: `OSError: Directory not empty` in 1 to 6 of 48."""
    ctx = multiprocessing.get_context("fork")
    dest = wheels.source_dir("sageattention", "1.0.3")
    for _round in range(8):
        if dest.exists():
            core = dest / "sageattention" / "core.py"
            core.write_text(core.read_text() + f"\n# edited {_round}\n")
        _put(cache, sage_wheels["1.0.3"])
        q = ctx.Queue()
        procs = [ctx.Process(target=_fetch_in_child, args=(str(cache), q)) for _ in range(6)]
        for p in procs:
            p.start()
        got = [q.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(60)
        assert got == ["ok"] * 6, got
    wheel_cache._VERIFIED.clear()
    assert wheels.missing("sageattention", "1.0.3") == ""


def test_concurrent_extractions_without_a_lock_keep_a_verified_tree(cache, sage_wheels):
    """The rename itself is safe where flock is missing: six extractions at once, none fails, one tree wins."""
    ctx = multiprocessing.get_context("fork")
    dest = cache / "src" / "sage-race"
    for _round in range(4):
        q = ctx.Queue()
        procs = [ctx.Process(target=_extract_in_child, args=(cache, sage_wheels["1.0.3"], dest, q)) for _ in range(6)]
        for p in procs:
            p.start()
        got = [q.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(60)
        assert got == ["ok"] * 6, got
        assert wheel_cache.tree_problem(cache, wheels.wheel("sageattention", "1.0.3").files, dest, "fix") == ""
    assert [p.name for p in (cache / "src").iterdir()] == ["sage-race"]  # no temporary folder left


# ---- one version per process ------------------------------------------------------------------------------

@pytest.mark.slow  # a subprocess and an isolated audit, about 25 s here
def test_a_second_version_in_one_process_is_refused_in_one_line(cache, sage_wheels):
    for v in ("1.0.3", "1.0.6"):
        _put(cache, sage_wheels[v])
        wheels.fetch("sageattention", v, quiet=True)
    code = (
        "from attnum.kernels.registry import resolve\n"
        "from attnum.kernels.wheels import source as w\n"
        "t = resolve('sage1-triton@1.0.3', 'cpu')\n"
        "assert t.available, t.reason\n"
        "w.load('sageattention', 'sageattention.core')\n"
        "assert w._LOADED == {'sageattention': '1.0.3'}\n"
        "try:\n"
        "    resolve('sage1-triton', 'cpu')\n"
        "except Exception as e:\n"
        "    print(type(e).__name__, e)\n"
        "try:\n"
        "    w.load('sageattention', 'sageattention.core', '1.0.6')\n"
        "except Exception as e:\n"
        "    print(type(e).__name__, e)\n"
        "from attnum.audit.config import AuditConfig\n"
        "from attnum.audit.runner import run_audit\n"
        "r = run_audit(AuditConfig(target='sage1-triton@1.0.6', probes='shape-contract', dtypes='fp16'))\n"
        "print('ISOLATED', r.available, sorted({c.verdict.status for x in r.results for c in x.cases}))\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "ATTNUM_CACHE": str(cache)})
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.strip().splitlines()
    # an isolated audit of another version from this process: its kernel server holds 1.0.6 (whose phantom keys
    # fail shape-contract's non-causal cases and whose causal ones read K_scale past its end; 1.0.3, held here,
    # refuses every one of its cases: q_len < 128)
    head, available, statuses = lines.pop().split(" ", 2)
    assert (head, available) == ("ISOLATED", "True") and {"fail", "out of bounds"} <= set(eval(statuses)), run.stdout
    assert len(lines) == 2 and all(line.startswith("AttnumEnvironmentError sageattention 1.0.6 cannot run") for line
                                   in lines), lines
    assert "already imported sageattention 1.0.3" in lines[0]


# ---- adapters read a version's signature ------------------------------------------------------------------

def test_an_adapter_refuses_a_signature_it_cannot_call_in_one_line(cache, sage_wheels):
    _put(cache, sage_wheels["1.0.3"])
    wheels.fetch("sageattention", "1.0.3", quiet=True)
    ok = sig.Call(leaf="core", function="sageattn", positional=("q", "k", "v"), keywords=("is_causal",))
    assert sig.problem("sageattention", "1.0.3", ok) == ""
    moved = sig.Call(leaf="core", function="sageattn", positional=("q", "k", "v", "tensor_layout"))
    assert "signature changed" in sig.problem("sageattention", "1.0.3", moved)  # 1.0.4 inserted it 4th
    assert "takes no tensor_layout" in sig.problem("sageattention", "1.0.3", sig.Call(
        leaf="core", function="sageattn", keywords=("tensor_layout",)))
    assert "requires q, k, v" in sig.problem("sageattention", "1.0.3", sig.Call(leaf="core", function="sageattn"))
    assert "ships no attn_qk_int8_per_block.py" in sig.problem("sageattention", "1.0.3", sig.Call(
        leaf="attn_qk_int8_per_block", function="forward"))  # 1.0.3 has one kernel file per head dim
    assert "defines no nothing()" in sig.problem("sageattention", "1.0.3", sig.Call(leaf="core", function="nothing"))


@pytest.mark.parametrize("target, version, why", [
    ("vllm-mla-decode", "0.13.0", "takes no is_mla"),
    ("vllm-unified", "0.13.0", ""), ("vllm-unified", "0.30.0", ""), ("sglang-extend", "0.5.23", ""),
    ("sglang-decode", "0.5.23", ""), ("vllm-triton-merge", "0.25.1", ""),
])
def test_every_built_in_target_states_whether_it_can_call_a_version(target, version, why):
    """Against the default cache's files (fetched by the corpus runs; skipped where they are not)."""
    from attnum.kernels.registry import KERNELS, kernel_status

    pkg = KERNELS[target].source
    if wheels.missing(pkg, version):
        pytest.skip(f"{pkg} {version} is not fetched here ({wheels.missing(pkg, version)[:80]})")
    ok, reason = kernel_status(target, "cpu", version)
    assert ok == (not why) and why in reason, reason
