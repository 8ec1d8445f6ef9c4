"""Module paths attnum used before 0.2, kept for one release: importing one warns and gives the new module.

0.2 grouped the modules of ``kernels/``, ``attention/``, ``numerics/``, ``audit/`` and two study families into
folders, one concern each (CHANGELOG.md has the table). Code that imports an old path, e.g.
``attnum.kernels.triton_faithful``, gets the module now at ``attnum.kernels.triton.faithful`` -- the same object,
not a copy -- and a DeprecationWarning naming the new path. A module that became a package of the same name
(``attnum.numerics.mma``, ``attnum.kernels.wheels``, ``attnum.audit.scan``, ``attnum.attention.cost``,
``attnum.studies.training.bias``) forwards its old attributes the same
way (:func:`forward`). The adapters were merged into one module per upstream project and their internals
renamed: they are reached by target name (``attnum audit vllm-unified``), and no old adapter path is kept.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

MOVED: dict[str, str] = {
    "attnum.attention.cost_devices": "attnum.attention.cost.devices",
    "attnum.attention.decode": "attnum.attention.serving.decode",
    "attnum.attention.exp2": "attnum.attention.lowbit.exp2",
    "attnum.attention.fa4_steps": "attnum.attention.lowbit.fa4_steps",
    "attnum.attention.merge": "attnum.attention.serving.merge",
    "attnum.attention.mla": "attnum.attention.serving.mla",
    "attnum.attention.paged": "attnum.attention.serving.paged",
    "attnum.attention.qformats": "attnum.attention.lowbit.qformats",
    "attnum.attention.quant": "attnum.attention.lowbit.quant",
    "attnum.attention.ring": "attnum.attention.parallel.ring",
    "attnum.attention.sage": "attnum.attention.lowbit.sage",
    "attnum.attention.sage_quant": "attnum.attention.lowbit.sage_quant",
    "attnum.attention.split_rules": "attnum.attention.serving.split_rules",
    "attnum.audit.scan_context": "attnum.audit.scan.context",
    "attnum.audit.scan_files": "attnum.audit.scan.files",
    "attnum.audit.scan_lex": "attnum.audit.scan.lex",
    "attnum.audit.scan_names": "attnum.audit.scan.names",
    "attnum.audit.scan_rules": "attnum.audit.scan.rules",
    "attnum.kernels.triton_faithful": "attnum.kernels.triton.faithful",
    "attnum.kernels.triton_fusion": "attnum.kernels.triton.fusion",
    "attnum.kernels.triton_interp": "attnum.kernels.triton.interp",
    "attnum.kernels.triton_model": "attnum.kernels.triton.model",
    "attnum.kernels.triton_selftest": "attnum.kernels.triton.selftest",
    "attnum.kernels.triton_selftest_kernels": "attnum.kernels.triton.selftest_kernels",
    "attnum.kernels.triton_sum_decode": "attnum.kernels.triton.sum_decode",
    "attnum.kernels.triton_tensor_core": "attnum.kernels.triton.tensor_core",
    "attnum.kernels.triton_values": "attnum.kernels.triton.values",
    "attnum.kernels.wheel_cache": "attnum.kernels.wheels.cache",
    "attnum.kernels.wheel_stand_ins": "attnum.kernels.wheels.stand_ins",
    "attnum.numerics.mma_arch": "attnum.numerics.mma.arch",
    "attnum.numerics.mma_kernels": "attnum.numerics.mma.dense_kernels",
    "attnum.numerics.mma_scaled": "attnum.numerics.mma.scaled",
    "attnum.numerics.mma_scaled_kernels": "attnum.numerics.mma.scaled_kernels",
    "attnum.numerics.mma_sites": "attnum.numerics.mma.sites",
    "attnum.studies.paper.budget_figure": "attnum.studies.paper.report.budget_figure",
    "attnum.studies.paper.cells": "attnum.studies.paper.report.cells",
    "attnum.studies.paper.cli_attribute": "attnum.studies.paper.cli.attribute",
    "attnum.studies.paper.cli_compare": "attnum.studies.paper.cli.compare",
    "attnum.studies.paper.fig6": "attnum.studies.paper.report.fig6",
    "attnum.studies.paper.figures": "attnum.studies.paper.report.figures",
    "attnum.studies.paper.findings": "attnum.studies.paper.report.findings",
    "attnum.studies.paper.flag_claims": "attnum.studies.paper.report.flag_claims",
    "attnum.studies.paper.headline": "attnum.studies.paper.report.headline",
    "attnum.studies.paper.mma_cells": "attnum.studies.paper.report.mma_cells",
    "attnum.studies.training.bias_headline": "attnum.studies.training.bias.headline",
    "attnum.studies.training.bias_report": "attnum.studies.training.bias.report",
    "attnum.studies.training.bias_sites": "attnum.studies.training.bias.sites",
    "attnum.studies.training.bias_steps": "attnum.studies.training.bias.steps",
    "attnum.studies.training.cli_bias": "attnum.studies.training.bias.cli",
}
"""{old module: new module}."""


def _warn(old: str, new: str) -> None:
    # stacklevel 3: past _warn and its caller here; warnings itself skips the import machinery's frames
    warnings.warn(f"{old} moved to {new} in attnum 0.2; the old path goes in the next release", DeprecationWarning,
                  stacklevel=3)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old names of :data:`MOVED` and loads them as the new module (placed in ``sys.modules`` under
    the old name too, so both names are one module)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return None  # a placeholder module; exec_module swaps in the real one

    def exec_module(self, module):
        old = module.__name__
        _warn(old, MOVED[old])
        sys.modules[old] = importlib.import_module(MOVED[old])  # the import system returns what sys.modules holds

    def get_code(self, fullname):
        """``python -m OLD`` (runpy asks the loader for code): the new module's code, with the warning; the
        self-test was run as ``python -m attnum.kernels.triton_selftest``."""
        _warn(fullname, MOVED[fullname])
        new = importlib.util.find_spec(MOVED[fullname])
        return new.loader.get_code(MOVED[fullname])


_FINDER = _Finder()


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once); it answers only the names of :data:`MOVED`."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def forward(old: str, new: str, names: frozenset[str], *, public: str | None = None):
    """A module ``__getattr__`` for a package that replaced the module ``old``: its old public ``names`` come from
    ``new``, with a DeprecationWarning naming ``public`` (default ``new``), the path to use; any other name is an
    AttributeError as usual."""

    def __getattr__(name: str):
        if name not in names:
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        _warn(f"{old}.{name}", f"{public or new}.{name}")
        value = getattr(importlib.import_module(new), name)
        setattr(sys.modules[old], name, value)  # once per process: the next look-up is a plain attribute
        return value

    return __getattr__
