"""The corpus as data: ``corpus.toml`` beside this module, one ``[[case]]`` per upstream bug (see its header).

Each case names a built-in audit target and the versions to run it at (``vllm-unified@0.30.0``); there is no
code per case. The table is checked as it loads, against the pin table of :mod:`attnum.kernels.wheels.pins`
(every wheel name and sha256 must be the pinned one), the registry (the target exists and runs that package's
files) and the probe catalogue; a malformed table is a bug in attnum (``ValueError``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources

from attnum.errors import AttnumInputError, did_you_mean

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

OPEN = "open"
ROLES = ("broken", "fixed")
DTYPES = ("fp16", "bf16", "fp32")
_ID = re.compile(r"[a-z0-9][a-z0-9.-]*")
SYMPTOMS = frozenset({"fail", "unwritten", "out of bounds"})
"""Statuses that are a verdict on what the kernel did (not a crash, a refusal or a time-out)."""
SHOWS = ("fail", "unwritten")
"""A case's ``shows`` unless it says otherwise: a verdict on the output the kernel wrote."""


@dataclass(frozen=True, kw_only=True)
class Case:
    """One upstream bug: where it lives, the versions that have it and do not, and what shows it."""

    id: str
    package: str
    links: tuple[str, ...]
    kernel: str
    target: str
    broken: str
    fixed: str
    dtype: str
    probes: tuple[str, ...]
    symptom: str
    notes: str = ""
    source: str = "wheel"  # or "installed": the installed package runs (jax)
    wheels: tuple[tuple[str, str, str], ...] = ()  # (role, wheel file name, sha256)
    kernel_sha256: str = ""  # source "installed": the sha256 the installed kernel file must have
    # The statuses of a probe case that ARE the upstream symptom: a wrong or unwritten output by default; a bug that
    # reads past a tensor adds "out of bounds". A case of another status (another bug of the same kernel) is not it.
    shows: tuple[str, ...] = SHOWS
    # The GPU whose arithmetic the interpreted kernel runs under (attnum.audit.config.AuditConfig.arch): the audit's
    # default, sm90, unless the kernel's instructions are modelled on another one only (FP8 mma.sync: sm89).
    arch: str = "sm90"

    def __post_init__(self) -> None:
        if not _ID.fullmatch(self.id):
            raise ValueError(f"case id={self.id!r} must be lower-case letters, digits, '.' and '-'")
        if self.dtype not in DTYPES:
            raise ValueError(f"case {self.id}: dtype={self.dtype!r} must be one of {DTYPES}")
        if not self.probes or not self.symptom.strip():
            raise ValueError(f"case {self.id}: probes and symptom are required")
        if self.source not in ("wheel", "installed"):
            raise ValueError(f"case {self.id}: source={self.source!r} must be 'wheel' or 'installed'")
        if not self.shows or not set(self.shows) <= SYMPTOMS:
            raise ValueError(f"case {self.id}: shows={self.shows!r} must name statuses of {sorted(SYMPTOMS)}")
        if self.source == "installed" and (self.fixed != OPEN or not self.kernel_sha256):
            raise ValueError(f"case {self.id}: an installed package runs one version: fixed='open' and kernel_sha256")

    @property
    def open(self) -> bool:
        return self.fixed == OPEN

    def versions(self) -> tuple[tuple[str, str], ...]:
        """((role, version), ...): the broken one, then the fixed one unless the bug is open."""
        return (("broken", self.broken),) + (() if self.open else (("fixed", self.fixed),))

    def spec(self, role: str) -> str:
        """The audit target of ``role``: ``TARGET@VERSION`` (the installed package's target as it is)."""
        version = dict(self.versions())[role]
        return self.target if self.source == "installed" else f"{self.target}@{version}"

    def label(self) -> str:
        return f"{self.broken} -> {self.fixed}"


def _check_against_tables(case: Case) -> None:
    """The case's package, versions, wheels, target and probes are the pin table's, registry's and catalogue's."""
    from attnum.audit.probes import PROBES
    from attnum.kernels.registry import KERNELS
    from attnum.kernels.triton.tensor_core import ARCHES
    from attnum.kernels.wheels.pins import table

    if case.arch not in ARCHES:
        raise ValueError(f"case {case.id}: arch={case.arch!r} must be one of {ARCHES}")
    kern = KERNELS.get(case.target)
    if kern is None:
        raise ValueError(f"case {case.id}: target={case.target!r} is not a built-in kernel")
    bad = [p for p in case.probes if p not in PROBES]
    if bad:
        raise ValueError(f"case {case.id}: probes {bad} are not in the catalogue")
    if case.source == "installed":
        if kern.package != case.package or kern.source is not None:
            raise ValueError(f"case {case.id}: {case.target} does not run the installed {case.package}")
        return
    pkg = table().get(case.package)
    if pkg is None or kern.source != case.package:
        raise ValueError(f"case {case.id}: {case.target} does not run {case.package}'s fetched files")
    got = {role: (name, sha) for role, name, sha in case.wheels}
    for role, version in case.versions():
        w = pkg.versions.get(version)
        if w is None:
            raise ValueError(f"case {case.id}: {case.package} {version} is not in the pin table")
        if got.get(role) != (w.name, w.sha256):
            raise ValueError(f"case {case.id}: its {role} wheel {got.get(role)} is not the pinned {w.name}, {w.sha256}")
    if case.kernel not in pkg.versions[case.broken].paths:
        raise ValueError(f"case {case.id}: kernel {case.kernel!r} is not a pinned file of {case.package} {case.broken}")


def parse(text: str, *, check: bool = True) -> tuple[Case, ...]:
    raw = tomllib.loads(text)
    cases = []
    for entry in raw.get("case", []):
        e = dict(entry)
        wheels = tuple((role, e.pop(f"{role}_wheel"), e.pop(f"{role}_sha256")) for role in ROLES
                       if f"{role}_wheel" in e)
        case = Case(**{**e, "links": tuple(e.get("links", ())), "probes": tuple(e["probes"]), "wheels": wheels,
                       **({"shows": tuple(e["shows"])} if "shows" in e else {})})
        if check:
            _check_against_tables(case)
        cases.append(case)
    ids = [c.id for c in cases]
    if len(set(ids)) != len(ids):
        raise ValueError(f"case ids repeat: {sorted({i for i in ids if ids.count(i) > 1})}")
    return tuple(cases)


@functools.cache
def corpus() -> tuple[Case, ...]:
    """Every case of the shipped ``corpus.toml``, in its order."""
    return parse(resources.files(__package__).joinpath("corpus.toml").read_text(encoding="utf-8"))


def select(ids: list[str] | tuple[str, ...] = ()) -> tuple[Case, ...]:
    """The cases named by ``ids`` (all when empty), in the order given; an unknown id is one line listing
    the known ones (exit 2)."""
    known = {c.id: c for c in corpus()}
    if not ids:
        return corpus()
    out = []
    for i in ids:
        if i not in known:
            raise AttnumInputError(f"case={i!r} is not allowed; {did_you_mean(i, known)}expected a case id of "
                                   f"`attnum bugs list`: {', '.join(known)}")
        if known[i] not in out:
            out.append(known[i])
    return tuple(out)
