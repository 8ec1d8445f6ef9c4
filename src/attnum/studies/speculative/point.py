"""Sweep points of the speculative-decoding study (``kind = "spec"``).

:class:`SpecPoint` -> :func:`attnum.studies.speculative.spec_decode.run_spec` with one format and
one k, the exact enumeration (no Monte-Carlo): ``tv`` (to the target), ``tv_plain`` (plain
sampling from the rounded target, the baseline), ``tv_first``, ``fail``, ``expected_tokens``,
``ratio`` and ``seconds``, stored as the point's one flat row.

:data:`SPEC_FIELDS` holds each axis's validator (what the spec checks first); the point's own
construction then checks the combination (e.g. V**(k+1) small enough to enumerate).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from attnum.errors import bad_value
from attnum.numerics.formats import get_format
from attnum.sampling import NOISE, Q_ZERO, ZERO_RESIDUAL
from attnum.sweep.axes import accepts, positive_int
from attnum.sweep.point import StudyPoint, from_config

KINDS = ("spec",)


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")


SPEC_FIELDS: dict[str, tuple[str, Any]] = {
    "vocab": ("an integer >= 2 (V)", lambda v: positive_int(v) and v >= 2),
    "k": ("a positive integer (draft tokens per step)", positive_int),
    "draft_format": ("unset (the verified q^) or a format name", lambda v: v is None or accepts(get_format)(v)),
    "noise": (f"one of {tuple(NOISE)}", lambda v: v in NOISE),
    "q_zero": (f"one of {Q_ZERO}", lambda v: v in Q_ZERO),
    "zero_residual": (f"one of {ZERO_RESIDUAL}", lambda v: v in ZERO_RESIDUAL),
    "uniform_bits": ("unset (u continuous) or an integer in 1..64", lambda v: v is None or (positive_int(v) and v <= 64)),
    "logit_std": ("a positive finite number", lambda v: _num(v) and v > 0),
    "draft_noise": ("a non-negative finite number", lambda v: _num(v) and v >= 0),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class SpecPoint(StudyPoint):
    """One (format, k) of ``attnum spec`` (exact TV), the other flags as axes."""

    kind: str = "spec"
    vocab: int = 32
    k: int = 4
    format: str = "bf16"
    draft_format: str | None = None
    noise: str = "exact"
    q_zero: str = "reject"
    zero_residual: str = "fail"
    uniform_bits: int | None = None
    logit_std: float = 2.0
    draft_noise: float = 0.5
    seed: int = 0
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.kind != "spec":
            raise bad_value("kind", self.kind, "'spec'")
        self.check_fields(SPEC_FIELDS)
        object.__setattr__(self, "format", get_format(self.format).name)
        for name in ("logit_std", "draft_noise"):  # 2 and 2.0 are one point
            object.__setattr__(self, name, float(getattr(self, name)))
        if self.draft_format is not None:
            object.__setattr__(self, "draft_format", get_format(self.draft_format).name)
        self.spec_config()  # vocab**(k+1) small enough to enumerate, ...

    def spec_config(self):
        from attnum.studies.speculative.spec_decode import SpecConfig

        return SpecConfig(vocab=self.vocab, k=(self.k,), format=(self.format,), draft_format=self.draft_format,
                          noise=self.noise, q_zero=self.q_zero, zero_residual=self.zero_residual,
                          uniform_bits=self.uniform_bits, logit_std=self.logit_std, draft_noise=self.draft_noise,
                          seed=self.seed)

    def run(self) -> dict[str, Any]:
        from attnum.studies.speculative.spec_decode import run_spec

        (row,) = run_spec(self.spec_config())["rows"]
        return {k: v for k, v in row.items() if k not in ("format", "k", "vocab")}

    def label(self) -> str:
        draft = f" draft={self.draft_format}" if self.draft_format else ""
        return f"spec {self.format}{draft} V={self.vocab} k={self.k} noise={self.noise} seed={self.seed}"


def point_from_config(config: dict[str, Any]):
    """The point a stored ``config`` dict describes (``kind`` spec)."""
    return from_config(config, {"spec": SpecPoint})
