"""What a source line defines or derives: the names a file assigns a sentinel (``MASK_VALUE = -5e4``,
``min_dtype = torch.finfo(dtype).min``, through one plain alias) and the ``finfo``/``numeric_limits``
expressions a sentinel may be built from. Token walks, linear in the line (see
:mod:`attnum.audit.scan.rules`, which uses these to find and classify sentinels)."""

from __future__ import annotations

from collections.abc import Iterator

from attnum.audit.scan.lex import BIGISH, number, tokens
from attnum.audit.scan.lex import big as _big
from attnum.audit.scan.lex import is_name as _is_name
from attnum.audit.scan.lex import matching_parens as _matching_parens

_DEF_AFTER = frozenset({";", "{", "(", ",", "constexpr", "const", "float", "double", "auto"})

_VALUE_END = frozenset({";", ",", "}", ")"})


def finfo_atoms(t: list[str]) -> list[tuple[int, int, str]]:
    """(index of ``finfo``, index of its ``.min``/``.max``, "min"|"max") for each ``finfo(...).min|max``."""
    if "finfo" not in t:
        return []
    match, out = _matching_parens(t), []
    for k, tok in enumerate(t):
        if tok == "finfo" and k + 1 in match:
            close = match[k + 1]
            if t[close + 1:close + 2] == ["."] and t[close + 2:close + 3] in (["min"], ["max"]):
                out.append((k, close + 2, t[close + 2]))
    return out


def finfo_exprs(t: list[str], atoms: list[tuple[int, int, str]]) -> dict[int, tuple[int, int]]:
    """start -> (sign, end) of each ``[-] [NUM *] [float(] [mod.]finfo(...).min|max [)]``."""
    out: dict[int, tuple[int, int]] = {}
    for k, at, kind in atoms:
        sign, q, end = (-1 if kind == "min" else 1), k, at + 1
        while q >= 2 and t[q - 1] == "." and _is_name(t[q - 2]):
            q -= 2
        if q >= 2 and t[q - 2:q] == ["float", "("] and t[end:end + 1] == [")"]:
            q, end = q - 2, end + 1
        factor = number(t[q - 2]) if q >= 2 and t[q - 1] == "*" else None
        if factor:
            sign, q = (sign if factor > 0 else -sign), q - 2
        if q >= 1 and t[q - 1] == "-":
            sign, q = -sign, q - 1
        out[q] = (sign, end)
    return out


def _numeric_limits(t: list[str], k: int) -> tuple[str, int] | None:
    """``numeric_limits<T>::max()`` / ``::lowest()`` at k: (which, end)."""
    if t[k + 1:k + 2] == ["<"] and t[k + 3:k + 5] == [">", "::"] and t[k + 6:k + 8] == ["(", ")"] \
            and t[k + 5:k + 6] in (["max"], ["lowest"]):
        return t[k + 5], k + 8
    return None


def sentinel_names(lines: list[str], python: bool) -> dict[str, tuple[str, int]]:
    """File-local names holding a sentinel's magnitude: name -> (class, sign of the value).

    Two passes, each over the few lines that can matter: definitions from a literal or finfo, then
    one level of plain aliases of those names."""
    direct: dict[str, tuple[str, int]] = {}
    for line in lines:
        if ("=" in line or "define" in line) and ("finfo" in line or BIGISH.search(line)):
            for name, value in _defs(tokens(line), python):
                if not isinstance(value, str):
                    direct[name] = value
    names = dict(direct)
    if direct:
        for line in lines:
            if "=" in line:
                t = tokens(line)
                if not direct.keys().isdisjoint(t):
                    for name, value in _defs(t, python):
                        if isinstance(value, str) and value in direct and name not in names:
                            names[name] = direct[value]
    return names


def _defs(t: list[str], python: bool) -> Iterator[tuple[str, tuple[str, int] | str]]:
    """(name, (class, sign)) for ``NAME = [(][-]BIG[)]``, ``NAME = finfo...``, ``#define NAME [(][-]BIG[)]``;
    (name, other name) for a plain alias ``NAME = OTHER``. NAME follows a statement start, ``(``, ``,``
    or a C type keyword; Python annotations (``NAME: float = ...``) are allowed."""
    fin = finfo_exprs(t, finfo_atoms(t)) if "finfo" in t else {}
    n = len(t)
    for i, tok in enumerate(t):
        if tok == "define" and i >= 1 and t[i - 1] == "#" and i + 2 < n and _is_name(t[i + 1]):
            v = i + 2 + (t[i + 2] == "(")
            sign = -1 if t[v:v + 1] == ["-"] else 1
            v += t[v:v + 1] in (["-"], ["+"])
            if v == n - 1 - (t[-1] == ")") and _big(t[v]):
                yield t[i + 1], ("literal", sign)
            continue
        if tok != "=" or i == 0:
            continue
        j = _def_name(t, i, python)
        if j < 0:
            continue
        v = i + 1
        if v in fin and (fin[v][1] >= n or t[fin[v][1]] in _VALUE_END):
            yield t[j], ("finfo", fin[v][0])
            continue
        big = None
        for b in _branches(t, i + 1, python):  # NAME = A, or NAME = A if C else B (either branch)
            v = b + (t[b:b + 1] == ["("])
            sign = -1 if t[v:v + 1] == ["-"] else 1
            v += t[v:v + 1] in (["-"], ["+"])
            w = v + 1 + (t[v + 1:v + 2] == [")"])
            if v < n and _big(t[v]) and (w >= n or t[w] in _VALUE_END or t[w] in ("if", "else")):
                big = sign
                break
        if big is not None:
            yield t[j], ("literal", big)
        elif i + 1 < n and _is_name(t[i + 1]) and (i + 2 >= n or t[i + 2] in _VALUE_END):
            yield t[j], t[i + 1]

_BRANCH_REACH = 64  # tokens searched for an ``else`` after an ``=``: a mask constant's conditional is short


def _branches(t: list[str], start: int, python: bool) -> list[int]:
    """Where the values of the expression at ``start`` begin: ``start``, and in Python each ``else``
    branch of a conditional expression at the same bracket depth (``A if C else B``)."""
    out = [start]
    if not python:
        return out
    depth = 0
    for k in range(start, min(len(t), start + _BRANCH_REACH)):  # bounded: linear in the line, nested or not
        tok = t[k]
        if tok in ("(", "[", "{"):
            depth += 1
        elif tok in (")", "]", "}"):
            depth -= 1
            if depth < 0:
                break
        elif depth == 0 and tok == ",":
            break
        elif depth == 0 and tok == "else":
            out.append(k + 1)
    return out


def _def_name(t: list[str], i: int, python: bool) -> int:
    """Index of the name defined by the ``=`` at i (``NAME =`` or ``NAME: TYPE =``), else -1."""
    def starts(j: int) -> bool:
        return _is_name(t[j]) and (j == 0 or t[j - 1] in _DEF_AFTER)

    if i >= 1 and starts(i - 1):
        return i - 1
    if python:
        colon = next((x for x in range(i - 1, max(0, i - 18), -1) if t[x] == ":"), -1)
        if colon >= 1 and starts(colon - 1) and _skip_annotation(t, colon) == i:
            return colon - 1
    return -1


def _skip_annotation(t: list[str], k: int) -> int:
    """Past ``: TYPE`` (at most 16 tokens) to the ``=`` of ``name: TYPE = value``; else k."""
    if t[k:k + 1] != [":"]:
        return k
    for j in range(k + 1, min(len(t), k + 18)):
        if t[j] == "=":
            return j
        if t[j] in (";", ",", ")", "(", ":"):
            break
    return k
