"""NaN-aware reductions over Python floats, for summaries of already-measured numbers (no torch).

A NaN anywhere must show as NaN in a maximum or minimum, never as a finite number: a diverged
tensor, a failed metric or an overflow is the finding, not noise to drop.
"""

from __future__ import annotations

import math


def nan_max(values) -> float:
    """The largest of ``values`` (floats), NaN when any is NaN; NaN when there are none.

    Python's ``max()`` is order-dependent with NaN (``max(1.0, nan)`` is 1.0, ``max(nan, 1.0)`` is
    nan), so a NaN tensor among finite ones could vanish from a maximum; here it never does.
    """
    xs = [float(v) for v in values]
    if not xs or any(math.isnan(x) for x in xs):
        return math.nan
    return max(xs)


def nan_min(values) -> float:
    """The smallest of ``values``, NaN when any is NaN (as :func:`nan_max`)."""
    xs = [float(v) for v in values]
    if not xs or any(math.isnan(x) for x in xs):
        return math.nan
    return min(xs)
