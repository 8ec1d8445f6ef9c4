"""Validation of the emulator against real kernels: ``attnum validate`` (flash) and ``--eager``.

No sweep kinds; command ``validate``. Registered in :mod:`.family`.
"""
