"""The line rules of ``attnum scan``, in time linear in the size of the source.

No rule is a backtracking regular expression. Each line is cut into tokens by
:mod:`attnum.audit.scan_lex`, whose expressions' alternatives are deterministic, so lexing costs
O(length); each rule then walks the tokens once, with O(1) work per token, using facts
computed once per line (matching parentheses, where each sentinel starts and ends). A line of 5,000
spaces, digits, '(' or identifier characters costs what any 5,000 characters cost, and no line is
cut short: every rule sees every line whole.

A *sentinel* is a value standing in for minus infinity. Three classes:

- ``literal``: ``-`` and a decimal literal of magnitude >= SENTINEL_MIN (``-5e4``, ``-1e30``), or a
  name the same file assigns one (``MASK_VALUE = -5e4``; ``inf = 5e4`` makes ``-math::inf`` one);
- ``flt``: ``-FLT_MAX`` and kin (``-DBL_MAX``, ``-std::numeric_limits<float>::max()``,
  ``std::numeric_limits<float>::lowest()``): a literal too, and flagged once more as ``flt-max-fill``;
- ``finfo``: derived from a float format, ``torch.finfo(x).min``, ``-jnp.finfo(t).max``,
  ``-0.7 * float(np.finfo(np.dtype("float32")).max)``, or a name assigned one (``min_dtype``,
  ``DEFAULT_MASK_VALUE``), including through one plain alias (``mask_value: float = DEFAULT_MASK_VALUE``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from attnum.audit.scan_lex import BIGISH, number, tokens
from attnum.audit.scan_lex import big as _big
from attnum.audit.scan_lex import is_name as _is_name
from attnum.audit.scan_lex import matching_parens as _matching_parens

WINDOW = 8  # lines: how far back a softcap looks for a mask, how far an LSE looks for mixed bases

_INF_NAME = re.compile(r"[A-Za-z_]*(?:infinity|Infinity|INFINITY|inf(?![a-z])|Inf(?![a-z])|INF(?![A-Z])|mask_value|MASK_VALUE|mask_fill|MASK_FILL|"
                       r"neg_large|NEG_LARGE|large_neg|LARGE_NEG|big_neg|BIG_NEG|min_value|MIN_VALUE|"
                       r"masked_value|MASKED_VALUE)\w*")
MAX_NAMES = frozenset({"m_i", "m_ij", "m_prev", "m_new", "m_old", "mi", "row_max", "rowmax", "max_score",
                       "running_max", "max_logit", "m_val", "mmax", "m"})
FILL_CALLS = frozenset({"masked_fill", "masked_fill_", "where", "full", "full_like", "fill_", "fill",
                        "new_full", "select"})
FLT_MAX_NAMES = frozenset({"FLT_MAX", "DBL_MAX", "HUGE_VAL", "HUGE_VALF", "CUDART_INF_F_FINITE"})
_DEF_AFTER = frozenset({";", "{", "(", ",", "constexpr", "const", "float", "double", "auto"})
_VALUE_END = frozenset({";", ",", "}", ")"})
_SOFTCAP_NAMES = ("softcap", "soft_cap", "logit_cap")
_LSE_PREFIXES = ("lse", "LSE", "logsumexp", "log_sum_exp", "softmax_lse")
_BASE2_NAMES = frozenset({"exp2", "log2", "exp2f", "log2f", "ex2", "lg2", "LOG2E"})
_BASE_E_NAMES = frozenset({"exp", "log", "expf", "logf"})
_BASE_E_DUNDER = frozenset({"__exp", "__log", "__expf", "__logf"})
_BASE_E_MODULES = frozenset({"torch", "tl", "math", "np"})

# What a sentinel of each class is reported as, by context.
FILL_RULE = {"literal": "finite-mask-fill", "flt": "finite-mask-fill", "finfo": "finfo-mask-fill"}
MAX_RULE = {"literal": "finite-running-max-init", "flt": "finite-running-max-init",
            "finfo": "finfo-running-max-init"}


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


def sentinels(t: list[str], names: dict[str, tuple[str, int]],
              fin: dict[int, tuple[int, int]]) -> dict[int, tuple[str, int]]:
    """start -> (class, end) of every sentinel (a value standing in for -inf) in a line's tokens."""
    out: dict[int, tuple[str, int]] = {}
    for start, (sign, end) in fin.items():
        if sign < 0:
            out[start] = ("finfo", end)
    n = len(t)
    for j, tok in enumerate(t):
        if tok == "-" and j + 1 < n:
            nxt = t[j + 1]
            if _big(nxt):
                out[j] = ("literal", j + 2)
            elif nxt in FLT_MAX_NAMES:
                out[j] = ("flt", j + 2)
            elif nxt == "std" and t[j + 2:j + 4] == ["::", "numeric_limits"]:
                lim = _numeric_limits(t, j + 3)
                if lim and lim[0] == "max":
                    out[j] = ("flt", lim[1])
            elif nxt == "numeric_limits":
                lim = _numeric_limits(t, j + 1)
                if lim and lim[0] == "max":
                    out[j] = ("flt", lim[1])
            elif t[j + 2:j + 3] == ["::"] and j + 3 < n and names.get(t[j + 3], ("", 0))[1] > 0:
                out[j] = (names[t[j + 3]][0], j + 4)
            elif names.get(nxt, ("", 0))[1] > 0 and t[j + 2:j + 3] != ["::"]:
                out[j] = (names[nxt][0], j + 2)
        elif tok == "numeric_limits":
            lim = _numeric_limits(t, j)
            if lim and lim[0] == "lowest":
                s = j - 2 if t[j - 2:j] == ["std", "::"] else j
                out.setdefault(s, ("flt", lim[1]))
        elif tok in names and names[tok][1] < 0 and (j == 0 or t[j - 1] != "."):
            out.setdefault(j, (names[tok][0], j + 1))
    return out


