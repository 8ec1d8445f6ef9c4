"""Parallel attention numerics: ring attention (context parallelism) and tensor-parallel all-reduce.

Kind ``ring``; command ``ring``. Registered in :mod:`.family`.
"""
