"""Serving-side attention numerics: KV-cache decode, split-KV, paged KV, KV formats, MLA, FA3's FP8 table.

Kinds ``decode`` and ``fp8-table``; the ``inference`` profiles of ``attnum reproduce``; commands
``decode``, ``fp8-table`` and ``mla-table``. Registered in :mod:`.family`.
"""
