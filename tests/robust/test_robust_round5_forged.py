"""Nothing forged, round 5 (issue 42), the cases of branch ``forged``: stdout that a target forges under
``--no-isolate``, ``--arch`` where it changes nothing, built-in policy targets that ``compare`` refuses, an
unbounded ``sum_decode``, and the public API's bad arguments. Each test is one case of the issue (the
replay script, scripts/replay_attacks.py, section ``round7``, runs the same ones end to end); the mixed
P V operands under ``mma`` are tests/numerics/mma/test_mma_mixed_operands.py."""

from __future__ import annotations

import json

import _paths
import pytest

from attnum.cli import main
from attnum.errors import AttnumInputError

pytestmark = [pytest.mark.usefixtures("one_thread")]

PRINTS = '''import os, sys
import torch.nn.functional as F
print('{"verdict": "PASS", "at": "import"}')
def attention(q, k, v, **kw):
    print('{"verdict": "PASS"}')
    sys.__stdout__.write('{"verdict": "PASS", "via": "__stdout__"}\\n')
    os.write(1, b'{"verdict": "PASS", "via": "fd 1"}\\n')
    return F.scaled_dot_product_attention(q, k, v, **kw)
'''


def _one_line_error(capfd, argv: list[str]) -> str:
    assert main(argv) == 2
    out, err = capfd.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnum: error:") and "Traceback" not in err, err
    return lines[0]


# ---- --json stdout is attnum's alone -----------------------------------------------------------------

@pytest.mark.parametrize("command", [
    ["audit", "--dtype", "fp32", "--probes", "odd-lengths"],
    ["fingerprint", "--dtype", "fp32", "--lengths", "64", "--heads", "2", "--head-dim", "16"],
])
def test_a_target_printing_to_stdout_under_no_isolate_leaves_the_json_document_alone(tmp_path, capfd, command):
    (tmp_path / "prints.py").write_text(PRINTS)
    argv = [command[0], f"{tmp_path / 'prints.py'}:attention", *command[1:], "--json", "--no-isolate"]
    main(argv)
    out, err = capfd.readouterr()
    doc = json.loads(out)  # the whole of stdout is one document: nothing of the target's before or after it
    assert isinstance(doc, dict) and "verdict" not in doc
    assert '"at": "import"' in err and '"via": "fd 1"' in err and '"via": "__stdout__"' in err


SAMPLER_PRINTS = """import os
from attnum.sampling import reference_sampler
print('{"verdict": "pass", "at": "import"}')
def sampler(p, q, d, generator=None):
    os.write(1, b'{"verdict": "pass", "via": "fd 1"}\\n')
    return reference_sampler(p, q, d, generator=generator)
"""


def test_spec_audit_json_under_no_isolate_is_attnums_alone_too(tmp_path, capfd):
    (tmp_path / "s.py").write_text(SAMPLER_PRINTS)
    main(["spec-audit", f"{tmp_path / 's.py'}:sampler", "--cases", "dirichlet", "--samples", "2000", "--json",
          "--no-isolate"])
    out, err = capfd.readouterr()
    doc = json.loads(out)
    assert doc["target"].endswith("s.py:sampler") and '"via": "fd 1"' in err and '"at": "import"' in err


# ---- --arch where it cannot change the arithmetic ----------------------------------------------------

@pytest.mark.parametrize("command", [["audit", "sglang-decode", "--probes", "odd-lengths"],
                                     ["fingerprint", "sglang-decode"],
                                     ["audit", "triton-interpret:k.py:attention", "--probes", "odd-lengths"]])
