"""The sweep machinery: the registry of study families (``registry``: what a family provides; ``axes``
and ``point``: the shared validators and the point protocol), specs into points (``spec``), one point in
a worker (``point_runner``), the row API findings and figures read (``results``), the executors that
run points into a store (``executors``, ``executor_pool``, ``executor_ray``, ``worker_start``), and
what a run will cost before it starts (``eta``, ``memory_budget``, ``memo``).

Layer 6 (see docs/architecture.md). Families register themselves as entry points (group
``attnum.families``, in ``pyproject.toml``), so nothing here imports or names a study.
"""
