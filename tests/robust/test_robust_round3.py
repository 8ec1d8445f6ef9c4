"""Nothing lost, nothing forged, round 3 (issue 19): outputs never overwrite what attnum does not own,
user code cannot forge a pass or escape the kill, small inputs cannot ask for unbounded work, user
strings are data, the store says what it is, and the API's edge shapes are answered, not crashed on.

Each test is one attack of the issue (the replay script runs the same ones end to end).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import _paths
import pytest
import torch
from _sweep_helpers import cli, cli_env

from attnum.errors import AttnumEnvironmentError, AttnumInputError
from attnum.store.db import DB_NAME, SCHEMA_VERSION, Store
from attnum.store.lock import LOCK_NAME


def _store(folder: Path, keys=("a", "b", "c"), name: str = "tiny") -> Path:
    """A bound store with planned points (a and b done), written through the API: no sweep needed."""
    with Store(folder, command="attnum sweep run[/tmp]") as s:
        s.bind_spec(name=name, spec_hash="h1", canonical={"name": name}, source="spec.toml")
        s.plan((k, "compare", ("g",), {"seed": i}) for i, k in enumerate(keys))
        rid = s.begin_run(command="attnum sweep run[/tmp]", n_todo=len(keys), executor="local", jobs=1)
        for k in keys[:2]:
            s.write({"key": k, "status": "done", "metrics": {"m": {"max_abs": 1.0}}, "env": {"torch": "x"}}, rid)
        s.end_run(rid, "complete")
    return folder


def _one_line(capsys, code_line: str = "attnum: error: ") -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(code_line) and "Traceback" not in err, err
    return lines[0]


# ---- outputs ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", [DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm", LOCK_NAME])
def test_export_never_writes_over_the_store_its_wal_or_its_lock(name, tmp_path, capsys):
    out = _store(tmp_path / "out")
    before = (out / DB_NAME).read_bytes()
    assert cli("export", out, "-o", out / name) == 2
    assert "bookkeeping" in _one_line(capsys)
    assert (out / DB_NAME).read_bytes() == before and cli("runs", out) == 0


def test_export_is_written_whole_a_failure_leaves_the_old_file(tmp_path, monkeypatch, capsys):
    import csv

    out = _store(tmp_path / "out")
    target = tmp_path / "points.csv"
    target.write_text("the good old export\n")

    def broken_writerows(self, rows):
        raise OSError(28, "No space left on device")  # a disk that fills in mid-write

    monkeypatch.setattr(csv.DictWriter, "writerows", broken_writerows)
    assert cli("export", out, "-o", target) == 2
    assert "disk is full" in _one_line(capsys)
    assert target.read_text() == "the good old export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "points.csv"]  # no temp file left


def test_an_output_that_is_a_link_is_replaced_never_written_through(tmp_path):
    out = _store(tmp_path / "out")
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    (tmp_path / "x.csv").symlink_to(precious)
    assert cli("export", out, "-o", tmp_path / "x.csv") == 0
    assert precious.read_text() == "keep me" and not (tmp_path / "x.csv").is_symlink()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_an_output_that_is_a_device_is_written_in_place_never_replaced(tmp_path, capsys):
    """Renaming a temp file over /dev/full would replace the device node itself (it did, once)."""
    import stat

    out = _store(tmp_path / "out")
    assert cli("export", out, "-o", "/dev/full") == 2
    assert "disk is full" in _one_line(capsys)
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)
    assert cli("export", out, "-o", "/dev/null") == 0 and stat.S_ISCHR(os.stat("/dev/null").st_mode)


@pytest.mark.parametrize("argv", [["export", "{out}", "-o", ""], ["sweep", "s.toml", "--out", ""],
                                  ["diverge", "--checkpoints", "", "b"], ["audit", "torch-sdpa", "--html", ""]])
def test_an_empty_path_is_refused(argv, tmp_path, capsys):
    assert cli(*[a.format(out=tmp_path) for a in argv]) == 2
    assert "=''" in _one_line(capsys)


def test_report_where_figures_is_a_file_is_one_line(tmp_path, capsys):
    out = _store(tmp_path / "out")
    (out / "figures").write_text("not a folder")
    assert cli("report", out) == 2
    assert "figures" in _one_line(capsys)


# ---- the lock -----------------------------------------------------------------------------------------

def test_a_lock_that_is_a_link_is_refused_and_its_target_untouched(tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("21 bytes of user data")
    (folder / LOCK_NAME).symlink_to(victim)
    with pytest.raises(AttnumEnvironmentError, match="symbolic link") as err:
        Store(folder)
    assert "\n" not in str(err.value) and victim.read_text() == "21 bytes of user data"
    (folder / LOCK_NAME).unlink()
    os.link(victim, folder / LOCK_NAME)  # a hard link is another name for the user's file
    with pytest.raises(AttnumEnvironmentError, match="hard link"):
        Store(folder)
    assert victim.read_text() == "21 bytes of user data"


def test_a_released_lock_is_removed(tmp_path):
    out = _store(tmp_path / "out")
    assert sorted(p.name for p in out.iterdir()) == [DB_NAME]  # no attnum.lock left behind


# ---- the store says what it is ------------------------------------------------------------------------

def test_a_newer_schema_is_refused_for_reading_and_writing(tmp_path, capsys):
    out = _store(tmp_path / "out")
    con = sqlite3.connect(out / DB_NAME)
    con.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (str(int(SCHEMA_VERSION) + 1),))
    con.commit()
    con.close()
    before = (out / DB_NAME).read_bytes()
    for argv in (["runs", out], ["export", out, "-o", tmp_path / "e.csv"]):
        assert cli(*argv) == 2
        line = _one_line(capsys)
        assert f"schema version {int(SCHEMA_VERSION) + 1}" in line and f"({SCHEMA_VERSION})" in line
    with pytest.raises(AttnumEnvironmentError, match="newer"):
        Store(out)  # resuming into it
    assert (out / DB_NAME).read_bytes() == before


@pytest.mark.parametrize("table, column, value, field", [
    ("planned", "config", "[]", "config"), ("points", "metrics", '"x"', "metrics"),
    ("planned", "groups", "[1]", "groups"), ("points", "metrics", "{not json", "metrics"),
    ("points", "wall_s", "'slow'", "wall_s")])
def test_a_row_of_the_wrong_shape_is_reported_and_skipped(table, column, value, field, tmp_path, capsys):
    out = _store(tmp_path / "out")
    con = sqlite3.connect(out / DB_NAME)
    literal = value if value.startswith("'") else "'" + value.replace("'", "''") + "'"
    con.execute(f"UPDATE {table} SET {column} = {literal} WHERE key = 'a'")
    con.commit()
    con.close()
    assert cli("export", out, "-o", tmp_path / "e.csv") == 0
    err = capsys.readouterr().err
    assert f"{out / DB_NAME}: row 1 (key 'a'): field {field}" in err and "Traceback" not in err, err
    keys = [ln.split(",")[0] for ln in (tmp_path / "e.csv").read_text().splitlines()[1:]]
    assert keys == ["b", "c"]


# ---- user strings are data ---------------------------------------------------------------------------

def test_rich_markup_in_names_commands_and_paths_is_printed_as_is(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")  # one line per row: nothing folded
    out = _store(tmp_path / "results[v2]", name="t[/]iny")
    assert cli("runs", out) == 0
    text = capsys.readouterr().out
    assert "t[/]iny" in text and f"in {out}" in text and "attnum sweep run[/tmp]" in text


def test_audit_of_a_target_whose_path_has_markup(tmp_path, capsys):
    where = tmp_path / "k["
    where.mkdir()
    (where / "]ern.py").write_text("import torch.nn.functional as F\n"
                                   "def attention(q, k, v, **kw):\n"
                                   "    return F.scaled_dot_product_attention(q, k, v, **kw)\n")
    target = f"{where / ']ern.py'}:attention"
    assert cli("audit", target, "--dtype", "fp32", "--probes", "scale-argument", "--no-isolate") == 0
    assert "PASSED" in capsys.readouterr().out


# ---- user code cannot forge a pass or escape ----------------------------------------------------------

def _sampler(tmp_path: Path, at_import: str = "", in_call: str = "") -> str:
    path = tmp_path / "sampler.py"
    path.write_text(textwrap.dedent(f"""
        import os, sys, time
        from attnum.sampling import reference_sampler
        {at_import}
        def sampler(p, q, d, generator=None):
            {in_call or 'pass'}
            return reference_sampler(p, q, d, generator=generator)
    """))
    return f"{path}:sampler"


def _spec_audit(target: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "attnum", "spec-audit", target, "--cases", "dirichlet",
                           "--samples", "2000", "--json", *extra], capture_output=True, text=True,
                          env=cli_env(), timeout=_paths.HANG_S)


@pytest.mark.parametrize("at_import, in_call, status", [
    ("sys.exit(0)", "", "exited: the process exited with code 0 while importing"),
    ("", "os._exit(0)", "exited: the process exited with code 0, in the sampler's call"),
    ("", "import ctypes; ctypes.string_at(0)", "crashed: killed by SIGSEGV"),
    ("", "time.sleep(600)", "timed out: no answer within 20 s"),
])
def test_spec_audit_never_passes_what_did_not_run(at_import, in_call, status, tmp_path):
    p = _spec_audit(_sampler(tmp_path, at_import, in_call), "--timeout", "20")  # healthy calls, loaded machine
    doc = json.loads(p.stdout)
    assert p.returncode == 1 and doc["verdict"] == "fail", (p.returncode, p.stdout, p.stderr[-400:])
    assert status in doc["cases"][0]["error"]


def _setsid_grandchild(pidfile: Path) -> str:
    """Code that leaves a grandchild in its own session (setsid) holding every inherited fd, then exits."""
    return (f"if os.fork() == 0:\n"
            f"    os.setsid()\n"
            f"    open({str(pidfile)!r}, 'w').write(str(os.getpid()))\n"
            f"    time.sleep(600)\n"
            f"time.sleep(1)\n"
            f"os._exit(3)")


def _alive(pidfile: Path) -> bool:
    pid = int(pidfile.read_text())
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the process tree is read from /proc")
def test_a_setsid_grandchild_neither_escapes_nor_holds_the_result_pipe(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    body = textwrap.indent(_setsid_grandchild(pidfile), "    ")
    (tmp_path / "t.py").write_text(f"import os, time\nimport torch.nn.functional as F\n"
                                   f"def attention(q, k, v, **kw):\n{body}\n")
    p = subprocess.run([sys.executable, "-m", "attnum", "audit", f"{tmp_path / 't.py'}:attention", "--dtype",
                        "fp32", "--probes", "scale-argument", "--timeout", "60", "--json"],
                       capture_output=True, text=True, env=cli_env(), timeout=_paths.HANG_S)
    doc = json.loads(p.stdout)
    assert p.returncode == 1 and doc["probes"][0]["verdict"] == "exited", p.stdout[-600:]
    # "exited", not "timed out: no answer within 60 s": the child's exit was seen when it happened
    assert not _alive(pidfile)  # killed with the tree, although it left the session


def test_sys_exit_from_code_a_command_ran_is_never_exit_0(monkeypatch, capsys):
    import attnum.report.export as export

    def user_code(*a, **kw):
        raise SystemExit(0)

    monkeypatch.setattr(export, "export_points", user_code)
    assert cli("export", "anything") == 1
    assert "sys.exit(0)" in _one_line(capsys)


def test_the_audit_modules_import_no_circle():
    """runner -> isolate -> engine and runner -> engine; neither isolate nor engine imports runner."""
    import ast

    import attnum

    def imports(name: str) -> set[str]:
        tree = ast.parse((Path(attnum.__file__).parent / "audit" / f"{name}.py").read_text())
        out = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                out |= {a.name for a in node.names}
        return out

    assert "attnum.audit.runner" not in imports("isolate") | imports("engine")
    assert "attnum.audit.isolate" not in imports("engine")
    assert "attnum.audit.isolate" in imports("runner")


# ---- bounded work -------------------------------------------------------------------------------------

def test_a_huge_spec_is_refused_before_any_point_is_built(tmp_path, monkeypatch):
    import attnum.sweep.spec as spec_mod

    built = []
    monkeypatch.setattr(spec_mod, "_make_points", lambda cfg: built.append(cfg) or ())
    text = (f'name = "big"\n[axes]\nformat = ["bf16", "fp16"]\nseq_len = {list(range(16, 1016))}\n'
            f"seed = {list(range(5000))}\n")  # 10**7 points in 30 KB
    (tmp_path / "big.toml").write_text(text)
    with pytest.raises(AttnumInputError, match="at most 200000 points"):
        spec_mod.load_spec(tmp_path / "big.toml")
    assert built == []


def _bombs() -> dict[str, object]:
    shared = {"t": torch.ones(1)}
    for _ in range(20):  # 2**20 paths through 20 dicts
        shared = {"a": shared, "b": shared}
    cyclic = {"t": torch.ones(1)}
    cyclic["self"] = cyclic
    deep = torch.ones(1)
    for _ in range(100):
        deep = {"k": deep}
    return {"shared": (shared, "reached twice"), "cyclic": (cyclic, "reached twice"),
            "deep": (deep, "nested deeper"), "stride0": ({"w": torch.ones(1).expand(10**9)}, "claims"),
            "many-views": ({f"w{i}": torch.ones(4096)[:] for i in range(1)} |
                           {"big": torch.zeros(1 << 16)}, None)}


@pytest.mark.parametrize("kind", ["shared", "cyclic", "deep", "stride0", "many-views"])
def test_checkpoint_loading_is_bounded(kind, tmp_path):
    from attnum.studies.training.checkpoints import load_state

    obj, refusal = _bombs()[kind]
    path = tmp_path / "m.pt"
    torch.save(obj, path)
    if refusal is None:
        assert set(load_state(path)) == set(obj)
        return
    with pytest.raises(AttnumInputError, match=refusal):
        load_state(path)


# ---- small ones ---------------------------------------------------------------------------------------

def test_policy_overrides_in_another_order_are_the_same_spec_and_duplicates_are_refused():
    from attnum.sweep.spec import spec_from_dict

    def spec(policy):
        return spec_from_dict({"name": "p", "axes": {"format": ["bf16"], "policy": [policy], "seq_len": [32]}})

    assert spec("fa2,acc=fp32,out=fp32").spec_hash == spec("fa2, out=fp32,acc=fp32").spec_hash
    with pytest.raises(AttnumInputError, match="fa2,acc=fp16,acc=fp32"):
        spec("fa2,acc=fp16,acc=fp32")
    from attnum.numerics.policy import parse_policy

    with pytest.raises(AttnumInputError, match="given twice"):
        parse_policy("fa2:bf16,acc=fp16,acc=fp32")


# ---- the API's edge shapes ----------------------------------------------------------------------------

def _impls():
    from attnum.attention.baseline import baseline_attention
    from attnum.attention.flash import flash_attention
    from attnum.attention.golden import golden_attention

    return {"golden": golden_attention, "baseline": baseline_attention,
            "flash": lambda *a, **kw: flash_attention(*a, block_q=4, block_k=4, **kw)}


@pytest.mark.parametrize("impl", ["golden", "baseline", "flash"])
def test_numpy_scalars_are_numbers_and_booleans(impl):
    import numpy as np

    q, k, v = torch.randn(1, 1, 4, 8), torch.randn(1, 1, 5, 8), torch.randn(1, 1, 5, 8)
    a = _impls()[impl](q, k, v, is_causal=np.bool_(True), scale=np.float32(0.5))
    b = _impls()[impl](q, k, v, is_causal=True, scale=0.5)
    assert torch.equal(a, b)


@pytest.mark.parametrize("impl", ["golden", "baseline", "flash"])
def test_no_queries_give_an_empty_result(impl):
    q, k, v = torch.randn(2, 2, 0, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 6)
    out = _impls()[impl](q, k, v, is_causal=True)
    assert out.shape == (2, 2, 0, 6)


@pytest.mark.parametrize("impl", ["golden", "baseline", "flash"])
@pytest.mark.parametrize("change, param", [
    ({"q": torch.randn(1, 1, 4, 0), "k": torch.randn(1, 1, 5, 0)}, "head dim"),
    ({"attn_mask": torch.zeros(1, 1, 1, 4, 5)}, "attn_mask"),
    ({"window": (2**62, 0)}, "window"),
    ({"window": (10**30, 0)}, "window"),
    ({"is_causal": "no"}, "is_causal"),
    ({"is_causal": 1}, "is_causal"),
    ({"scale": "a"}, "scale"),
    ({"scale": True}, "scale"),
    ({"scale": float("nan")}, "scale"),
    ({"q": torch.randn(1, 1, 4, 8, device="meta")}, "devices"),
])
def test_impossible_sizes_ranks_and_types_name_the_parameter(impl, change, param):
    args = {"q": torch.randn(1, 1, 4, 8), "k": torch.randn(1, 1, 5, 8), "v": torch.randn(1, 1, 5, 8), **change}
    with pytest.raises(AttnumInputError, match=param):
        _impls()[impl](args.pop("q"), args.pop("k"), args.pop("v"), **args)


def test_no_queries_inside_a_model_under_shadow():
    import torch.nn.functional as F

    import attnum

    q, k, v = torch.randn(1, 2, 0, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    for candidate in ("torch-sdpa", "baseline:uniform:bf16", "flash:fa2:bf16"):
        with attnum.shadow(candidate=candidate, reference="golden") as rec:
            out = F.scaled_dot_product_attention(q, k, v)
        assert out.shape == (1, 2, 0, 8) and len(rec.records) == 1
