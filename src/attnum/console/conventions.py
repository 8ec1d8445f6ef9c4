"""What every sub-command's flags share: conventional metavars and the numeric range every flag obeys.

Applied once to the click command tree (:class:`ConventionalGroup`), so a new command gets them
without asking. Typer's own metavars read ``<int>``, ``<bool>`` and ``<list[str]>``; here they read
INT, FLOAT, TEXT, PATH, and a boolean flag shows none. Each study's config still checks its own
ranges (``seq_len`` positive, ``kv_heads`` dividing ``heads``); what is checked here holds for every
flag of its kind, before any command body runs:

- an integer fits in 64 bits (past that torch raises ``Overflow when unpacking long long``);
- a seed (``--seed``, ``--data-seed``) is in [0, 2**32 - 1], which leaves room for the seeds
  derived from it (``seed * 1_000_003 + step`` and the like) to stay within 64 bits;
- a float is finite (``nan`` compares false with every bound, so configs would let it through);
- a path is not empty (``--out ""`` would otherwise mean the current folder).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from typer.core import TyperCommand, TyperGroup

from attnum.errors import bad_value

SEED_MAX = 2**32 - 1
SEED_FLAGS = ("seed", "data_seed")
INT64 = (-(2**63), 2**63 - 1)

_METAVARS = {int: "INT", float: "FLOAT", str: "TEXT", Path: "PATH"}
# Text flags whose value is a float format, or a comma-separated list, by name.
_TEXT_METAVARS = {"format": "FMT", "fmt": "FMT", "draft_format": "FMT", "low_precision": "FMT",
                  "formats": "LIST", "seq_lens": "LIST", "shards": "LIST", "layout": "LIST", "seeds": "LIST",
                  "k": "LIST", "cases": "LIST", "dtype": "LIST"}


def _flag(param: Any) -> str:
    long = [o for o in param.opts if o.startswith("--")]
    return (long or list(param.opts) or [param.name])[0]


def check_number(flag: str, name: str, value: Any) -> None:
    """Raise :class:`attnum.errors.AttnumInputError` unless ``value`` is within every flag's range."""
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, (list, tuple)):
        for v in value:
            check_number(flag, name, v)
        return
    if isinstance(value, int):
        if name in SEED_FLAGS and not 0 <= value <= SEED_MAX:
            raise bad_value(flag, value, f"an integer in [0, {SEED_MAX}] (2**32 - 1; a seed)")
        if not INT64[0] <= value <= INT64[1]:
            raise bad_value(flag, value, "an integer that fits in 64 bits")
    elif isinstance(value, float) and not math.isfinite(value):
        raise bad_value(flag, value, "a finite number")


def _checked(param: Any) -> None:
    inner = param.callback
    flag, name = _flag(param), param.name

    def callback(ctx, p, value):
        check_number(flag, name, value)
        return inner(ctx, p, value) if inner is not None else value

    param.callback = callback


def _is_path(param: Any) -> bool:
    from typing import get_args

    desc = param.type_descriptor
    return desc.annotation is Path or ((desc.is_tuple or desc.is_list) and Path in get_args(desc.annotation))


def _non_empty(param: Any) -> None:
    """Refuse an empty string for a path flag before typer turns it into ``Path('.')``."""
    inner, flag = param.process_value, _flag(param)

    def process_value(ctx, value):
        values = value if isinstance(value, (list, tuple)) else (value,)
        if any(isinstance(v, str) and not v.strip() for v in values):
            raise bad_value(flag, "", "a path (an empty name is not the current folder; say '.' for that)")
        return inner(ctx, value)

    param.process_value = process_value


def _metavar(param: Any) -> str | None:
    if getattr(param, "is_flag", False):
        return ""
    desc = param.type_descriptor
    ann = desc.annotation
    if desc.is_tuple:
        from typing import get_args

        return " ".join(_METAVARS.get(a, "VALUE") for a in get_args(ann))
    if desc.is_list:
        from typing import get_args

        args = get_args(ann)
        return _METAVARS.get(args[0] if args else str, "VALUE")
    if desc.is_choice:
        return None  # typer lists the choices
    if ann is str and param.name in _TEXT_METAVARS:
        return _TEXT_METAVARS[param.name]
    return _METAVARS.get(ann, "VALUE")


def conventional(command: Any) -> None:
    """Give ``command`` (and its sub-commands) conventional metavars and the numeric checks."""
    for param in command.params:
        if param.param_type_name == "option" and param.metavar is None:
            param.metavar = _metavar(param)
        elif param.param_type_name == "argument":  # its name is its metavar; the type column reads TEXT, PATH
            kind = _metavar(param)
            if param.metavar is None:
                param.metavar = param.name.upper()
            param.display_type_rich = lambda ctx, kind=kind: kind
        if param.type_descriptor.annotation in (int, float) or param.type_descriptor.is_tuple \
                or param.type_descriptor.is_list:
            _checked(param)
        if _is_path(param):
            _non_empty(param)
    help_option = command.get_help_option

    def get_help_option(ctx):
        opt = help_option(ctx)
        if opt is not None:
            opt.metavar = ""  # --help is a flag
        return opt

    command.get_help_option = get_help_option
    for sub in getattr(command, "commands", {}).values():
        conventional(sub)


class ConventionalGroup(TyperGroup):
    """attnum's top-level group: every sub-command gets :func:`conventional` when the tree is built.

    ``panel_order`` (help panel titles): the commands are listed panel by panel in that order (a
    panel not named there last), each panel's commands in the order they were registered."""

    panel_order: tuple[str, ...] = ()

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        conventional(self)

    def list_commands(self, ctx: Any) -> list[str]:
        names = super().list_commands(ctx)
        rank = {p: i for i, p in enumerate(self.panel_order)}

        def key(item: tuple[int, str]) -> tuple[int, int]:
            panel = getattr(self.commands[item[1]], "rich_help_panel", None)
            return rank.get(panel, len(rank)), item[0]

        return [name for _, name in sorted(enumerate(names), key=key)]


def lazy_epilog(factory: Any) -> type:
    """A command class whose help ends with ``factory()``, computed only when that help is shown: a list
    read from a registry that imports torch (``attnum audit --help``'s built-in targets) costs nothing to
    ``attnum --help`` or to running the command."""

    class LazyEpilogCommand(TyperCommand):
        def format_help(self, ctx: Any, formatter: Any) -> None:
            self.epilog = factory()
            return super().format_help(ctx, formatter)

    return LazyEpilogCommand
