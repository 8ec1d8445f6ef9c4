"""Running code attnum does not trust: a user's kernel or sampler in a child process (the *kernel
server*: ``server`` is the parent side, ``child`` the child, ``wire`` their message format, ``remote``
the proxy a study calls), the process-tree machinery that kills it whole (``isolation``), and process
identities that survive pid reuse (``processes``).

Layer 4 (see docs/architecture.md): it imports the numerics core and ``kernels`` (the child resolves
a target through a resolver its parent names); studies and the auditor use it, never the reverse.
"""
