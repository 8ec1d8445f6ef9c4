"""Static scan of kernel sources for hard-coded mask sentinels and related numerical smells.

Python (incl. Triton/JAX), CUDA and C/C++ files are read line by line, comments and string contents
blanked; each rule looks at one line's tokens, or at a short window where the smell is an ordering
(softcap after masking) or a mixture (exp2/log2 beside exp/log near an LSE). Every rule costs time
linear in the line (``scan_rules``): no input can stall the scan, and no line is cut short.

A finite "infinity" is a literal of magnitude >= SENTINEL_MIN (5e4, 1e4, 1e9, 1e30, 65504, 3.4e38),
``FLT_MAX``-like constants, a ``finfo(...)``-derived value, or a name the same file assigns one. Each
finding names file:line (lines counted at "\\n", as editors and ``grep -n`` count them), the line, a
severity, and why the construct is risky.

Paths: skip rules (``.git``, ``.venv``, ``node_modules``, ...) apply only to folders *below* a root
named; a root is read whatever its own name or the names above it. A path that cannot be read (missing,
not a regular file or folder, permission denied, a symbolic-link loop, a folder that cannot be listed)
is an error, and so is a scan that finds no source file: never a silent "0 files".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from attnum.audit.scan import context as sc
from attnum.audit.scan import lex
from attnum.audit.scan import names as sn
from attnum.audit.scan import rules as sr
from attnum.audit.scan.files import (  # noqa: F401 - re-exported: the scanner's public surface is this module
    C_SUFFIXES,
    CACHE_DIRS,
    PY_SUFFIXES,
    SKIP_DIRS,
    SOURCE_SUFFIXES,
    iter_sources,
    package_paths,
    read_source,
)
from attnum.errors import AttnumEnvironmentError, AttnumInputError, bad_value  # noqa: F401

SEVERITIES = ("low", "medium", "high")
SENTINEL_MIN = lex.SENTINEL_MIN
WINDOW = sr.WINDOW


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One smell at one place."""

    path: str
    line: int
    rule: str
    severity: str
    snippet: str
    why: str

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"{self.severity=} must be one of {SEVERITIES}")


@dataclass(frozen=True, kw_only=True)
class Rule:
    name: str
    severity: str
    why: str


_FINFO_WHY = ("finite and dtype-dependent: a fully masked row becomes a uniform average of V (torch >= 2.5 "
              "and flash-attn give 0), m - fill overflows to inf, and finfo of a narrower dtype than the "
              "softmax's (finfo(float16).min in an fp32 softmax) is a 6.5e4 sentinel, the FlashInfer bug "
              "(flashinfer#4267); prefer -inf with a guard for empty rows")
RULES = (
    Rule(name="finite-inf-constant", severity="high",
         why="a constant named like infinity/mask value holds a finite number: logits beyond it are "
             "treated as masked or empty (flashinfer#4267: math::inf = 5e4 zeroed real rows)"),
    Rule(name="finite-mask-fill", severity="high",
         why="masked logits filled with a finite value: valid logits near or below it leak weight to "
             "masked keys or let them dominate (lattice#361, flashinfer#4401); use -inf and guard empty rows"),
    Rule(name="finite-running-max-init", severity="high",
         why="the online-softmax running max starts at a finite value: a row whose logits all lie below "
             "it never raises the max and comes out as zeros (flashinfer#4267 / #4450)"),
    Rule(name="finfo-min-additive", severity="medium",
         why="an additive finfo.min mask: finfo.min + finfo.min (or + a score below -16 in fp16) "
             "overflows to -inf and rows become NaN (transformers#17306, #27114)"),
    Rule(name="flt-max-fill", severity="medium",
         why="-FLT_MAX as mask fill or initial max is finite: fully masked rows give a uniform average "
             "instead of 0, and it overflows to -inf in fp16/bf16 arithmetic"),
    Rule(name="finfo-inf-constant", severity="low",
         why="a constant named like infinity/mask value is derived from finfo (-0.7 * finfo.max, as in "
             "JAX Pallas' DEFAULT_MASK_VALUE): " + _FINFO_WHY),
    Rule(name="finfo-mask-fill", severity="low",
         why="masked logits filled with a finfo-derived value (finfo(dtype).min, -finfo(dtype).max): " + _FINFO_WHY),
    Rule(name="finfo-running-max-init", severity="low",
         why="the running max starts at a finfo-derived value rather than -inf: " + _FINFO_WHY),
    Rule(name="softcap-after-mask", severity="medium",
         why="softcap (tanh) applied after masking maps -inf to -softcap, a finite logit: masked keys "
             "leak (flash-attention#1025, sgl-kernel-xpu#491); cap first, then mask"),
    Rule(name="lse-base-mix", severity="low",
         why="exp2/log2 and exp/log near an LSE: a base-2 LSE merged as natural log silently "
             "misweights partial results (sglang#40903, vllm#52796)"),
)
_RULE = {r.name: r for r in RULES}
_ORDER = {r.name: i for i, r in enumerate(RULES)}


