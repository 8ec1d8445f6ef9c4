"""Speculative decoding under rounded probabilities: the exact total-variation distance by enumeration.

Kind ``spec``; commands ``spec`` and ``spec-audit``. Registered in :mod:`.family`.
"""
