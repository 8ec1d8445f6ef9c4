"""Study families: one package per study, listed once in :data:`FAMILIES`.

What a family provides is in :mod:`attnum.sweep.registry` (its docstring is the checklist).
Adding a family: a package ``attnum/studies/<name>/``, its name on the line below (the CLI registers its
commands from this list) and its ``FAMILY`` as an entry point in ``pyproject.toml`` (group
``attnum.families``: how the sweep layer finds it without importing this package).
This module imports nothing: the CLI reads it before every command.
"""

FAMILIES = ("paper", "serving", "parallel", "speculative", "training", "validation", "consistency", "lowbit", "bugs")
