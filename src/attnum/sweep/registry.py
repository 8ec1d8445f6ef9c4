"""The registry of study families: what a family provides, and the one place that lists them.

A *family* is one package ``attnum/studies/<family>/`` holding everything of one study: its point
(a frozen config dataclass), how one point runs, its findings computed from stored rows, its
figures and report section, its CLI command(s). The sweep spec, the executors, the store,
``runs``/``export`` and the report ask this module about kinds; none of them names one.

Adding a family is one package plus its entry point: a line in ``pyproject.toml``'s
``[project.entry-points."attnum.families"]`` table (``<family> = "attnum.studies.<family>.family:FAMILY"``; the
families register themselves there, so this layer names none) and its name in :data:`attnum.studies.FAMILIES`
(the CLI's list). Reinstall (``pip install -e .``) for the entry point to be seen.

What a family author provides
-----------------------------
``attnum/studies/<family>/__init__.py``
    A docstring (what the study is, with its sources). Keep it free of imports: the CLI imports
    the package before every command, and ``attnum --help`` must not import torch.
``attnum/studies/<family>/family.py``
    ``FAMILY = Family(name="<family>", kinds=(StudyKind(...), ...), ...)``; every field below.
    It may import the numerics core (formats, rounding, policy, attention, metrics, inputs),
    ``kernels/``, :mod:`attnum.sweep.results` (the row API), :mod:`attnum.sweep.spec`
    (to build a profile's spec), :mod:`attnum.report.plotting` and :mod:`attnum.report.blocks`,
    :mod:`attnum.sweep.axes` (validators of shared fields), :mod:`attnum.sweep.point` and this
    module; never another family (``tests/project/test_import_graph.py`` checks).
``attnum/studies/<family>/cli.py`` (optional)
    ``register(app: typer.Typer) -> None`` adding the family's command(s). Import the study inside
    the command function, not at module level (the CLI's start-up time is pinned by a test).

A :class:`StudyKind` is one value of a stored point's ``kind``:

- ``name``: the ``kind`` string stored in the point's config (never rename one: old stores key on it);
- ``point_type``: the frozen, keyword-only point dataclass. It provides ``config() -> dict``
  (JSON-able, holds ``kind``), ``key -> str`` (the store's key: :func:`attnum.sweep.point.point_key`
  of the identity), ``label() -> str`` and ``kernel_point() -> point | None``;
  :class:`attnum.sweep.point.StudyPoint` gives all but ``label`` for a dataclass with a ``kind`` field;
- ``run(point, kernels) -> dict``: one point's metrics as plain data (it runs in a worker process that
  received only the point's config; print nothing; raise on failure, the runner records the message;
  ``kernels`` is the spec's list of real kernels, for kinds that run them);
- ``axes``: ``{field: (allowed, check)}``, the sweep-spec validators of this kind's axes (a field
  another kind already declares may be left out; the point's ``__post_init__`` checks the rest);
- ``from_config(config) -> point`` (default ``point_type(**config)``): a stored config back to a point;
- ``expand(config) -> tuple of points`` (default one ``from_config``): how one spec entry becomes points;
- ``metrics``: ``((path, label), ...)`` the report's generic per-group figures draw for this kind
  (empty: the family draws its own figures, or none);
- ``in_specs`` (default True): whether a spec may name the kind (False: its points follow from
  others', as ``kernels`` points from ``compare`` points through ``kernel_point()``).

A :class:`Family` adds what is per study rather than per kind:

- ``findings(rows) -> list[Finding]``: the study's claims judged on stored rows (all kinds, all
  statuses: filter your own); ``[]`` when the rows hold none of its kinds;
- ``report(ctx: ReportContext) -> ReportPart``: its figures, captions and HTML sections;
- ``profiles``: ``{name: spec(profile, device) -> SweepSpec}`` for ``attnum reproduce --profile``;
- ``record``: the comparisons a sweep spec's ``record`` may name for this family.

The smallest complete example is the ``speculative`` family: one kind, no findings, no report section
of its own (the generic figures draw its ``metrics``). ``docs/architecture.md`` walks through it.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from attnum.errors import AttnumEnvironmentError, AttnumInputError, bad_value

VERDICTS = ("holds", "does not hold", "not tested", "holds by construction", "mixed")
DEFAULT_KIND = "compare"  # what a spec entry or stored config without ``kind`` is (stores from before kinds)

Row = dict[str, Any]
AxisCheck = tuple[str, Callable[[Any], bool]]


@dataclasses.dataclass(frozen=True, kw_only=True)
class StudyKind:
    """One ``kind`` of sweep point: its dataclass, how it runs, how a spec and a store make one."""

    name: str
    point_type: type
    run: Callable[[Any, tuple[str, ...]], dict[str, Any]]
    axes: Mapping[str, AxisCheck] = dataclasses.field(default_factory=dict)
    from_config: Callable[[dict[str, Any]], Any] | None = None
    expand: Callable[[dict[str, Any]], tuple[Any, ...]] | None = None
    metrics: tuple[tuple[str, str], ...] = ()
    in_specs: bool = True

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ValueError(f"{self.name=} must be a non-empty string")
        if not dataclasses.is_dataclass(self.point_type):
            raise ValueError(f"{self.point_type=} must be a (frozen) dataclass")

    def point(self, config: dict[str, Any]) -> Any:
        """The point a stored config describes."""
        return (self.from_config or (lambda c: self.point_type(**c)))(dict(config))

    def points(self, config: dict[str, Any]) -> tuple[Any, ...]:
        """The points one spec entry (defaults, axes values and ``kind``) stands for."""
        return tuple(self.expand(dict(config))) if self.expand else (self.point(config),)

    def fields(self) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(self.point_type))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Finding:
    """One claim under one policy and variant: the verdict and the numbers behind it."""

    claim_id: str
    figure: str
    claim: str
    policy: str
    variant: str
    verdict: str
    measured: str
    numbers: dict[str, Any]

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict={self.verdict!r} must be one of {VERDICTS}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReportContext:
    """What the report shell hands each family: every row, where figures go, every family's findings."""

    rows: list[Row]
    figures_dir: Path
    findings: tuple[Finding, ...] = ()
    progress: Callable[[str], None] | None = None  # called with a figure's name before it is drawn

    @property
    def done(self) -> list[Row]:
        return [r for r in self.rows if r.get("status") == "done"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReportPart:
    """A family's share of ``report.html``.

    ``figures`` {name: [png, svg]} drawn under ``ctx.figures_dir``; ``captions`` by figure name;
    ``lead`` HTML placed first, under the title (a headline computed from the data, with the figure
    that shows it); ``sections`` HTML placed after the header (families in registry order); ``appendix`` HTML placed
    after "Other figures"; ``placed`` the figure names the sections already show (the rest go under
    "Other figures"); ``groups`` the spec groups the family draws itself (the generic figures skip them).
    """

    figures: Mapping[str, list[Path]] = dataclasses.field(default_factory=dict)
    captions: Mapping[str, str] = dataclasses.field(default_factory=dict)
    lead: tuple[str, ...] = ()
    sections: tuple[str, ...] = ()
    appendix: tuple[str, ...] = ()
    placed: frozenset[str] = frozenset()
    groups: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class Family:
    """One study: its point kinds and what it adds to findings, the report and ``reproduce``."""

    name: str
    kinds: tuple[StudyKind, ...] = ()
    findings: Callable[[list[Row]], list[Finding]] | None = None
    headline: Callable[[list[Row]], list[str]] | None = None  # sentences computed from the rows ([] if none)
    report: Callable[[ReportContext], ReportPart] | None = None
    profiles: Mapping[str, Callable[[str, str], Any]] = dataclasses.field(default_factory=dict)
    record: tuple[str, ...] = ()
    order: int = 100  # where its findings, headline and report section come among the families (lower first)


# ---- lookups (the rest of attnum asks these; family modules are imported on first use) ----------


ENTRY_POINTS = "attnum.families"
"""The entry-point group a study family registers its ``FAMILY`` under (``pyproject.toml``)."""


@functools.cache
def families() -> tuple[Family, ...]:
    """Every registered family (the ``attnum.families`` entry points of the installed packages), by ``order``."""
    from importlib.metadata import entry_points

    found: dict[str, Family] = {}
    source: dict[str, tuple[str, str]] = {}  # name -> (entry point value, how to name it)
    for ep in entry_points(group=ENTRY_POINTS):
        where = f"{ep.name} = {ep.value} (distribution {_dist(ep)})"
        if ep.name in source:
            if ep.value == source[ep.name][0]:
                continue  # one distribution seen twice on the path
            # a second package claiming a family's name would run its own code under that name: refused,
            # whichever comes first on the path (it would silently win)
            raise AttnumEnvironmentError(f"study family {ep.name!r} is registered twice (entry-point group "
                                         f"{ENTRY_POINTS!r}): {source[ep.name][1]} and {where}; uninstall one")
        source[ep.name] = (ep.value, where)
        # An entry point that yields no Family of its name claims nothing: it is left out, said once on
        # stderr (a package's broken import, or an install whose metadata is ahead of its source tree, must
        # not stop every command), and the families that load run as they are.
        try:
            family = ep.load()
        except Exception as why:  # noqa: BLE001 - any failure of a package's import is that package's
            _left_out(f"{where} cannot be loaded ({type(why).__name__}: "
                      f"{str(why).splitlines()[0][:160] if str(why) else 'no message'})")
            continue
        if not isinstance(family, Family) or family.name != ep.name:
            _left_out(f"{where} is {type(family).__name__}"
                      f"{' named ' + repr(family.name) if isinstance(family, Family) else ''}, not a Family named "
                      f"{ep.name!r}")
            continue
        found[ep.name] = family
    if not found:
        raise AttnumEnvironmentError(f"no study family is registered (entry-point group {ENTRY_POINTS!r} of the "
                                     "installed attnum): reinstall attnum (pip install -e .)")
    return tuple(sorted(found.values(), key=lambda f: (f.order, f.name)))


def _left_out(what: str) -> None:
    print(f"attnum: warning: study family entry point {what}; left out (fix or uninstall that package; for "
          "attnum's own, reinstall it: pip install -e .)", file=sys.stderr)


def _dist(ep) -> str:
    """The distribution an entry point comes from, as ``name version`` (``?`` when unknown)."""
    dist = getattr(ep, "dist", None)
    try:
        return f"{dist.metadata['Name']} {dist.version}" if dist is not None else "?"
    except Exception:  # noqa: BLE001 - metadata written by hand: the name is only for the message
        return "?"


@functools.cache
def kinds() -> dict[str, StudyKind]:
    """{kind name: StudyKind} over every family; a name registered twice is a bug."""
    out: dict[str, StudyKind] = {}
    owner: dict[str, str] = {}
    for family in families():
        for kind in family.kinds:
            if kind.name in out:  # two families would each run (and store) points of one kind
                raise AttnumEnvironmentError(f"kind {kind.name!r} is registered twice: by study family "
                                             f"{owner[kind.name]!r} and by {family.name!r}; uninstall the package "
                                             "of one (entry-point group 'attnum.families')")
            out[kind.name], owner[kind.name] = kind, family.name
    return out


def get_kind(name: str | None) -> StudyKind:
    """The kind called ``name`` (None: :data:`DEFAULT_KIND`); unknown names fail listing the known ones."""
    name = DEFAULT_KIND if name is None else name
    table = kinds()
    if name not in table:
        raise bad_value("kind", name, f"one of {tuple(table)}", choices=table)
    return table[name]


def point_from_config(config: dict[str, Any]) -> Any:
    """The point a stored config describes, whatever its kind."""
    return get_kind(config.get("kind")).point(config)


_UNREADABLE = (AttnumInputError, TypeError, ValueError, KeyError, AttributeError, OverflowError, RecursionError)


class UnreadableRow(ValueError):
    """A stored row whose config its kind cannot read (:func:`readable_config`)."""


def readable_config(row: Row) -> dict[str, Any]:
    """A stored row's config as its kind reads it: the point it describes must rebuild (every value of the
    type its field takes: a store written by hand may hold ``"mma": ["sm80"]``), and the fields it leaves
    out are filled with the point's (its defaults); the values it holds are kept as stored. A row of a kind
    no installed family registers is returned as it is (no family reads it). :class:`UnreadableRow` saying
    what is wrong otherwise (an error of the registry itself, e.g. a family registered twice, is raised as it is)."""
    config = row.get("config")
    kind = row.get("kind")
    if not isinstance(config, dict) or kind not in kinds():
        return config
    if config.get("kind", kind) != kind:
        raise UnreadableRow(f"config kind {config.get('kind')!r} is not the row's kind {kind!r}")
    try:
        point = kinds()[kind].point({**config, "kind": kind})
        full = point.config()
    except AttnumEnvironmentError:
        raise
    except _UNREADABLE as why:
        raise UnreadableRow(f"config does not describe a {kind} point ({type(why).__name__}: "
                         f"{str(why).splitlines()[0][:160] if str(why) else 'no message'})") from None
    return {**full, **config}


def axis_checks() -> dict[str, AxisCheck]:
    """Every sweep axis any kind takes, with its validator (the first kind to declare it wins)."""
    out: dict[str, AxisCheck] = {}
    for kind in kinds().values():
        for name, check in kind.axes.items():
            out.setdefault(name, check)
    return out


def spec_kinds() -> tuple[str, ...]:
    """The kinds a sweep spec may name."""
    return tuple(name for name, kind in kinds().items() if kind.in_specs)


def kind_metrics() -> dict[str, tuple[tuple[str, str], ...]]:
    """{kind: ((metric path, label), ...)} for the report's generic figures (kinds that register some)."""
    return {name: kind.metrics for name, kind in kinds().items() if kind.metrics}


def record_choices() -> tuple[str, ...]:
    """The comparisons a spec's ``record`` may name (every family's, in registry order)."""
    return tuple(dict.fromkeys(r for f in families() for r in f.record))


def profiles() -> dict[str, Callable[[str, str], Any]]:
    """{profile name: spec(profile, device)} for ``attnum reproduce``, over every family."""
    return {name: spec for f in families() for name, spec in f.profiles.items()}


def all_headlines(rows: list[Row]) -> list[str]:
    """Every family's headline sentences for ``rows``, in registry order (what ``reproduce`` prints first)."""
    return [s for family in families() if family.headline for s in family.headline(rows)]


def all_findings(rows: list[Row]) -> list[Finding]:
    """Every family's findings for ``rows``, in registry order."""
    return [f for family in families() if family.findings for f in family.findings(rows)]
