"""The validation family in the registry: no sweep kinds; ``attnum validate`` (:mod:`.cli`)."""

from __future__ import annotations

from attnum.sweep.registry import Family

FAMILY = Family(name="validation", order=5)