def sentinel_hits(t: list[str], sent: dict[int, tuple[str, int]], fin: dict[int, tuple[int, int]],
                  min_at: set[int], python: bool) -> set[str]:
    """Rules that fire on one line: fills, running-max inits, constants, finfo.min in additions.

    ``sent``: sentinels by start; ``fin``: finfo expressions by start; ``min_at``: indices of
    ``finfo`` tokens whose atom is ``.min``. One forward pass; ';' ends a statement."""
    hits: set[str] = set()
    n = len(t)
    fill_open = max_open = where_open = has_min = has_plus = False  # within the current statement
    pending_q = False  # a '?' waiting for its ':'

    def arg(k: int) -> None:  # a fill value at k: [keyword =] [(] SENTINEL
        if k + 1 < n and _is_name(t[k]) and t[k + 1] == "=":
            k += 2
        k += t[k:k + 1] == ["("]
        if k in sent:
            hits.add(FILL_RULE[sent[k][0]])

    for j, tok in enumerate(t):
        if tok == ";":
            if has_min and has_plus:
                hits.add("finfo-min-additive")
            fill_open = max_open = where_open = has_min = has_plus = pending_q = False
            continue
        if j in sent:
            cls = sent[j][0]
            if max_open:
                hits.add(MAX_RULE[cls])
            if where_open:
                hits.add(FILL_RULE[cls])
            if fill_open and cls == "flt":
                hits.add("flt-max-fill")
        if j in min_at:
            has_min = True
        if tok in FILL_CALLS and t[j + 1:j + 2] == ["("]:
            fill_open = True
            arg(j + 2)
        elif tok == "," and fill_open:
            arg(j + 1)
        elif tok == "?":
            pending_q = True
            if j + 1 in sent and t[sent[j + 1][1]:sent[j + 1][1] + 1] == [":"]:
                hits.add(FILL_RULE[sent[j + 1][0]])
        elif tok == ":" and pending_q:
            if j + 1 in sent:
                hits.add(FILL_RULE[sent[j + 1][0]])
            pending_q = False
        elif tok in ("+", "+="):
            has_plus = True
            where_open = where_open or (tok == "+=" and t[j + 1:j + 5] == ["tl", ".", "where", "("])
        elif tok in MAX_NAMES:
            k = _skip_annotation(t, j + 1) if python else j + 1
            if t[k:k + 1] == ["["]:
                close = next((x for x in range(k + 1, min(n, k + 65)) if t[x] == "]"), None)
                k = close + 1 if close is not None else n
            if t[k:k + 1] == ["="]:
                max_open = True
                if k + 1 in sent and sent[k + 1][0] == "flt":
                    hits.add("flt-max-fill")
        if _is_name(tok) and inf_name(tok):
            _constant(t, j, fin, python, hits)
    if has_min and has_plus:
        hits.add("finfo-min-additive")
    return hits


