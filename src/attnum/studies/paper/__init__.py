"""The paper's microbenchmark (Golden et al. 2024, arXiv 2405.02803): compare, attribute, the grid, findings.

Kinds ``compare``, ``attribute`` and ``kernels``; the ``quick``/``full``/``smoke`` profiles of
``attnum reproduce``; commands ``compare`` and ``attribute``. Registered in :mod:`.family`.
"""
