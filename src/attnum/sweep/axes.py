"""The validators of the config fields several study families share, one per field.

A family's point checks its own fields; the fields it shares with others (format, policy, the
shape, seed, device) use these, so two families never import each other for a validator. Each
entry is ``field -> (what is allowed, check)``, the form of :attr:`StudyKind.axes`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from attnum.errors import AttnumInputError
from attnum.numerics.formats import get_format
from attnum.numerics.mma.sites import ALIASES, POLICY_ARCHES, check_arch
from attnum.numerics.policy import NAMED, parse_policy

POLICY_NAMES = tuple(NAMED)
DEVICES = ("cpu", "cuda")


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def positive_int(v: Any) -> bool:
    return is_int(v) and v > 0


def opt_positive_int(v: Any) -> bool:
    return v is None or positive_int(v)


def is_bool(v: Any) -> bool:
    return isinstance(v, bool)


def accepts(parse: Callable[[Any], Any]) -> Callable[[Any], bool]:
    """A check that any value ``parse`` takes without a refusal (AttnumInputError, TypeError, ValueError)."""

    def ok(v: Any) -> bool:
        try:
            parse(v)
        except (AttnumInputError, TypeError, ValueError):
            return False
        return True

    return ok


def parses(parse: Callable[[Any], Any]) -> Callable[[Any], bool]:
    """A check that asks the core's own parser (formats, policies, tile orders)."""

    def ok(v: Any) -> bool:
        if not isinstance(v, str):
            return False
        try:
            parse(v)
        except AttnumInputError:
            return False
        return True

    ok.parse = parse  # what :func:`allowed_for` asks for the parser's own reason
    return ok


def allowed_for(allowed: str, check: Callable[[Any], bool], value: Any) -> str:
    """``allowed``, followed by the parser's own reason when ``check`` asks one and it refused ``value``
    (``policy='fa2:bf16,mma=sm99'`` is refused because of its ``mma``: the user is told that)."""
    parse = getattr(check, "parse", None)
    if parse is None or not isinstance(value, str):
        return allowed
    try:
        parse(value)
    except AttnumInputError as err:
        return f"{allowed} (here: {err})"
    return allowed


COMMON: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "policy": (f"NAME, NAME:FORMAT or a format, NAME in {POLICY_NAMES}, optionally with ',site=FORMAT' "
               "overrides (each site at most once)", parses(lambda v: parse_policy(v, "fp32"))),
    "format": ("a format name (fp64, fp32, tf32, bf16, fp16, e5m2, e4m3fn, ..., or eXmY)", parses(get_format)),
    "mma": (f"unset, none, or a tensor-core architecture ({', '.join(POLICY_ARCHES)}; aliases "
            f"{', '.join(sorted(ALIASES))})", lambda v: v is None or accepts(check_arch)(v)),
    "seq_len": ("a positive integer (N)", positive_int),
    "head_dim": ("a positive integer (d)", positive_int),
    "heads": ("a positive integer (H)", positive_int),
    "kv_heads": ("a positive integer dividing heads (G; default heads)", opt_positive_int),
    "batch": ("a positive integer (B)", positive_int),
    "block_k": ("a positive integer (Bc)", opt_positive_int),
    "causal": ("true or false", is_bool),
    "seed": ("an integer in [0, 2**32 - 1]", lambda v: is_int(v) and 0 <= v < 2**32),  # derived seeds fit 64 bits
    "device": (f"one of {DEVICES}", lambda v: v in DEVICES),
}
