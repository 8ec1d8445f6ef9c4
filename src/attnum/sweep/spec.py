"""Sweep specs: a TOML file (or a dict) naming axes, whose product is a list of points.

A spec has a ``name``, the comparisons to ``record``, the real ``kernels`` to run beside the
emulation, optional ``[defaults]`` and either top-level ``[axes]`` / ``[[points]]`` or several
``[[group]]`` tables, each with its own ``name``, ``axes`` and ``points``::

    name = "my-sweep"
    record = ["flash_vs_golden", "baseline_vs_golden", "flash_vs_baseline", "kernels"]
    [defaults]
    heads = 2
    [axes]
    format = ["bf16", "fp16"]
    policy = ["uniform", "fa2"]
    seq_len = [256, 1024]

An axis (or a point) may also set ``kind``: any kind a study family registers
(:mod:`attnum.sweep.registry`; ``compare``, the default, ``attribute``, ``decode``, ``fp8-table``,
``ring``, ``spec``, ...). The kind decides which axes a point takes (its point dataclass's fields)
and how each is validated (``StudyKind.axes``); ``record`` names what the families let a spec record.

Everything is checked before any point runs: unknown keys, empty axes, bad values and tiles the
core rejects all raise :class:`attnum.errors.AttnumInputError` naming the file, key, value and what
is allowed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from attnum.errors import AttnumInputError, did_you_mean
from attnum.sweep.axes import allowed_for
from attnum.sweep.registry import DEFAULT_KIND, axis_checks, get_kind, record_choices, spec_kinds

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - py3.10
    import tomli as tomllib

_TOP_KEYS = ("name", "description", "record", "kernels", "defaults", "axes", "points", "group")
_GROUP_KEYS = ("name", "axes", "points")
# By default every kernel in the registry is recorded; those this machine lacks say "unavailable".
# "all" stays "all" in the canonical spec, so a registry that grows does not orphan a results folder.
ALL_KERNELS = "all"
MAX_POINTS = 200_000  # a typo like seq_len = range(1, 10**6) should fail fast, not run for a week


@dataclasses.dataclass(frozen=True, kw_only=True)
class Group:
    """One named block of a spec: the product of ``axes`` plus the listed ``points``."""

    name: str
    points: tuple[Any, ...]  # point dataclasses of any registered kind

    def __post_init__(self) -> None:
        if not self.points:
            raise AttnumInputError(f"group {self.name!r} has no points")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SweepSpec:
    """A validated sweep: groups of points, the comparisons to record and the real kernels."""

    name: str
    record: tuple[str, ...]
    kernels: tuple[str, ...]
    groups: tuple[Group, ...]
    source: str = "<dict>"
    description: str = ""

    def __post_init__(self) -> None:
        if not self.groups:
            raise AttnumInputError(f"{self.source}: spec {self.name!r} has no groups or axes")
        bad = [r for r in self.record if r not in record_choices()]
        if bad:
            raise AttnumInputError(f"{self.source}: record={bad[0]!r} is not allowed; expected {record_choices()}")

    @property
    def kernel_names(self) -> tuple[str, ...]:
        """The kernels to run, with "all" expanded to the registry's current list (less the kernels
        that run through an interpreter: Pallas in interpret mode costs seconds a point)."""
        if self.kernels == (ALL_KERNELS,):
            from attnum.kernels.registry import sweep_kernel_names

            return sweep_kernel_names()
        return self.kernels

    @property
    def record_kernels(self) -> bool:
        return "kernels" in self.record and bool(self.kernels)

    def planned(self) -> dict[str, tuple[Any, tuple[str, ...]]]:
        """Every distinct point (compare points, then kernel points) by key, with the groups using it."""
        out: dict[str, tuple[Any, list[str]]] = {}
        for kernel_pass in (False, True):
            if kernel_pass and not self.record_kernels:
                break
            for group in self.groups:
                for point in group.points:
                    p = point.kernel_point() if kernel_pass else point
                    if p is None:
                        continue
                    entry = out.setdefault(p.key, (p, []))
                    if group.name not in entry[1]:
                        entry[1].append(group.name)
        return {k: (p, tuple(g)) for k, (p, g) in out.items()}

    def canonical(self) -> dict[str, Any]:
        """The spec as plain data; two specs with equal ``canonical()`` plan the same rows."""
        return {
            "name": self.name,
            "record": list(self.record),
            "kernels": list(self.kernels),
            "groups": [{"name": g.name, "points": [p.identity() for p in g.points]} for g in self.groups],
        }

    @property
    def spec_hash(self) -> str:
        blob = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def load_spec(path: str | Path) -> SweepSpec:
    """Read and validate a TOML spec file."""
    path = Path(path)
    if not path.is_file():
        raise AttnumInputError(f"spec={str(path)!r} is not allowed; expected an existing TOML file")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise AttnumInputError(f"{path}: not valid TOML: {err}") from None
    return spec_from_dict(data, source=str(path))


def spec_from_dict(data: dict[str, Any], *, source: str = "<dict>") -> SweepSpec:
    """Validate spec data (as parsed from TOML) into a :class:`SweepSpec`."""
    _check_keys(data, _TOP_KEYS, source, "")
    name = data.get("name", Path(source).stem if source != "<dict>" else "sweep")
    if not isinstance(name, str) or not name:
        raise _bad(source, "name", name, "a non-empty string")
    record = _str_list(data.get("record", list(record_choices())), source, "record", record_choices())
    kernels = _str_list(data.get("kernels", ALL_KERNELS), source, "kernels", None)
    if kernels != [ALL_KERNELS]:
        _check_kernel_names(kernels, source)
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise _bad(source, "defaults", defaults, "a table of axis = value")
    for key, value in defaults.items():
        _check_axis(source, f"defaults.{key}", key, value)

    raw_groups: list[tuple[str, dict[str, Any]]] = []
    if "axes" in data or "points" in data:
        raw_groups.append(("", {"name": name, "axes": data.get("axes", {}), "points": data.get("points", [])}))
    groups_in = data.get("group", [])
    if not isinstance(groups_in, list):
        raise _bad(source, "group", groups_in, "an array of tables [[group]]")
    raw_groups += [(f"group[{i}].", g) for i, g in enumerate(groups_in)]
    if not raw_groups:
        raise AttnumInputError(f"{source}: no axes, points or [[group]] given; nothing to run")

    _check_size(raw_groups, source)  # from the axes' lengths, before any point is built
    groups: list[Group] = []
    seen: set[str] = set()
    for prefix, raw in raw_groups:
        if not isinstance(raw, dict):
            raise _bad(source, prefix.rstrip("."), raw, "a table")
        group = _parse_group(raw, defaults, source, prefix)
        if group.name in seen:
            raise _bad(source, f"{prefix}name", group.name, "a group name not used twice")
        seen.add(group.name)
        groups.append(group)
    total = sum(len(g.points) for g in groups)
    if total > MAX_POINTS:
        raise _bad(source, "axes", f"{total} points", f"at most {MAX_POINTS} points per spec")
    return SweepSpec(
        name=name,
        record=tuple(record),
        kernels=tuple(kernels),
        groups=tuple(groups),
        source=source,
        description=str(data.get("description", "")),
    )


def _check_size(raw_groups: list[tuple[str, Any]], source: str) -> None:
    """Refuse a spec whose points (the product of each group's axis lengths plus its listed points,
    counted before duplicates merge) exceed MAX_POINTS: arithmetic on the lengths, nothing built, so
    a 10**7-point spec is refused at once instead of after minutes and gigabytes."""
    total = 0
    for _prefix, raw in raw_groups:
        if not isinstance(raw, dict):
            continue  # refused with its own message below
        axes, listed = raw.get("axes", {}), raw.get("points", [])
        n = 1 if isinstance(axes, dict) and axes else 0
        for values in (axes.values() if isinstance(axes, dict) else ()):
            n *= len(values) if isinstance(values, list) else 1
            if n > MAX_POINTS:
                break
        total += n + (len(listed) if isinstance(listed, list) else 0)
        if total > MAX_POINTS:
            raise _bad(source, "axes", f"more than {MAX_POINTS} points (the product of the axes' lengths)",
                       f"at most {MAX_POINTS} points per spec")


def _parse_group(raw: dict[str, Any], defaults: dict[str, Any], source: str, prefix: str) -> Group:
    _check_keys(raw, _GROUP_KEYS, source, prefix)
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise _bad(source, f"{prefix}name", name, "a non-empty string")
    axes = raw.get("axes", {})
    if not isinstance(axes, dict):
        raise _bad(source, f"{prefix}axes", axes, "a table of axis = [values]")
    listed = raw.get("points", [])
    if not isinstance(listed, list):
        raise _bad(source, f"{prefix}points", listed, "an array of tables [[points]]")
    axis_values: dict[str, list[Any]] = {}
    for key, values in axes.items():
        values = values if isinstance(values, list) else [values]
        if not values:
            raise _bad(source, f"{prefix}axes.{key}", values, "a non-empty list of values")
        for v in values:
            _check_axis(source, f"{prefix}axes.{key}", key, v)
        axis_values[key] = values
    combos: list[dict[str, Any]] = []
    if axis_values:
        combos = [dict(c) for c in _product(list(axis_values.items()))]
    for i, entry in enumerate(listed):
        if not isinstance(entry, dict):
            raise _bad(source, f"{prefix}points[{i}]", entry, "a table of axis = value")
        for key, v in entry.items():
            _check_axis(source, f"{prefix}points[{i}].{key}", key, v)
        combos.append(dict(entry))
    if not combos:
        raise AttnumInputError(f"{source}: {prefix}axes/points of group {name!r} are empty; nothing to run")
    points = []
    for combo in combos:
        cfg = {**defaults, **combo}
        try:
            points += _make_points(cfg)
        except AttnumInputError as err:
            shown = ", ".join(f"{k}={v!r}" for k, v in combo.items())
            raise AttnumInputError(f"{source}: {prefix}point ({shown}) is impossible: {err}") from None
    # Same point listed twice in one group runs once.
    uniq = list({p.key: p for p in points}.values())
    for p in uniq:  # a kind that can size itself (consistency, lowbit): refused here, not stored as failed
        need = getattr(p, "require_memory", None)
        if callable(need):
            try:
                need()
            except AttnumInputError as err:
                label = p.label() if callable(getattr(p, "label", None)) else p.key
                raise AttnumInputError(f"{source}: {prefix}point ({label}) is impossible: {err}") from None
    return Group(name=name, points=tuple(uniq))


def _make_points(cfg: dict[str, Any]) -> tuple[Any, ...]:
    """The point(s) of one spec entry, by its ``kind`` (the registry's); an axis the kind does not take
    is an input error."""
    kind = get_kind(cfg.get("kind"))
    names = set(kind.fields())
    extra = sorted(set(cfg) - names)
    if extra:
        raise AttnumInputError(f"{extra[0]}={cfg[extra[0]]!r} is not an axis of kind {cfg.get('kind', DEFAULT_KIND)!r}; "
                               f"{did_you_mean(extra[0], names)}expected one of {', '.join(sorted(names))}")
    return kind.points(cfg)


def _product(items: list[tuple[str, list[Any]]]):
    if not items:
        yield ()
        return
    (key, values), rest = items[0], items[1:]
    for v in values:
        for tail in _product(rest):
            yield ((key, v), *tail)


def _check_axis(source: str, where: str, key: str, value: Any) -> None:
    if key == "kind":
        if value not in spec_kinds():
            raise AttnumInputError(f"{source}: {where}={value!r} is not allowed; {did_you_mean(value, spec_kinds())}"
                                   f"expected one of {spec_kinds()}")
        return
    checks = axis_checks()
    if key not in checks:
        raise AttnumInputError(
            f"{source}: {where} is not a known axis; {did_you_mean(key, checks)}"
            f"expected one of {', '.join(sorted({*checks, 'kind'}))}"
        )
    allowed, ok = checks[key]
    if not ok(value):
        raise _bad(source, where, value, allowed_for(allowed, ok, value))


def _check_keys(data: dict[str, Any], known: tuple[str, ...], source: str, prefix: str) -> None:
    for key in data:
        if key not in known:
            raise AttnumInputError(
                f"{source}: {prefix}{key} is not a known key; expected one of {', '.join(known)}"
            )


def _str_list(value: Any, source: str, key: str, allowed: tuple[str, ...] | None) -> list[str]:
    value = value if isinstance(value, list) else [value]
    for v in value:
        if not isinstance(v, str) or (allowed is not None and v not in allowed):
            raise _bad(source, key, v, f"one of {allowed}" if allowed else "a string")
    return list(dict.fromkeys(value))


def _check_kernel_names(kernels: list[str], source: str) -> None:
    from attnum.kernels.registry import KERNELS

    for k in kernels:
        if k not in KERNELS:
            raise _bad(source, "kernels", k, f"'all' or one of {sorted(KERNELS)}")


def _bad(source: str, key: str, value: Any, allowed: str) -> AttnumInputError:
    return AttnumInputError(f"{source}: {key}={value!r} is not allowed; expected {allowed}")
