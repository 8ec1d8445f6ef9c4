"""Static scan of kernel sources for hard-coded mask sentinels and related numerical smells.

Python (incl. Triton), CUDA and C/C++ files are read line by line, comments removed; each rule is a
regular expression over one line, or over a short window where the smell is an ordering (softcap
after masking) or a mixture (exp2/log2 beside exp/log near an LSE). A finite "infinity" is a numeric
literal of magnitude >= SENTINEL_MIN (5e4, 1e4, 1e9, 1e30, 65504, 3.4e38, FLT_MAX, ...) or a name
that the same file assigns one. Each finding names file:line, the line, a severity, and why the
construct is risky (research/edge-cases.md §1, §2.3, §2.9, §2.13; research/aesthetics.md §8).
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from attnum.errors import AttnumInputError, bad_value

SEVERITIES = ("low", "medium", "high")
PY_SUFFIXES = (".py", ".pyi")
C_SUFFIXES = (".cu", ".cuh", ".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".hip", ".metal")
SKIP_DIRS = {".git", "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", "node_modules", ".venv", "venv"}
SENTINEL_MIN = 1e3  # below this a literal is not plausibly standing in for infinity
WINDOW = 8  # lines: how far back a softcap looks for a mask, how far an LSE looks for mixed bases

_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[fFlL]?"
_FLT_MAX = r"(?:FLT_MAX|DBL_MAX|HUGE_VALF?|CUDART_INF_F_FINITE|std::numeric_limits<\w+>::max\(\)|finfo\([^)]*\)\.max)"
_INF_NAME = r"[A-Za-z_]*(?:inf|infinity|INF|Inf|INFINITY|mask_value|MASK_VALUE|mask_fill|MASK_FILL|neg_large|" \
            r"NEG_LARGE|large_neg|LARGE_NEG|big_neg|BIG_NEG|min_value|MIN_VALUE|masked_value|MASKED_VALUE)[A-Za-z_0-9]*"
_MAX_NAME = r"\b(?:m_i|m_ij|m_prev|m_new|m_old|mi|row_max|rowmax|max_score|running_max|max_logit|m_val|mmax|m)\b"
_FILL_CALL = r"\b(?:masked_fill_?|where|full|full_like|fill_|fill|new_full|select|tl\.where|tl\.full|jnp\.where)\s*\("
_DEF = (re.compile(rf"(?:^|[;{{(,]|\bconstexpr\b|\bconst\b|\bfloat\b|\bdouble\b|\bauto\b)\s*([A-Za-z_]\w*)\s*=\s*"
                   rf"\(?\s*([-+]?\s*{_NUM})\s*\)?\s*(?:[;,}})]|$)"),
        re.compile(rf"#define\s+([A-Za-z_]\w*)\s+\(?\s*([-+]?\s*{_NUM})\s*\)?\s*$"))


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
    pattern: str  # {BIG}: a large unsigned literal; {NEG}: a negative finite infinity (literal or name)
    why: str


RULES = (
    Rule(name="finite-inf-constant", severity="high",
         pattern=rf"\b{_INF_NAME}\b\s*=\s*\(?\s*(?:[-+]?\s*{_NUM}\s*\*\s*)?[-+]?\s*(?:{{BIG}})|#define\s+{_INF_NAME}\s+\(?\s*[-+]?(?:{{BIG}})",
         why="a constant named like infinity/mask value holds a finite number: logits beyond it are "
             "treated as masked or empty (flashinfer#4267: math::inf = 5e4 zeroed real rows)"),
    Rule(name="finite-mask-fill", severity="high",
         pattern=rf"{_FILL_CALL}[^;]*?,\s*\(?(?:{{NEG}})|\?\s*[^:;]+:\s*(?:{{NEG}})|\?\s*(?:{{NEG}})\s*:|"
                 rf"\+=\s*tl\.where\([^;]*(?:{{NEG}})",
         why="masked logits filled with a finite value: valid logits near or below it leak weight to "
             "masked keys or let them dominate (lattice#361, flashinfer#4401); use -inf and guard empty rows"),
    Rule(name="finite-running-max-init", severity="high",
         pattern=rf"{_MAX_NAME}\s*(?:\[[^\]]*\])?\s*=(?!=)[^;]*?(?:{{NEG}})",
         why="the online-softmax running max starts at a finite value: a row whose logits all lie below "
             "it never raises the max and comes out as zeros (flashinfer#4267 / #4450)"),
    Rule(name="finfo-min-additive", severity="medium",
         pattern=r"finfo\([^)]*\)\.min[^;\n]*\+|\+[^;\n]*finfo\([^)]*\)\.min",
         why="an additive finfo.min mask: finfo.min + finfo.min (or + a score below -16 in fp16) "
             "overflows to -inf and rows become NaN (transformers#17306, #27114)"),
    Rule(name="flt-max-fill", severity="medium",
         pattern=rf"{_FILL_CALL}[^;]*-\s*{_FLT_MAX}|{_MAX_NAME}\s*=\s*-\s*{_FLT_MAX}",
         why="-FLT_MAX as mask fill or initial max is finite: fully masked rows give a uniform average "
             "instead of 0, and it overflows to -inf in fp16/bf16 arithmetic"),
)
_SOFTCAP = re.compile(r"\btanh\s*\(.*(?:softcap|soft_cap|logit_cap|logits_soft_cap|cap)|"
                      r"(?:softcap|soft_cap|logit_cap|logits_soft_cap)\w*\s*\*\s*[\w.]*tanh")
_MASKING = re.compile(r"masked_fill|-inf|float\(['\"]-inf|-math\.inf|-INFINITY|-torch\.inf|where\([^)]*mask")
_LSE = re.compile(r"\b(?:lse|LSE|logsumexp|log_sum_exp|softmax_lse)\w*")
_BASE2 = re.compile(r"\b(?:exp2|log2|exp2f|log2f|ex2|lg2)\b|math\.log2|\bLOG2E\b|log2e|M_LOG2E")
_BASE_E = re.compile(r"(?<![\w.])(?:torch\.|tl\.|math\.|np\.|__)?(?:exp|log|expf|logf)\s*\(")


def _strip_comment(line: str, python: bool) -> str:
    """Drop a trailing comment and blank string-literal contents (prose, not code)."""
    marker = "#" if python else "//"
    out, quote, i = [], None, 0
    while i < len(line):
        ch = line[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = None
                out.append(ch)
        elif ch in "'\"":
            quote = ch
            out.append(ch)
        elif line.startswith(marker, i):
            break
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _code_lines(text: str, python: bool) -> list[str]:
    """Lines with comments blanked (line numbers kept); C block comments too."""
    out, in_block = [], False
    for raw in text.splitlines():
        line = raw
        if python:  # blank triple-quoted strings (docstrings): prose, not code
            pieces = re.split(r'"{3}|\'{3}', line)
            kept = [p for i, p in enumerate(pieces) if (i % 2 == 0) != in_block]
            in_block = in_block != (len(pieces) % 2 == 0)
            line = " ".join(kept)
        else:
            if in_block:
                end = line.find("*/")
                line, in_block = (("", True) if end < 0 else (line[end + 2:], False))
            while "/*" in line:
                start = line.index("/*")
                end = line.find("*/", start + 2)
                if end < 0:
                    line, in_block = line[:start], True
                    break
                line = line[:start] + line[end + 2:]
        out.append(_strip_comment(line, python))
    return out


def _sentinel_names(lines: list[str]) -> dict[str, float]:
    """File-local names assigned a finite-infinity literal (``MASK_VALUE = -5e4``, ``inf = 5e4``)."""
    names = {}
    for line in lines:
        for rx in _DEF:
            for m in rx.finditer(line):
                try:
                    value = float(m.group(2).replace(" ", "").rstrip("fFlL"))
                except ValueError:
                    continue
                if abs(value) >= SENTINEL_MIN:
                    names[m.group(1)] = value
    return names


_BIG = r"(?:\d{4,}\.?\d*|\d+\.?\d*[eE]\+?(?:[3-9]|\d{2,})|\.\d+[eE]\+?(?:[4-9]|\d{2,}))[fFlL]?\b"


def _negative_sentinel(names: dict[str, float]) -> str:
    """Regex for a negative finite infinity: ``-5e4``, ``-FLT_MAX``, or a file-local name holding one
    (``MASK_VALUE`` when ``MASK_VALUE = -5e4``; ``-inf`` when ``inf = 5e4``, as in flashinfer)."""
    alts = [rf"-\s*{_BIG}", rf"-\s*{_FLT_MAX}"]
    alts += [rf"(?<![\w.]){re.escape(n)}\b" for n, v in names.items() if v < 0]
    alts += [rf"-\s*(?:[\w]+::)?{re.escape(n)}\b" for n, v in names.items() if v > 0]
    return "|".join(f"(?:{a})" for a in alts)


def scan_text(text: str, path: str, *, python: bool) -> list[Finding]:
    """Findings in one file's text."""
    lines = _code_lines(text, python)
    names = _sentinel_names(lines)
    neg = _negative_sentinel(names)
    compiled = [(r, re.compile(r.pattern.replace("{BIG}", _BIG).replace("{NEG}", neg))) for r in RULES]
    findings: list[Finding] = []

    def add(i: int, rule: str, severity: str, why: str) -> None:
        findings.append(Finding(path=path, line=i + 1, rule=rule, severity=severity,
                                snippet=text.splitlines()[i].strip()[:200], why=why))

    for i, line in enumerate(lines):
        if not line.strip():
            continue
        for rule, rx in compiled:
            if rx.search(line):
                add(i, rule.name, rule.severity, rule.why)
        if _SOFTCAP.search(line) and any(_MASKING.search(prev) for prev in lines[max(0, i - WINDOW):i]):
            add(i, "softcap-after-mask", "medium",
                "softcap (tanh) applied after masking maps -inf to -softcap, a finite logit: masked keys "
                "leak (flash-attention#1025, sgl-kernel-xpu#491); cap first, then mask")
        if _LSE.search(line):
            window = lines[max(0, i - WINDOW):i + WINDOW + 1]
            if any(_BASE2.search(w) for w in window) and any(_BASE_E.search(w) for w in window):
                add(i, "lse-base-mix", "low",
                    "exp2/log2 and exp/log near an LSE: a base-2 LSE merged as natural log silently "
                    "misweights partial results (sglang#40903, vllm#52796)")
    return _dedupe(findings)


