"""The training family in the registry: no sweep kinds; ``attnum diverge`` (and its bias profiles)
writes its own folder and report (:mod:`.cli`, :mod:`.report`)."""

from __future__ import annotations

from attnum.sweep.registry import Family

FAMILY = Family(name="training", order=4)
