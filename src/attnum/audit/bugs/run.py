"""``attnum bugs run``: fetch every version a selection of cases needs, check each can run, then audit each
(case, version) into a results store, one committed row per point.

Everything that can refuse does so before the store is touched (nothing half-written): an unknown case id
(exit 2), a download that fails or a wheel or kernel file whose sha256 is not the pin table's, a target that
cannot call a version's signature, an installed package that is not the case's version (exit 3). Then each
point runs (:mod:`attnum.audit.bugs.point`) and is committed as it finishes, so a run cut short keeps what it
finished and a re-run into the same folder does only the rest (the store is the sweep's:
:mod:`attnum.store.db`, kind ``bug-case``; ``attnum report DIR`` draws the recall table from it).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from attnum.audit.bugs.corpus import Case
from attnum.audit.bugs.point import BugPoint
from attnum.audit.bugs.point import run as run_point
from attnum.errors import AttnumEnvironmentError

SPEC_NAME = "bugs"


class Unavailable(AttnumEnvironmentError):
    """A case cannot run here (exit 3): its files could not be fetched or verified, or its target refuses."""


@dataclass(frozen=True, kw_only=True)
class Options:
    """What ``attnum bugs run`` asks; fields map 1:1 onto its flags."""

    all_probes: bool = False
    seed: int = 0
    quiet: bool = False  # pip's own output during downloads


def _installed_problem(case: Case) -> str:
    """'' when the installed package is the case's version and its kernel file the case's bytes."""
    import importlib.util
    from importlib import metadata

    from attnum.kernels.wheels.cache import sha256_of

    try:
        have = metadata.version(case.package)
    except metadata.PackageNotFoundError:
        return f"{case.package} is not installed (the case runs the installed {case.package} {case.broken})"
    if have != case.broken:
        return f"{case.package} {have} is installed; the case runs {case.package} {case.broken}"
    spec = importlib.util.find_spec(case.package)
    roots = list(spec.submodule_search_locations or []) if spec else []
    path = Path(roots[0]).parent / case.kernel if roots else None
    if path is None or not path.is_file():
        return f"the installed {case.package} has no {case.kernel}"
    if sha256_of(path) != case.kernel_sha256:
        return f"the installed {path} is not the file of {case.package} {case.broken} (sha256 differs)"
    return ""


def prepare(cases: tuple[Case, ...], options: Options, say: Callable[[str], None]) -> None:
    """Fetch and check every version the cases need; raises :class:`Unavailable` (one line) on the first that
    cannot run, before anything is written."""
    from attnum.kernels.registry import kernel_status
    from attnum.kernels.wheels import source as wheels

    for case in cases:
        for role, version in case.versions():
            if case.source == "installed":
                why = _installed_problem(case)
            else:
                if wheels.missing(case.package, version):
                    say(f"fetching {case.package} {version} ({wheels.wheel(case.package, version).size / 1e6:.3g} MB)")
                try:
                    wheels.fetch(case.package, version, quiet=options.quiet)
                except AttnumEnvironmentError as err:
                    raise Unavailable(f"case {case.id}: {err}") from None
                ok, why = kernel_status(case.target, "cpu", version)
                why = "" if ok else why
            if why:
                raise Unavailable(f"case {case.id}: {case.spec(role)} cannot run here: {why}")


def points(cases: tuple[Case, ...], options: Options) -> list[BugPoint]:
    out = []
    for case in cases:
        entry = hashlib.sha256(json.dumps(asdict(case), sort_keys=True).encode()).hexdigest()[:16]
        for role, _ in case.versions():
            out.append(BugPoint(case=case.id, role=role, target=case.spec(role), dtype=case.dtype, probes=case.probes,
                                all_probes=options.all_probes, seed=options.seed, shows=case.shows, arch=case.arch,
                                entry=entry))
    return out


def spec_hash(pts: list[BugPoint]) -> tuple[str, dict[str, Any]]:
    canonical = {"name": SPEC_NAME, "points": sorted(p.key for p in pts)}
    return hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()[:16], canonical


def check_out(pts: list[BugPoint], out: Path, *, command: str) -> None:
    """Refuse, before any download, an ``out`` whose store cannot take these points: not an attnum store, a
    newer schema, or another spec's results (a folder without a store is fine)."""
    from attnum.store.db import DB_NAME, open_store

    if not (out / DB_NAME).is_file() or not (out / DB_NAME).stat().st_size:
        return
    digest, _ = spec_hash(pts)
    with open_store(out) as store:
        store.holds_spec(name=SPEC_NAME, spec_hash=digest, source=command)


def run_points(pts: list[BugPoint], out: Path, *, command: str,
               progress: Callable[[int, int, BugPoint, dict[str, Any]], None] | None = None) -> Path:
    """Audit every point not already done in ``out``'s store, committing each as it finishes; returns the
    store's path."""
    from attnum.audit.engine import environment
    from attnum.store.db import Store

    digest, canonical = spec_hash(pts)
    with Store(out, command=command) as store:
        store.bind_spec(name=SPEC_NAME, spec_hash=digest, canonical=canonical, source=command)
        store.plan((p.key, p.kind, ("bugs",), p.config()) for p in pts)
        done = store.done_keys()
        todo = [p for p in pts if p.key not in done]
        run_id = store.begin_run(command=command, n_todo=len(todo), executor="local", jobs=1)
        status = "failed"
        failed = 0
        try:
            for i, p in enumerate(todo, 1):
                started, t0 = time.time(), time.perf_counter()
                try:
                    metrics, error = run_point(p), None
                except Exception as err:  # noqa: BLE001 - a point that breaks is a failed row, the run goes on
                    metrics, error = None, f"{type(err).__name__}: {err}"
                result = {"key": p.key, "status": "done" if error is None else "failed", "metrics": metrics,
                          "error": error, "started_at": started, "wall_s": time.perf_counter() - t0,
                          "env": environment(p.device), "worker": f"{socket.gethostname()}:{os.getpid()}"}
                store.write(result, run_id)
                failed += error is not None
                if progress is not None:
                    progress(i, len(todo), p, result)
            status = "complete" if not failed else "complete-with-failures"
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        finally:
            store.end_run(run_id, status)
        return store.path
