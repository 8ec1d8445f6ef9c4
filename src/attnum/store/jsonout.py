"""Strict JSON for everything attnum prints or writes: no bare NaN or Infinity.

``json.dumps`` writes ``NaN``/``Infinity``, which JSON does not have (``jq``, browsers and most
parsers reject the document). :func:`strict` turns every non-finite float into ``null`` and says
why beside it: a mapping gains one key, ``"nonfinite"``, naming each nulled key and what it was
(``"nan"``, ``"inf"``, ``"-inf"``; for a list, ``"nan at [i, ...]"``). Nested mappings carry their
own ``"nonfinite"``. Nothing else changes, so a reader that ignores ``"nonfinite"`` sees the same
document with ``null`` where no number exists.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

NONFINITE_KEY = "nonfinite"


def _word(x: float) -> str:
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def _is_nonfinite(x: Any) -> bool:
    return isinstance(x, float) and not math.isfinite(x)


def _list(xs: list | tuple) -> tuple[list, str]:
    """The list with non-finite floats nulled (recursively), and a note of where they were."""
    out, where = [], {}
    for i, x in enumerate(xs):
        if _is_nonfinite(x):
            where.setdefault(_word(x), []).append(i)
            out.append(None)
        else:
            out.append(strict(x))
    note = "; ".join(f"{w} at {idx}" for w, idx in where.items())
    return out, note


def strict(obj: Any) -> Any:
    """``obj`` made valid JSON: non-finite floats become ``None``, recorded under ``"nonfinite"``."""
    if _is_nonfinite(obj):
        return None
    if isinstance(obj, Mapping):
        out: dict = {}
        why: dict[str, str] = {}
        for k, v in obj.items():
            if _is_nonfinite(v):
                out[k], why[str(k)] = None, _word(v)
            elif isinstance(v, (list, tuple)):
                out[k], note = _list(v)
                if note:
                    why[str(k)] = note
            else:
                out[k] = strict(v)
        if why:
            prior = out.get(NONFINITE_KEY)
            out[NONFINITE_KEY] = {**(prior if isinstance(prior, dict) else {}), **why}
        return out
    if isinstance(obj, (list, tuple)):
        return _list(obj)[0]
    return obj


def dumps(obj: Any, **kw: Any) -> str:
    """``json.dumps(strict(obj))``, refusing (``ValueError``) anything that is still not JSON."""
    return json.dumps(strict(obj), allow_nan=False, **kw)