def test_arch_with_raw_numerics_is_refused_before_work(capfd, command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # k.py exists (the file is checked first, before torch loads): the --arch line
    (tmp_path / "k.py").write_text("def attention(q, k, v, **kw):\n    raise NotImplementedError\n")
    line = _one_line_error(capfd, [*command, "--numerics", "raw", "--arch", "sm80"])
    assert "--arch=sm80" in line and "--numerics raw" in line


def test_the_audit_config_refuses_an_arch_under_raw_numerics():
    from attnum.audit.config import AuditConfig

    with pytest.raises(AttnumInputError, match="arch='sm80'"):
        AuditConfig(target="sglang-decode", numerics="raw", arch="sm80")
    assert AuditConfig(target="sglang-decode", numerics="raw").arch == "sm90"  # the default: not an ask


# ---- built-in policy targets validated as compare validates them -------------------------------------

@pytest.mark.parametrize("target, dtype, needle", [
    ("decode:fa2:bf16,mma=sm70", "bf16,fp16,fp32", "sm70"),  # once: FAILED (3 error), exit 1
    ("decode:fa2,mma=sm70", "bf16", "at bf16 inputs"),
    ("decode:fa2,probs=fp16,mma=sm90", "bf16", "neither format holds the other"),
    ("decode:sage1:fp16", "fp16", "decode, chunked and paged paths"),  # once: every decode case an error
    ("flash:fa2:bf16,mma=sm70", "bf16", "sm70"),
    ("baseline:fa2:fp16,probs=bf16,mma=sm80", "fp16", "neither format"),
])
def test_a_builtin_policy_target_compare_refuses_is_refused_in_one_line(capfd, target, dtype, needle):
    line = _one_line_error(capfd, ["audit", target, "--dtype", dtype, "--probes", "odd-lengths"])
    assert needle in line and target in line, line


def test_a_bare_decode_policy_is_checked_at_the_audited_dtypes_only():
    from attnum.audit.config import AuditConfig

    assert AuditConfig(target="decode:fa2,mma=sm70", dtypes="fp16").target  # fp16 on Volta: an instruction
    assert AuditConfig(target="decode:fa2,probs=fp16,mma=sm90", dtypes="fp32").target  # fp16 P in TF32
    with pytest.raises(AttnumInputError, match="at bf16 inputs"):
        AuditConfig(target="decode:fa2,mma=sm70", dtypes="fp16,bf16")


# ---- the public API's bad arguments: one AttnumInputError each ----------------------------------------

def _bf16(*shape):
    import torch

    return torch.randn(*shape).to(torch.bfloat16)


@pytest.mark.parametrize("call, needle", [
    (lambda m: m.matmul(_bf16(2, 16, 32), _bf16(3, 32, 8), arch="sm90"), "a.shape=(2, 16, 32), b.shape=(3, 32, 8) is not"),
    (lambda m: m.matmul_reference(_bf16(2, 16, 32), _bf16(3, 32, 8), arch="sm90"), "do not broadcast"),
    (lambda m: m.matmul(_bf16(16, 32).to("meta"), _bf16(32, 8), arch="sm90"), "a=meta tensor"),
    (lambda m: m.matmul(_bf16(16, 32).float().to_sparse(), _bf16(32, 8).float(), arch="sm90"), "a=sparse_coo"),
    (lambda m: m.matmul(_bf16(16, 32), _bf16(32, 8).to_sparse_csr(), arch="sm90"), "b=sparse_csr"),
    (lambda m: m.matmul(_bf16(16, 32), _bf16(32, 8), _bf16(16, 8).float().to("meta"), arch="sm90"), "c=meta"),
    (lambda m: m.matmul(_bf16(16, 32), _bf16(32, 8), _bf16(16, 8).float().to_sparse(), arch="sm90"), "c=sparse"),
])
def test_mma_matmul_refuses_what_it_cannot_read_in_one_line(call, needle):
    import warnings

    from attnum import mma

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's "sparse CSR is in beta"
        with pytest.raises(AttnumInputError) as err:
            call(mma)
    assert needle in str(err.value) and len(str(err.value).splitlines()) == 1


def _scaled_args():
    import torch

    a = torch.randn(16, 64).to(torch.float8_e4m3fn)
    b = torch.randn(64, 8).to(torch.float8_e4m3fn)
    return a, b, torch.ones(16, 2), torch.ones(2, 8)


@pytest.mark.parametrize("block", [32.0, 16.0, "32", "tensor"])
@pytest.mark.parametrize("reference", [False, True])
def test_matmul_block_scaled_refuses_a_block_that_is_not_an_integer(block, reference):
    import torch

    from attnum import mma

    fn = mma.matmul_block_scaled_reference if reference else mma.matmul_block_scaled
    block = torch.tensor(32) if block == "tensor" else block
    with pytest.raises(AttnumInputError, match="^block=") as err:  # once: a TypeError or RuntimeError
        fn(*_scaled_args(), arch="sm100", kind="mxf8f6f4", block=block)
    assert len(str(err.value).splitlines()) == 1
    assert fn(*_scaled_args(), arch="sm100", kind="mxf8f6f4", block=32).shape == (16, 8)  # the integer is fine


@pytest.mark.parametrize("what", ["a=meta", "a_scale=sparse", "batch"])
def test_matmul_block_scaled_refuses_unreadable_tensors_and_batches_in_one_line(what):
    from attnum import mma

    a, b, sa, sb = _scaled_args()
    if what == "a=meta":
        a = a.to("meta")
    elif what == "a_scale=sparse":
        sa = sa.to_sparse()
    else:
        a, b = a.expand(2, 16, 64), b.expand(3, 64, 8)
    with pytest.raises(AttnumInputError, match=what.replace("batch", "batch dimensions do not broadcast")):
        mma.matmul_block_scaled(a, b, sa, sb, arch="sm100", kind="mxf8f6f4")


# ---- attnum report on a store written by hand ---------------------------------------------------------

def _mma_store(folder, edit):
    """A store with one grid row and its grid-mma twin (as `attnum reproduce` writes them), the twin's
    config passed through ``edit``: written through the API, no sweep run."""
    from attnum.store.db import Store
    from attnum.studies.paper.point import Point

    exact = Point(policy="fa2", format="bf16", seq_len=32, heads=1, head_dim=16, block_k=16, seed=0).config()
    twin = edit({**exact, "mma": "sm80"})
    metrics = {"ratio": {"max_abs": 2.0, "mean_abs": 1.5}, "flash_vs_golden": {"max_abs": 0.01}}
    with Store(folder, command="test") as s:
        s.bind_spec(name="t", spec_hash="h", canonical={"name": "t"}, source="spec.toml")
        s.plan([("exact", "compare", ("grid",), exact), ("twin", "compare", ("grid-mma",), twin)])
        rid = s.begin_run(command="test", n_todo=2, executor="local", jobs=1)
        for k in ("exact", "twin"):
            s.write({"key": k, "status": "done", "metrics": metrics, "env": {"torch": "x"}}, rid)
        s.end_run(rid, "complete")
    return folder


def _set(key, value):
    def edit(c):
        return {**c, key: value}
    return edit


@pytest.mark.parametrize("edit, why", [
    (_set("mma", ["sm80"]), "mma=['sm80']"),  # once: TypeError (unhashable) in the Tensor cores section
    (_set("seed", [0]), "seed=[0]"),
    (_set("seq_len", [32]), "seq_len=[32]"),
    (_set("policy", 5), "policy=5"),  # once: TypeError comparing an int with a str
    (_set("bogus", 1), "unexpected keyword argument 'bogus'"),
])
def test_report_names_and_skips_a_row_it_cannot_read(tmp_path, capfd, edit, why):
    out = _mma_store(tmp_path / "o", edit)
    assert main(["report", str(out)]) == 0
    err = capfd.readouterr().err
    assert "row (key 'twin')" in err and why in err and "row skipped" in err and "Traceback" not in err, err
    assert "internal error" not in err


def test_report_reads_a_row_that_leaves_a_field_out_as_its_default(tmp_path, capfd):
    def no_seed(c):
        return {k: v for k, v in c.items() if k != "seed"}  # once: KeyError 'seed' in the Tensor cores section

    out = _mma_store(tmp_path / "o", no_seed)
    assert main(["report", str(out)]) == 0
    err = capfd.readouterr().err
    assert "row skipped" not in err and "internal error" not in err, err
    assert "<h2>Tensor cores</h2>" in (out / "report.html").read_text()


# ---- attacks on this turn's surfaces (issue 42's closing list): the ones that failed -------------------

def _python(code: str, *args: str, limit_bytes: int | None = None, timeout: float = _paths.HANG_S):
    """``python -c code`` with this checkout's attnum, its address space capped at ``limit_bytes``."""
    import subprocess
    import sys

    from _sweep_helpers import cli_env

    def cap():
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout,
                          env=cli_env(), preexec_fn=cap if limit_bytes else None)


