"""The module paths of attnum < 0.2 still import for one release, each with a DeprecationWarning, and give the
very module (or name) now at the new path; ``attnum.mma`` is the tensor-core model's public name."""

from __future__ import annotations

import importlib
import importlib.machinery
import subprocess
import sys
import warnings

import _paths
import pytest

from attnum._moved import MOVED


def _fresh(code: str) -> subprocess.CompletedProcess:
    """``code`` in a new interpreter (an old path imported once per process is cached afterwards)."""
    return subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", code], capture_output=True,
                          text=True, timeout=_paths.HANG_S)


def test_the_table_is_whole():
    assert len(MOVED) >= 45
    for old, new in MOVED.items():
        parent, _, leaf = old.rpartition(".")
        # the old path is no file any more (else the finder would shadow a real module) ...
        where = importlib.import_module(parent).__path__
        assert importlib.machinery.PathFinder.find_spec(old, where) is None, old
        # ... and the new one is
        assert importlib.util.find_spec(new) is not None, new


@pytest.mark.parametrize("old", ["attnum.kernels.triton_faithful", "attnum.numerics.mma_arch",
                                 "attnum.attention.decode", "attnum.audit.scan_lex",
                                 "attnum.studies.paper.headline"])
def test_an_old_path_warns_and_is_the_new_module(old):
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {MOVED[old]}"):
        mod = importlib.import_module(old)
    assert mod is importlib.import_module(MOVED[old])
    assert mod.__name__ == MOVED[old]


def test_every_old_path_imports_in_a_fresh_process():
    """Each old path, in a child with DeprecationWarning as an error: every one raises it (and nothing else)."""
    code = ("import importlib, sys\nfrom attnum._moved import MOVED\nbad = []\n"
            "for old in MOVED:\n"
            "    try:\n        importlib.import_module(old)\n        bad.append(old)\n"
            "    except DeprecationWarning as w:\n"
            "        if MOVED[old] not in str(w): bad.append(old)\n"
            "print(bad)\n")
    run = _fresh(code)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "[]", run.stdout


@pytest.mark.parametrize("package,name,new", [
    ("attnum.numerics.mma", "matmul", "attnum.mma"),
    ("attnum.kernels.wheels", "fetch", "attnum.kernels.wheels.source"),
    ("attnum.audit.scan", "scan_paths", "attnum.audit.scan.scanner"),
    ("attnum.attention.cost", "attention_cost", "attnum.attention.cost.model"),
    ("attnum.studies.training.bias", "BiasConfig", "attnum.studies.training.bias.study"),
])
def test_a_module_that_became_a_package_forwards_its_old_names(package, name, new):
    run = _fresh(f"from {package} import {name}")
    assert run.returncode == 1 and f"{package}.{name} moved to {new}.{name}" in run.stderr, run.stderr[-1000:]
    run = subprocess.run([sys.executable, "-c", f"import importlib; from {package} import {name} as a; "
                          f"print(a is getattr(importlib.import_module({new!r}), {name!r}))"],
                         capture_output=True, text=True, timeout=_paths.HANG_S)
    assert run.stdout.strip() == "True", run.stderr[-1000:]
    with pytest.raises(AttributeError):
        importlib.import_module(package).no_such_name  # noqa: B018


def test_attnum_mma_is_the_public_name_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from attnum import mma
        from attnum.numerics.mma import arch, dense, scaled
    assert mma.matmul is dense.matmul and mma.matmul_block_scaled is scaled.matmul_block_scaled
    assert mma.get_arch is arch.get_arch and "sm90" in mma.arch_names()