def scan_text(text: str, path: str, *, python: bool) -> list[Finding]:
    """Findings in one file's text, in line order (rules of one line in catalogue order)."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    raw = text.split("\n")  # the one line index of this file: snippets and line numbers both come from it
    lines = lex.code_lines(text, python)
    names = sn.sentinel_names(lines, python)
    hits: list[set[str]] = [set() for _ in lines]
    masking, lse, b2, be = (bytearray(len(lines)) for _ in range(4))
    for i, line in enumerate(lines):
        if not line or line.isspace():
            continue
        # Substring tests (C speed) decide which token rules can fire; a line is lexed only if one can.
        t = lex.tokens(line) if names else None
        if (lex.BIGISH.search(line) or "finfo" in line or "_MAX" in line or "numeric_limits" in line
                or "HUGE_VAL" in line or "CUDART_INF" in line or (t and not names.keys().isdisjoint(t))):
            t = t or lex.tokens(line)
            atoms = sn.finfo_atoms(t)
            fin = sn.finfo_exprs(t, atoms)
            sent = sr.sentinels(t, names, fin)
            hits[i] |= sr.sentinel_hits(t, sent, fin, {k for k, _, kind in atoms if kind == "min"}, python)
        if "mask" in line or "inf" in line or "INFINITY" in line:
            t = t or lex.tokens(line)
            masking[i] = sc.masking(t)
        if "tanh" in line and sc.softcap(t or lex.tokens(line)):
            hits[i].add("softcap-after-mask")  # kept only if a mask precedes (below)
        if "lse" in line or "LSE" in line or "logsumexp" in line or "log_sum_exp" in line:
            lse[i] = sc.lse(t or lex.tokens(line))
        if "exp2" in line or "log2" in line or "ex2" in line or "lg2" in line or "LOG2E" in line:
            b2[i] = sc.base2(t or lex.tokens(line))
        if "exp" in line or "log" in line:
            be[i] = sc.base_e(t or lex.tokens(line))
    mask_before, b2_sum, be_sum = _prefix(masking), _prefix(b2), _prefix(be)
    findings: list[Finding] = []
    n = len(lines)
    for i in range(n):
        rules = hits[i]
        if "softcap-after-mask" in rules and mask_before[i] - mask_before[max(0, i - WINDOW)] == 0:
            rules.discard("softcap-after-mask")
        if lse[i]:
            lo, hi = max(0, i - WINDOW), min(n, i + WINDOW + 1)
            if b2_sum[hi] - b2_sum[lo] and be_sum[hi] - be_sum[lo]:
                rules.add("lse-base-mix")
        for name in sorted(rules, key=_ORDER.__getitem__):
            rule = _RULE[name]
            findings.append(Finding(path=path, line=i + 1, rule=name, severity=rule.severity,
                                    snippet=raw[i].strip()[:200], why=rule.why))
    return findings


def _prefix(flags: bytearray) -> list[int]:
    """Prefix sums: out[i] = number of set flags before index i."""
    out, acc = [0], 0
    for f in flags:
        acc += f
        out.append(acc)
    return out


@dataclass(frozen=True, kw_only=True)
class ScanReport:
    """What a scan read and found."""

    findings: tuple[Finding, ...]
    files_scanned: int
    skipped: tuple[str, ...] = field(default=())  # "PATH (why)" for folders/links below a root not read


def scan(paths: Iterable[str | Path], *, min_severity: str = "low") -> ScanReport:
    """Every source file under ``paths`` scanned; findings at or above ``min_severity``.

    Raises AttnumInputError (or AttnumEnvironmentError) on a path that cannot be read and when no
    source file was found: a scan that read nothing must not read as clean."""
    if min_severity not in SEVERITIES:
        raise bad_value("min_severity", min_severity, f"one of {SEVERITIES}")
    paths = [str(p) for p in paths]
    if not paths:
        raise AttnumInputError("scan needs at least one PATH or --package NAME")
    floor = SEVERITIES.index(min_severity)
    findings, n, skipped = [], 0, []
    for f in iter_sources(paths, skipped):
        n += 1
        text = read_source(f)
        findings += [x for x in scan_text(text, str(f), python=f.suffix in PY_SUFFIXES)
                     if SEVERITIES.index(x.severity) >= floor]
    if n == 0:
        raise AttnumInputError(f"no source files under {', '.join(paths)} ({' '.join(SOURCE_SUFFIXES)}"
                               + (f"; skipped {len(skipped)} folder(s) such as {skipped[0]}" if skipped else "")
                               + ")")
    return ScanReport(findings=tuple(findings), files_scanned=n, skipped=tuple(skipped))


def scan_paths(paths: Iterable[str | Path], *, min_severity: str = "low") -> tuple[list[Finding], int]:
    """(findings at or above ``min_severity``, number of files scanned); see :func:`scan`."""
    report = scan(paths, min_severity=min_severity)
    return list(report.findings), report.files_scanned
