"""What an attention declares about the two behaviours SDPA's signature leaves open.

- **causal alignment** with N != S: ``top_left`` (torch SDPA: query i keeps keys j <= i) or
  ``bottom_right`` (flash-attn >= 2.1, FlashInfer, vLLM: j <= i + S - N, the queries are the last N
  positions);
- **empty rows**, a query with no key to attend to: ``zeros`` (torch >= 2.5, flash-attn, FlashInfer),
  ``nan`` (softmax of all -inf), ``mean-v`` (a finite fill such as ``finfo.min`` gives every key the
  same weight: the mean of V over all S keys) or ``any`` (don't care: those rows are left out of
  every comparison).

Adapters declare them as :class:`attnum.kernels.registry.Kernel` fields (module constants
``CAUSAL_ALIGNMENT`` / ``EMPTY_ROWS``), a user's callable as function attributes
(``fn.attnum_causal_alignment = "bottom_right"``, ``fn.attnum_empty_rows = "nan"``); undeclared
means SDPA's own contract: top-left, zeros.
"""

from __future__ import annotations

from attnum.errors import bad_value

CAUSAL_ALIGNMENTS = ("top_left", "bottom_right")
EMPTY_ROWS = ("zeros", "nan", "mean-v", "any")
DEFAULT_CAUSAL_ALIGNMENT = "top_left"
DEFAULT_EMPTY_ROWS = "zeros"
ATTRIBUTES = {"causal_alignment": "attnum_causal_alignment", "empty_rows": "attnum_empty_rows"}


def causal_alignment(value: object, param: str = "causal_alignment") -> str:
    """"top-left" / "top_left" / "bottom-right" / "bottom_right" -> the canonical name."""
    text = value.strip().lower().replace("-", "_") if isinstance(value, str) else value
    if text not in CAUSAL_ALIGNMENTS:
        raise bad_value(param, value, "top-left or bottom-right")
    return text


def empty_rows(value: object, param: str = "empty_rows") -> str:
    """One of :data:`EMPTY_ROWS` ("mean_v" accepted for "mean-v")."""
    text = value.strip().lower().replace("_", "-") if isinstance(value, str) else value
    if text not in EMPTY_ROWS:
        raise bad_value(param, value, f"one of {', '.join(EMPTY_ROWS)}")
    return text


def declared(fn: object) -> dict[str, str]:
    """The conventions a callable declares through its ``attnum_*`` attributes (validated)."""
    out = {}
    for field, attr in ATTRIBUTES.items():
        value = getattr(fn, attr, None)
        if value is not None:
            norm = causal_alignment if field == "causal_alignment" else empty_rows
            out[field] = norm(value, param=f"{getattr(fn, '__name__', 'target')}.{attr}")
    return out


def label(alignment: str) -> str:
    """"bottom_right" -> "bottom-right" (how flags and notes spell it)."""
    return alignment.replace("_", "-")
