"""The context predicates of ``attnum scan``: does a line mask with -inf, apply a softcap, name an LSE,
compute in base 2 or base e. Each walks a line's tokens (:mod:`attnum.audit.scan.lex`) once; the
sentinel rules are in :mod:`attnum.audit.scan.rules`."""

from __future__ import annotations

from attnum.audit.scan.lex import is_name as _is_name
from attnum.audit.scan.lex import number

_SOFTCAP_NAMES = ("softcap", "soft_cap", "logit_cap")
_LSE_PREFIXES = ("lse", "LSE", "logsumexp", "log_sum_exp", "softmax_lse")
_BASE2_NAMES = frozenset({"exp2", "log2", "exp2f", "log2f", "ex2", "lg2", "LOG2E"})
_BASE_E_NAMES = frozenset({"exp", "log", "expf", "logf"})
_BASE_E_DUNDER = frozenset({"__exp", "__log", "__expf", "__logf"})
_BASE_E_MODULES = frozenset({"torch", "tl", "math", "np"})


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
