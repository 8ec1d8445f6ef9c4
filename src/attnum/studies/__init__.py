"""Study families: one package per study, listed once in :data:`FAMILIES`.

What a family provides is in :mod:`attnum.sweep.registry` (its docstring is the checklist).
Adding a family: a package ``attnum/studies/<name>/`` and its name on the line below.
This module imports nothing: the CLI reads it before every command.
"""

FAMILIES = ("paper", "serving", "parallel", "speculative", "training", "validation", "consistency", "lowbit")
