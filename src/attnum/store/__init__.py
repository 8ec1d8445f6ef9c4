"""What attnum keeps on disk: the results store (one SQLite file per output folder: ``db`` opens and
writes it, ``read`` reads it, ``schema`` migrates it, ``lock`` keeps one writer, ``file`` checks the
file before SQLite sees it), and the output files and folders every command writes (``outfile``,
``outdir``, ``jsonout``: checked first, then written whole).

Layer 5 (see docs/architecture.md): above the sandbox (it uses its process identities for locks),
below the sweep that writes into it and the report that reads it.
"""
