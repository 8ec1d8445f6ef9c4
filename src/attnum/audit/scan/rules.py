"""The line rules of ``attnum scan``, in time linear in the size of the source.

No rule is a backtracking regular expression. Each line is cut into tokens by
:mod:`attnum.audit.scan.lex`, whose expressions' alternatives are deterministic, so lexing costs
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

from attnum.audit.scan.lex import big as _big
from attnum.audit.scan.lex import is_name as _is_name
from attnum.audit.scan.lex import number
from attnum.audit.scan.names import (
    _branches,
    _numeric_limits,
    _skip_annotation,
)

WINDOW = 8  # lines: how far back a softcap looks for a mask, how far an LSE looks for mixed bases

_INF_NAME = re.compile(r"[A-Za-z_]*(?:infinity|Infinity|INFINITY|inf(?![a-z])|Inf(?![a-z])|INF(?![A-Z])|mask_value|MASK_VALUE|mask_fill|MASK_FILL|"
                       r"neg_large|NEG_LARGE|large_neg|LARGE_NEG|big_neg|BIG_NEG|min_value|MIN_VALUE|"
                       r"masked_value|MASKED_VALUE)\w*")
MAX_NAMES = frozenset({"m_i", "m_ij", "m_prev", "m_new", "m_old", "mi", "row_max", "rowmax", "max_score",
                       "running_max", "max_logit", "m_val", "mmax", "m"})
FILL_CALLS = frozenset({"masked_fill", "masked_fill_", "where", "full", "full_like", "fill_", "fill",
                        "new_full", "select"})
FLT_MAX_NAMES = frozenset({"FLT_MAX", "DBL_MAX", "HUGE_VAL", "HUGE_VALF", "CUDART_INF_F_FINITE"})

# What a sentinel of each class is reported as, by context.
FILL_RULE = {"literal": "finite-mask-fill", "flt": "finite-mask-fill", "finfo": "finfo-mask-fill"}
MAX_RULE = {"literal": "finite-running-max-init", "flt": "finite-running-max-init",
            "finfo": "finfo-running-max-init"}


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
