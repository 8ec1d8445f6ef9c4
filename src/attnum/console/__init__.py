"""What attnum's commands share on a terminal or in a log: tables whose values stay whole, the one
progress mechanism of long commands, and the conventions every command-line flag obeys.

Layer 1 beside the numerics core (see docs/architecture.md): it imports nothing of attnum but
:mod:`attnum.errors`, so every layer above may print through it.
"""