_INF_CACHE: dict[str, bool] = {}


def inf_name(name: str) -> bool:
    """Named like infinity or a mask value (``NEG_INF``, ``mask_value``, ``big_neg``, ...)."""
    hit = _INF_CACHE.get(name)
    if hit is None:
        if len(_INF_CACHE) > 100_000:
            _INF_CACHE.clear()
        hit = _INF_CACHE[name] = _INF_NAME.fullmatch(name) is not None
    return hit


def _constant(t: list[str], i: int, fin: dict[int, tuple[int, int]], python: bool, hits: set[str]) -> None:
    """``INF_NAME = [(] [[-]NUM *] [-]BIG`` / ``INF_NAME = finfo...`` / ``#define INF_NAME [(] [-]BIG``."""
    n = len(t)

    def signed(k: int) -> int:
        return k + (t[k:k + 1] in (["-"], ["+"]))

    if i >= 2 and t[i - 2:i] == ["#", "define"]:
        v = signed(i + 1 + (t[i + 1:i + 2] == ["("]))
        if v < n and _big(t[v]):
            hits.add("finite-inf-constant")
        return
    e = _skip_annotation(t, i + 1) if python else i + 1
    if t[e:e + 1] != ["="]:
        return
    for b in _branches(t, e + 1, python):  # INF_NAME = A, or INF_NAME = A if C else B
        if b in fin:
            hits.add("finfo-inf-constant")
            continue
        v = b + (t[b:b + 1] == ["("])
        u = signed(v)
        if u < n and number(t[u]) is not None and t[u + 1:u + 2] == ["*"]:
            v = u + 2
        v = signed(v)
        if v < n and _big(t[v]):
            hits.add("finite-inf-constant")
            return


def masking(t: list[str]) -> bool:
    """Whether a line masks with -inf (``masked_fill``, ``-inf``, ``float("-inf")``, ``where(..mask..)``)."""
    where_open = False
    for j, tok in enumerate(t):
        if "masked_fill" in tok:
            return True
        if tok == "-" and j + 1 < len(t):
            nxt = t[j + 1]
            if nxt.startswith(("inf", "INFINITY")):
                return True
            if nxt in ("math", "torch") and t[j + 2:j + 3] == ["."] and t[j + 3:j + 4] and t[j + 3].startswith("inf"):
                return True
        elif tok == "float" and t[j + 1:j + 2] == ["("] and t[j + 2:j + 3] and t[j + 2][1:-1].lower().startswith("-inf"):
            return True
        elif tok.endswith("where") and t[j + 1:j + 2] == ["("]:
            where_open = True
        elif tok == ")":
            where_open = False
        elif where_open and "mask" in tok:
            return True
    return False


def softcap(t: list[str]) -> bool:
    """``tanh(... cap ...)`` or ``softcap * ...tanh``."""
    n = len(t)
    last_cap = max((i for i, x in enumerate(t) if "cap" in x), default=-1)
    for j, tok in enumerate(t):
        if tok == "tanh" and t[j + 1:j + 2] == ["("] and j + 2 <= last_cap:
            return True
        if any(s in tok for s in _SOFTCAP_NAMES) and t[j + 1:j + 2] == ["*"]:
            k = j + 2
            while k < n and (_is_name(t[k]) or t[k] == "." or number(t[k]) is not None):
                if "tanh" in t[k]:
                    return True
                k += 1
    return False


def lse(t: list[str]) -> bool:
    return any(tok.startswith(_LSE_PREFIXES) for tok in t)


def base2(t: list[str]) -> bool:
    return any(tok in _BASE2_NAMES or "log2e" in tok or "M_LOG2E" in tok for tok in t)


def base_e(t: list[str]) -> bool:
    for j, tok in enumerate(t):
        if t[j + 1:j + 2] != ["("]:
            continue
        prev = t[j - 1] if j else ""
        if tok in _BASE_E_DUNDER and prev != ".":
            return True
        if tok in _BASE_E_NAMES and (prev != "." or (j >= 2 and t[j - 2] in _BASE_E_MODULES
                                                     and (j < 3 or t[j - 3] != "."))):
            return True
    return False
