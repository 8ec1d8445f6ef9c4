"""The lists that mirror attnum's registries, as text: one source for the docs, the README and ``--help``.

Each list is read from its registry when asked, never copied:

- ``commands``: the command-line application itself (:func:`attnum.cli.build_app`), panel by panel;
- ``targets``: every built-in name :func:`attnum.kernels.registry.resolve` takes (attnum's own
  implementations, then :data:`attnum.kernels.registry.KERNELS`);
- ``probes``: the audit's probe catalogue (:data:`attnum.audit.probes.PROBES`);
- ``packages``: the third-party wheels ``attnum kernels fetch`` can fetch
  (:data:`attnum.kernels.wheels.source.PINS`) and the built-in targets each one serves;
- ``policies``: the named precision policies (:data:`attnum.numerics.policy.NAMED`).

README.md and docs/*.md hold each list between ``<!-- list: NAME -->`` and ``<!-- /list -->``;
:func:`rewrite` regenerates every such block (``python scripts/doc_lists.py`` writes them back, the
documentation site's build regenerates them, tests/project/test_doc_lists.py fails when one is stale).
A new target, probe, package, policy or command therefore appears everywhere without a hand edit.
"""

from __future__ import annotations

import re
from collections.abc import Callable

# A block: ``<!-- list: NAME -->``, a newline, the text, ``<!-- /list -->`` (tables); or inline, without the newline
# (a count inside a sentence).
BLOCK = re.compile(r"(<!-- list: ([\w-]+) -->(\n?))(.*?)(<!-- /list -->)", re.S)


def _first_sentence(text: str) -> str:
    """The first sentence of a docstring or doc line (up to a period before a capital or the end), on one
    line, without a leading ````name``: ``."""
    text = " ".join(text.split())
    text = re.sub(r"^``[^`]+``:\s*", "", text)
    m = re.match(r"(.+?)\.(\s+[A-Z(]|$)", text)
    return (m.group(1) if m else text).strip()


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


# -- the registries --------------------------------------------------------------------------------


def commands() -> list[tuple[str, str, str]]:
    """(panel, command, what it does) for every command of ``attnum --help``, in its order."""
    import typer

    from attnum.cli import build_app

    group = typer.main.get_command(build_app())
    out = []
    for name in group.list_commands(None):
        cmd = group.commands[name]
        panel = getattr(cmd, "rich_help_panel", None) or "Commands"
        subs = getattr(cmd, "commands", None)
        if subs:  # a group (attnum kernels fetch): its sub-commands
            for sub_name, sub in subs.items():
                out.append((panel, f"{name} {sub_name}", _first_sentence(sub.help or cmd.help or "")))
        else:
            out.append((panel, name, _first_sentence(cmd.help or "")))
    return out


def targets() -> list[tuple[str, str, str]]:
    """(name, what it is, what it needs here) for every built-in target, attnum's own first."""
    from attnum.kernels import registry

    own = {
        "golden": ("attnum's float64 reference (fully masked rows give 0)", "-"),
        "eager": ("op-by-op softmax attention in the tensors' own dtype", "-"),
        "baseline:POLICY": ("attnum's materialised attention, rounded per POLICY", "-"),
        "flash:POLICY": ("attnum's FlashAttention emulation, rounded per POLICY", "-"),
        "decode:POLICY": ("attnum's serving reference: flash prefill, merge, split-KV decode, per POLICY", "-"),
    }
    rows = []
    for name in registry.builtin_names():
        if name in registry.KERNELS:
            k = registry.KERNELS[name]
            if k.source:
                need = f"`attnum kernels fetch {k.source}` (or the package installed)"
            elif k.package and k.extra:
                need = f"`pip install 'attnum[{k.extra}]'`"
            elif k.package:
                need = f"`{k.package}` importable"
            else:
                need = "-"
            if "cpu" not in k.devices:
                need = "CUDA" if need == "-" else f"CUDA and {need}"
            rows.append((name, _first_sentence(k.doc), need))
        elif name in own:
            rows.append((name, *own[name]))
        else:
            raise ValueError(f"built-in {name!r} has no description in attnum.cli.catalogue.targets")
    return rows


