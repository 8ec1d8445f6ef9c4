"""Attacks on the surfaces of issue 42's turn (its last item): the bug corpus and versioned fetches, the address
checks of interpreted Triton kernels, the fingerprint's new families and options. Each test is a failure found
by attacking them, and fails on the code before its fix; scripts/replay_attacks.py (section ``round7``, the
``surfaces:`` entries) runs the same ones end to end."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
import textwrap

import _paths
import pytest

from attnum.cli import main
from attnum.errors import AttnumEnvironmentError, AttnumInputError

pytestmark = pytest.mark.usefixtures("one_thread")


def _env(**extra) -> dict[str, str]:
    from _sweep_helpers import cli_env

    return {**cli_env(), **extra}


def _one_line_error(capfd, argv: list[str], code: int = 2) -> str:
    assert main(argv) == code
    out, err = capfd.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnum: error:") and "Traceback" not in err, err
    return lines[0]


# ---- versioned targets ------------------------------------------------------------------------------------

def test_an_empty_version_is_refused_not_run_as_the_default(capfd):
    """``vllm-unified@`` ran the pinned default under a name that says no version (``kernels fetch vllm@`` is
    refused); now one line listing the versions, before any work."""
    from attnum.kernels.registry import split_version

    with pytest.raises(AttnumInputError, match="vllm-unified@VERSION"):
        split_version("vllm-unified@")
    line = _one_line_error(capfd, ["audit", "vllm-unified@", "--probes", "odd-lengths", "--dtype", "fp16"])
    assert "target='vllm-unified@'" in line and "0.30.0" in line


@pytest.mark.network
def test_a_target_resolved_at_one_version_runs_that_version_after_another_is_resolved(tmp_path, tmp_path_factory):
    """Resolving ``sage1-triton@1.0.3`` then ``sage1-triton@1.0.6`` in one process and calling the first ran
    1.0.6's files under 1.0.3's name (the adapters load the version chosen last). Now each resolved target runs
    its own version, and the other, called after, is refused in one line."""
    import shutil

    from _wheel_helpers import pinned_wheel

    cache = tmp_path / "cache"
    (cache / "wheels").mkdir(parents=True)
    for v in ("1.0.3", "1.0.6"):
        w = pinned_wheel(tmp_path_factory, "sageattention", v)
        shutil.copy(w, cache / "wheels" / w.name)
    code = textwrap.dedent("""
        import torch
        from attnum.kernels.registry import resolve
        from attnum.kernels.wheels import source as w
        for v in ("1.0.3", "1.0.6"):
            w.fetch("sageattention", v, quiet=True)
        old = resolve("sage1-triton@1.0.3", "cpu", numerics="raw")
        new = resolve("sage1-triton@1.0.6", "cpu", numerics="raw")
        q = torch.randn(1, 1, 8, 64, dtype=torch.float16)
        try:
            old.fn(q, q, q)  # 1.0.3 refuses q_len < 128 (its assert), after loading its files
        except NotImplementedError:
            pass
        print("LOADED", w._LOADED["sageattention"])
        try:
            new.fn(q, q, q)
            print("SECOND RAN")
        except Exception as e:
            print("SECOND", type(e).__name__, e)
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=_paths.HANG_S,
                         env=_env(ATTNUM_CACHE=str(cache), PYTHONWARNINGS="ignore"))
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.strip().splitlines()
    assert lines[0] == "LOADED 1.0.3", lines
    assert lines[1].startswith("SECOND AttnumEnvironmentError sageattention 1.0.6 cannot run in this process"), lines


