"""The numerics core: float formats as data, exact rounding onto them, the compiled kernels behind it,
block-scaled and low-bit schemes, the precision policy of attention's rounding sites, deviation
metrics, and reduction orders across ranks.

Layer 1 (see docs/architecture.md): it imports nothing of attnum but :mod:`attnum.errors`, does no I/O
and never prints. Everything else computes on top of it.
"""