def probes() -> list[tuple[str, str, str]]:
    """(name, kind, what it checks) for every probe, in the order the audit runs them."""
    from attnum.audit.probes import PROBES

    return [(p.name, p.kind + ("" if p.default else ", on request"), " ".join(p.summary.split()))
            for p in PROBES.values()]


def packages() -> list[tuple[str, str, str]]:
    """(package, pinned version, built-in targets it serves) for every wheel ``attnum kernels fetch`` knows."""
    from attnum.kernels import registry
    from attnum.kernels.wheels import source

    serves: dict[str, list[str]] = {}
    for name, k in registry.KERNELS.items():
        if k.source:
            serves.setdefault(k.source, []).append(name)
    return [(pkg, version, ", ".join(serves.get(pkg, [])) or "-") for pkg, version in source.PINS.items()]


def package_names() -> list[str]:
    from attnum.kernels.wheels import source

    return list(source.PINS)


def policies() -> list[tuple[str, str]]:
    """(NAME:FORMAT, what it rounds where) for every named policy."""
    from attnum.numerics.policy import NAMED

    return [(f"{name}:FMT", _first_sentence(fn.__doc__ or "")) for name, fn in NAMED.items()]


# -- as text ---------------------------------------------------------------------------------------


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]], code_first: bool = True) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        first = f"`{row[0]}`" if code_first else row[0]
        lines.append("| " + " | ".join([first, *(_cell(c) for c in row[1:])]) + " |")
    return "\n".join(lines)


def _bug_cases() -> tuple:
    from attnum.audit.bugs.corpus import corpus

    return corpus()


def _commands_md() -> str:
    out, panel = [], None
    rows: list[tuple[str, str]] = []
    for p, name, what in commands():
        if p != panel:
            if rows:
                out.append(_table(("command", "what it does"), rows))
                rows = []
            out.append(f"**{p}**")
            panel = p
        rows.append((f"attnum {name}", what))
    if rows:
        out.append(_table(("command", "what it does"), rows))
    return "\n\n".join(out)


MARKDOWN: dict[str, Callable[[], str]] = {
    "commands": _commands_md,
    "targets": lambda: _table(("target", "what it is", "needs"), targets()),
    "target-names": lambda: ", ".join(f"`{name}`" for name, _, _ in targets()),
    "probes": lambda: _table(("probe", "kind", "what it checks"), probes()),
    "probe-count": lambda: f"{len(probes())} probes",
    "target-count": lambda: f"{len(targets())} built-in targets",
    "bug-case-count": lambda: str(len(_bug_cases())),
    "packages": lambda: _table(("package", "pinned", "built-in targets it serves"),
                               [(f"attnum kernels fetch {p}", v, t) for p, v, t in packages()]),
    "package-names": lambda: " \\| ".join(f"`{p}`" for p in package_names()),
    "policies": lambda: _table(("policy", "what it rounds where"), policies()),
}
"""NAME -> the markdown of ``<!-- list: NAME -->`` blocks."""


def rewrite(text: str, where: str = "") -> str:
    """``text`` with every ``<!-- list: NAME -->`` block regenerated; an unknown NAME is a ValueError."""

    def block(m: re.Match) -> str:
        name = m.group(2)
        if name not in MARKDOWN:
            raise ValueError(f"{where}: <!-- list: {name} --> names no list; known: {', '.join(MARKDOWN)}")
        return f"{m.group(1)}{MARKDOWN[name]()}{m.group(3)}{m.group(5)}"

    return BLOCK.sub(block, text)


def help_targets() -> str:
    """The built-in targets for ``attnum audit --help``: one comma-separated paragraph."""
    return ", ".join(name for name, _, _ in targets())


def help_packages() -> str:
    """``sglang 0.5.3, vllm 0.33.0, ...`` for ``attnum kernels fetch --help`` (no torch: the pins only)."""
    from attnum.kernels.wheels import source

    return ", ".join(f"{p} {v}" for p, v in source.PINS.items())