def _dedupe(findings: list[Finding]) -> list[Finding]:
    """One finding per line and rule; several rules on one line all stay."""
    seen, out = set(), []
    for f in findings:
        if (f.line, f.rule) not in seen:
            seen.add((f.line, f.rule))
            out.append(f)
    return out


def iter_sources(paths: Iterable[str | Path]) -> Iterator[Path]:
    """Source files under the given files/folders, sorted, skipping caches and VCS folders."""
    for p in map(Path, paths):
        if not p.exists():
            raise AttnumInputError(f"path={str(p)!r} does not exist")
        if p.is_file():
            yield p
            continue
        for f in sorted(p.rglob("*")):
            if f.is_file() and f.suffix in PY_SUFFIXES + C_SUFFIXES and not SKIP_DIRS & set(f.parts):
                yield f


def package_paths(name: str) -> list[Path]:
    """Folders (or the file) of an installed package."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise bad_value("package", name, "an importable installed package")
    if spec.submodule_search_locations:
        return [Path(p) for p in spec.submodule_search_locations]
    return [Path(spec.origin)] if spec.origin else []


def scan_paths(paths: Iterable[str | Path], *, min_severity: str = "low") -> tuple[list[Finding], int]:
    """(findings at or above ``min_severity``, number of files scanned)."""
    if min_severity not in SEVERITIES:
        raise bad_value("min_severity", min_severity, f"one of {SEVERITIES}")
    floor = SEVERITIES.index(min_severity)
    findings, n = [], 0
    for f in iter_sources(paths):
        python = f.suffix in PY_SUFFIXES
        if not python and f.suffix not in C_SUFFIXES:
            continue
        n += 1
        text = f.read_text(encoding="utf-8", errors="replace")
        findings += [x for x in scan_text(text, str(f), python=python) if SEVERITIES.index(x.severity) >= floor]
    return findings, n