def test_a_cache_that_cannot_be_written_is_one_line_naming_attnum_cache(tmp_path, monkeypatch):
    """A read-only ``$ATTNUM_CACHE`` ended ``kernels fetch`` with the disk error's advice to choose another
    ``--out/-o`` (which fetch has not) and ``bugs run`` in a PermissionError; now one line naming ATTNUM_CACHE."""
    from attnum.kernels.wheels import cache as wheel_cache
    from attnum.kernels.wheels import source as wheels

    monkeypatch.setenv("ATTNUM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(wheels, "installed", lambda pkg: False)

    def denied(root, path, fix):  # what mkdir does in a folder the user cannot write (root ignores chmod)
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(wheel_cache, "ensure_dir", denied)
    with pytest.raises(AttnumEnvironmentError, match="ATTNUM_CACHE") as err:
        wheels.fetch("ring-flash-attn", quiet=True)
    assert "Permission denied" in str(err.value) and "attnum kernels fetch ring-flash-attn" in str(err.value)


# ---- attnum bugs --------------------------------------------------------------------------------------

def _bug_store(folder, *, metrics: dict, name: str = "bugs"):
    """A results store holding one done bug-case row with ``metrics`` (as a hand-edited store may), or an
    empty store of another spec (``name``)."""
    from attnum.audit.bugs.point import BugPoint
    from attnum.store.db import Store

    p = BugPoint(case="ring-flash-attn-update-out-and-lse-nan", role="broken", target="ring-flash-attn-merge@0.1.8",
                 probes=("merge-empty-chain",))
    with Store(folder, command="test") as store:
        store.bind_spec(name=name, spec_hash=f"{name}-hash", canonical={"name": name}, source="test")
        if name != "bugs":
            return
        store.plan([(p.key, p.kind, ("bugs",), p.config())])
        run = store.begin_run(command="test", n_todo=1, executor="local", jobs=1)
        store.write({"key": p.key, "status": "done", "metrics": metrics, "error": None, "started_at": 0.0,
                     "wall_s": 1.0, "env": {"attnum": "test"}, "worker": "test"}, run)
        store.end_run(run, "complete")


@pytest.mark.parametrize("metrics", [{"x": 1}, {"verdict": "caught"}, {"verdict": "caught", "line": "l",
                                                                        "other_failing": "merge-two-empty"}],
                         ids=["no-verdict", "no-line", "other-failing-a-string"])
def test_report_on_a_hand_edited_bug_store_skips_the_row_with_a_warning(tmp_path, capfd, metrics):
    """A done bug-case row without a verdict (or its line) ended ``attnum report`` in an internal error
    (KeyError, TypeError in the recall table); now the row is named on stderr and left out, exit 0."""
    _bug_store(tmp_path / "out", metrics=metrics)
    assert main(["report", str(tmp_path / "out")]) == 0
    out, err = capfd.readouterr()
    assert "internal error" not in err and "bug-case row" in err and "row skipped" in err, err
    assert (tmp_path / "out" / "report.html").is_file()


def test_bugs_run_into_another_specs_store_is_refused_before_any_download(tmp_path, capfd, monkeypatch):
    """``attnum bugs run ID --out DIR`` where DIR holds another spec's results fetched every wheel the cases
    need (minutes, gigabytes) and only then refused; now refused first, nothing fetched."""
    from attnum.audit.bugs import run as runner

    _bug_store(tmp_path / "other", metrics={}, name="tiny")
    fetched = []
    monkeypatch.setattr(runner, "prepare", lambda *a, **kw: fetched.append(a))
    line = _one_line_error(capfd, ["bugs", "run", "sageattention-qlen-ne-kvlen", "--out", str(tmp_path / "other")])
    assert "different spec" in line and fetched == []


# ---- the address checks -------------------------------------------------------------------------------

ADDRESS_KERNELS = '''
import json, sys
import torch, triton, triton.language as tl
from attnum.kernels.triton.interp import under

@triton.jit
def shifted(x_ptr, out_ptr, off, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + off + offs))

@triton.jit
def wild_masked(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    far = tl.where(offs < n, offs, offs.to(tl.int64) - (1 << 46))  # lanes masked off: never checked
    tl.store(out_ptr + offs, tl.load(x_ptr + far, mask=offs < n, other=0.0), mask=offs < n)

def outcome(launch):
    try:
        under(launch, "raw")()
        return "pass"
    except Exception as e:
        return f"{type(e).__name__}: {e}"

x = torch.arange(32, dtype=torch.float32)
a, b = x[:16], x[16:]
out = torch.zeros(16)
print(json.dumps({
    "in bounds": outcome(lambda: shifted[(1,)](a, out, 0, BLOCK=16)),
    "masked wild": outcome(lambda: wild_masked[(1,)](a, out, 8, BLOCK=16)),
    "-2**48 bytes": outcome(lambda: shifted[(1,)](a, out, -(1 << 46), BLOCK=16)),
    "+2**48 bytes": outcome(lambda: shifted[(1,)](a, out, 1 << 46, BLOCK=16)),
    "into b with b's tag": outcome(lambda: shifted[(1,)](a, b, (1 << 46) + 16, BLOCK=16)),
}))
'''


def test_an_offset_that_reaches_the_tag_bits_is_out_of_bounds(tmp_path):
    """The provenance tag lives in address bits 48..62: an offset of -2**48 bytes turned a pointer into an
    untagged one inside its own tensor, and +2**48 (plus the distance) into the next argument's with its tag:
    both read passed, though no GPU maps those addresses. Now the pointer arithmetic that moves the top bits
    marks the lane, and a live access through it is out of bounds; masked-off lanes stay unchecked."""
    pytest.importorskip("triton")
    (tmp_path / "k.py").write_text(ADDRESS_KERNELS)
    run = subprocess.run([sys.executable, str(tmp_path / "k.py")], capture_output=True, text=True, timeout=_paths.HANG_S,
                         env=_env(TRITON_INTERPRET="1", PYTHONWARNINGS="ignore"), cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["in bounds"] == "pass" and got["masked wild"] == "pass", got
    for case in ("-2**48 bytes", "+2**48 bytes", "into b with b's tag"):
        assert got[case].startswith("OutOfBounds: ") and "2**48 bytes or more" in got[case], (case, got[case])


# ---- the fingerprint ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_the_matrix_unit_candidates_are_policies_the_policy_accepts(dtype):
    """Under ``mma=ARCH`` a P in fp16 with bf16 inputs (and the reverse) is refused by the policy (no MMA reads
    the pair); the fingerprint's one-site variants built it and ended every tensor-core hypothesis in that
    AttnumInputError (exit 2, blaming the user, after the probes had run). Now such a variant is no candidate."""
    from attnum.audit.fingerprint import families

    for group in families.mma_groups(dtype):
        for chain in (True, False):
            cands = families.mma_candidates(dtype, group, chain)
            assert cands and all(p.mma for p in cands)
            assert not any({p.probs.name, p.inputs.name} == {"bf16", "fp16"} for p in cands)


def test_fingerprint_of_a_tensor_core_policy_is_explained():
    from attnum.audit.fingerprint import fingerprint
    from attnum.kernels.registry import resolve

    doc = fingerprint(resolve("flash:fa2:bf16,mma=sm80").fn, dtype="bf16", lengths=(64, 160), heads=4, d=16)
    assert doc["policy"] is not None and "mma=sm80" in doc["policy"] and doc["bit_exact_fraction"] == 1.0, doc


def test_a_memory_budget_above_the_machine_is_refused(capfd):
    """``--memory 9999T`` was accepted (a budget of 1e19 MiB sizes nothing): with ``--heads 1000000`` the
    fingerprint then allocated 65 GB and ended in an internal error. Now refused in one line, before work."""
    from attnum.audit.fingerprint.budget import parse_memory

    with pytest.raises(AttnumInputError, match="at most"):
        parse_memory("9999T")
    line = _one_line_error(capfd, ["fingerprint", "flash:fa2:bf16", "--lengths", "64", "--heads", "2",
                                   "--head-dim", "8", "--memory", "9999T", "--no-isolate"])
    assert "--memory='9999T'" in line and "at most" in line


def test_torchs_allocation_failure_is_the_out_of_memory_line(monkeypatch):
    """torch's CPU allocator fails with a RuntimeError, not a MemoryError: it was an internal error where a
    MemoryError is one line (exit 2)."""
    from attnum.audit.fingerprint import fingerprint, probes

    def no_memory(*a, **kw):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
                           "memory: you tried to allocate 65536000000 bytes. Error code 12 (Cannot allocate memory)")

    monkeypatch.setattr(probes, "run_swamp", no_memory)
    with pytest.raises(AttnumEnvironmentError, match="ran out of memory"):
        fingerprint(lambda q, k, v, **kw: q, dtype="bf16", lengths=(64,), heads=2, d=8)
    monkeypatch.setattr(probes, "run_swamp", lambda *a, **kw: (_ for _ in ()).throw(RuntimeError("a bug")))
    with pytest.raises(RuntimeError, match="a bug"):  # any other RuntimeError stays what it is
        fingerprint(lambda q, k, v, **kw: q, dtype="bf16", lengths=(64,), heads=2, d=8)


def test_audit_no_isolate_json_keeps_a_targets_import_time_print_off_stdout(tmp_path, capfd):
    """The audit resolves its target before any work (one line for a bad one); under --no-isolate that import
    ran outside the redirection of the target's output, and a print at import led stdout (JSON no more)."""
    (tmp_path / "p.py").write_text("import torch.nn.functional as F\nprint('{\"verdict\": \"PASS\"}')\n"
                                   "def attention(q, k, v, **kw):\n    return F.scaled_dot_product_attention(q, k, v, **kw)\n")
    main(["audit", f"{tmp_path / 'p.py'}:attention", "--dtype", "fp32", "--probes", "scale-argument", "--json",
          "--no-isolate"])
    out, err = capfd.readouterr()
    doc = json.loads(out)
    assert "verdict" not in doc and '{"verdict": "PASS"}' in err