def test_attnum_mma_is_an_attribute_of_the_package_as_its_other_public_names():
    p = _python("import attnum; print(attnum.mma.matmul.__module__, 'mma' in dir(attnum))")
    assert p.returncode == 0 and p.stdout.split() == ["attnum.numerics.mma.dense", "True"], p.stderr[-300:]


def test_an_old_module_path_runs_as_a_script_with_python_dash_m():
    import subprocess
    import sys

    from _sweep_helpers import cli_env

    p = subprocess.run([sys.executable, "-m", "attnum.kernels.triton_selftest", "sm90"], capture_output=True,
                       text=True, timeout=_paths.HANG_S, env=cli_env())  # once: AttributeError: '_Finder' ... 'get_code'
    assert p.returncode == 0 and "Traceback" not in p.stderr and "tl.dot" in p.stdout, p.stderr[-400:]


def test_a_stride_0_batch_of_a_small_tensor_is_refused_before_its_float64_copy():
    code = ("import torch\nfrom attnum import mma\nfrom attnum.errors import AttnumInputError\n"
            "a = torch.randn(1, 16, 32).bfloat16().expand(10**6, 16, 32)\n"
            "try:\n    mma.matmul(a, torch.randn(32, 8).bfloat16(), arch='sm90')\n"
            "except AttnumInputError as e:\n    print(str(e))\n")
    p = _python(code, limit_bytes=3 << 30)  # once: ~11 GiB of float64 copies (a MemoryError under the cap)
    assert p.returncode == 0 and "a.shape=(1000000, 16, 32)" in p.stdout and "GiB" in p.stdout, p.stderr[-300:]


