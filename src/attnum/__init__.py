"""attnum: how far does an attention implementation deviate from exact attention, and why.

The numeric exports load on first use (PEP 562), so ``import attnum``, ``import attnum.errors`` and
``attnum --help`` do not import torch.
"""

from __future__ import annotations

import sys

if sys.argv[:1] == ["-m"] or sys.argv[0].endswith(("/attnum", "\\attnum", "attnum.exe")):
    # the CLI is starting (``python -m attnum`` while runpy imports this package, or the console script):
    # a Ctrl-C from here on is "attnum: interrupted", exit 130 (attnum.__main__, attnum.cli.main), never a
    # traceback. A library import (``import attnum``) leaves the program's SIGINT handler alone.
    import signal as _signal

    if _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
        def _interrupted(signum, frame):
            print("attnum: interrupted", file=sys.stderr)
            sys.stderr.flush()
            import os as _os

            _os._exit(130)

        _signal.signal(_signal.SIGINT, _interrupted)

import importlib
from typing import TYPE_CHECKING, Any

from attnum import _moved
from attnum.errors import AttnumInputError

_moved.install()  # the module paths of attnum < 0.2 still import, with a DeprecationWarning

__version__ = "0.1.0"

# name -> (module, attribute); attribute None means the module itself.
_LAZY: dict[str, tuple[str, str | None]] = {
    "metrics": ("attnum.numerics.metrics", None),
    "mma": ("attnum.mma", None),  # the tensor-core model's public name: attnum.mma.matmul after import attnum
    "baseline_attention": ("attnum.attention", "baseline_attention"),
    "flash_attention": ("attnum.attention", "flash_attention"),
    "golden_attention": ("attnum.attention", "golden_attention"),
    "FloatFormat": ("attnum.numerics.formats", "FloatFormat"),
    "get_format": ("attnum.numerics.formats", "get_format"),
    "wasserstein_distance": ("attnum.numerics.metrics", "wasserstein_distance"),
    "Policy": ("attnum.numerics.policy", "Policy"),
    "parse_policy": ("attnum.numerics.policy", "parse_policy"),
    "round_to": ("attnum.numerics.rounding", "round_to"),
    "shadow": ("attnum.integrations.shadow", "shadow"),
}

__all__ = [
    "AttnumInputError", "FloatFormat", "Policy", "get_format", "parse_policy", "round_to",
    "golden_attention", "baseline_attention", "flash_attention", "metrics", "mma", "wasserstein_distance", "shadow",
    "__version__",
]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from attnum import mma
    from attnum.attention import baseline_attention, flash_attention, golden_attention
    from attnum.integrations.shadow import shadow
    from attnum.numerics import metrics
    from attnum.numerics.formats import FloatFormat, get_format
    from attnum.numerics.metrics import wasserstein_distance
    from attnum.numerics.policy import Policy, parse_policy
    from attnum.numerics.rounding import round_to


def __getattr__(name: str) -> Any:
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'attnum' has no attribute {name!r}") from None
    value = importlib.import_module(module)
    if attr is not None:
        value = getattr(value, attr)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