def _dist(tmp_path, name: str, entry_points: str, files: dict[str, str] | None = None):
    """A distribution ``name`` 1.0 on a new sys.path entry, registering ``entry_points`` (the
    [attnum.families] lines)."""
    root = tmp_path / name
    (root / f"{name}-1.0.dist-info").mkdir(parents=True)
    (root / f"{name}-1.0.dist-info" / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (root / f"{name}-1.0.dist-info" / "entry_points.txt").write_text(f"[attnum.families]\n{entry_points}\n")
    for rel, text in (files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


FORGED_PAPER = '''
from attnum.sweep.registry import Family, StudyKind
from attnum.studies.paper.point import Point
def run(point, kernels):
    return {"ratio": {"max_abs": 1.0}, "forged": 1}
FAMILY = Family(name="%s", kinds=(StudyKind(name="compare", point_type=Point, run=run,
                                            from_config=Point.from_config),))
'''


@pytest.mark.parametrize("case, needle", [
    ("paper", "study family 'paper' is registered twice"),  # once: the plugin silently replaced attnum's own
    ("toy", "kind 'compare' is registered twice"),  # once: ValueError, an internal error
])
def test_an_entry_point_that_claims_a_family_or_kind_is_one_line(tmp_path, monkeypatch, case, needle):
    from attnum.errors import AttnumEnvironmentError
    from attnum.sweep import registry

    pkg = f"evil_{case}"  # a package name of its own: a module imported once stays in sys.modules
    root = _dist(tmp_path, "evil", f"{case} = {pkg}:FAMILY", {f"{pkg}/__init__.py": FORGED_PAPER % case})
    monkeypatch.syspath_prepend(str(root))
    registry.families.cache_clear()
    registry.kinds.cache_clear()
    try:
        with pytest.raises(AttnumEnvironmentError, match=needle) as err:
            registry.kinds()
        assert len(str(err.value).splitlines()) == 1
    finally:
        registry.families.cache_clear()
        registry.kinds.cache_clear()


@pytest.mark.parametrize("case, needle", [
    ("broken", "toy = no_such_module_xyz:FAMILY (distribution brk 1.0) cannot be loaded (ModuleNotFoundError"),
    ("notfamily", "toy = wrongpkg:FAMILY (distribution wrong 1.0) is function, not a Family named 'toy'"),
])
def test_an_entry_point_that_yields_no_family_is_left_out_with_one_warning(tmp_path, monkeypatch, capfd, case,
                                                                            needle):
    """Once ModuleNotFoundError / ValueError, an internal error of every sweep and report; left out, the families
    that load still run (an install whose metadata is ahead of its source tree must not stop every command)."""
    from attnum.sweep import registry

    if case == "broken":
        root = _dist(tmp_path, "brk", "toy = no_such_module_xyz:FAMILY")
    else:
        root = _dist(tmp_path, "wrong", "toy = wrongpkg:FAMILY", {"wrongpkg/__init__.py": "FAMILY = lambda: None\n"})
    monkeypatch.syspath_prepend(str(root))
    registry.families.cache_clear()
    registry.kinds.cache_clear()
    try:
        names = {f.name for f in registry.families()}
        assert "compare" in registry.kinds()
    finally:
        registry.families.cache_clear()
        registry.kinds.cache_clear()
    mine = [ln for ln in capfd.readouterr().err.splitlines() if "distribution brk" in ln or "distribution wrong" in ln]
    assert "toy" not in names and "paper" in names
    assert len(mine) == 1 and mine[0].startswith("attnum: warning: study family entry point") and needle in mine[0], mine


def test_audit_list_needs_no_target_and_speaks_json_when_asked(capfd):
    assert main(["audit", "--list"]) == 0  # once: "Missing argument 'TARGET'", exit 2
    out, _ = capfd.readouterr()
    assert "odd-lengths" in out
    assert main(["audit", "--list", "--json"]) == 0  # once: the table, with --json
    out, _ = capfd.readouterr()
    doc = json.loads(out)
    assert {"odd-lengths", "scale-argument"} <= {p["probe"] for p in doc}
    line = _one_line_error(capfd, ["audit"])
    assert "TARGET" in line and "--list" in line


LIARS = '''
import torch
from torch.utils._pytree import tree_map

class Liar(torch.Tensor):  # every difference or absolute value it takes part in is zero
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **(kwargs or {}))
        if func in (torch.Tensor.sub, torch.sub, torch.Tensor.__sub__, torch.Tensor.__rsub__, torch.Tensor.abs,
                    torch.abs) and isinstance(out, torch.Tensor):
            return torch.zeros_like(out)
        return out.as_subclass(Liar) if isinstance(out, torch.Tensor) and out.dim() > 0 else out

class DispatchLiar(torch.Tensor):  # the same, one level down
    @staticmethod
    def __new__(cls, elem):
        r = torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype, device=elem.device,
                                                strides=elem.stride())
        r.elem = elem
        return r

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        unwrap = lambda x: x.elem if isinstance(x, DispatchLiar) else x
        out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))
        if func.__name__.startswith(("sub", "abs")):
            out = torch.zeros_like(out)
        return tree_map(lambda x: DispatchLiar(x) if isinstance(x, torch.Tensor) else x, out)

def _sevens(q, v):
    return torch.full((*q.shape[:-1], v.shape[-1]), 7.0, dtype=q.dtype)

def liar(q, k, v, **kw):
    return _sevens(q, v).as_subclass(Liar)

def dispatch_liar(q, k, v, **kw):
    return DispatchLiar(_sevens(q, v))

def sparse(q, k, v, **kw):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, **kw).to_sparse()
'''


@pytest.mark.parametrize("fn", ["liar", "dispatch_liar", "sparse"])
@pytest.mark.parametrize("isolate", [False, True])
def test_a_tensor_subclass_or_sparse_output_is_a_wrong_output_in_both_modes(tmp_path, fn, isolate):
    """Once, under --no-isolate, a subclass whose arithmetic says |out - golden| = 0 PASSED with an output of 7s;
    isolated, the dispatch subclass and the sparse output were "refused" (exit 3, nothing tested)."""
    from attnum.audit.config import AuditConfig
    from attnum.audit.runner import run_audit

    (tmp_path / "liars.py").write_text(LIARS)
    report = run_audit(AuditConfig(target=f"{tmp_path / 'liars.py'}:{fn}", dtypes="fp32", probes="odd-lengths",
                                   isolate=isolate))
    (row,) = report.results
    assert report.available and not report.passed and row.status == "fail", (row.status, row.note)


def test_report_with_a_plugin_claiming_paper_is_one_line_not_every_row_skipped(tmp_path, monkeypatch, capfd):
    from attnum.sweep import registry

    out = _mma_store(tmp_path / "o", lambda c: c)
    root = _dist(tmp_path, "evil", "paper = evil_report:FAMILY", {"evil_report/__init__.py": FORGED_PAPER % "paper"})
    monkeypatch.syspath_prepend(str(root))
    registry.families.cache_clear()
    registry.kinds.cache_clear()
    try:
        assert main(["report", str(out)]) == 2
    finally:
        registry.families.cache_clear()
        registry.kinds.cache_clear()
    # (a warning for another entry point that does not load is this machine's, not the case's)
    lines = [ln for ln in capfd.readouterr().err.splitlines() if not ln.startswith("attnum: warning: study family")]
    assert len(lines) == 1 and "'paper' is registered twice" in lines[0] and "evil" in lines[0], lines
