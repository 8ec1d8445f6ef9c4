"""Third-party kernel source: pinned wheels fetched into a user cache, checked by sha256 on every use, and the stand-ins for the heavy modules their kernel files import."""

from attnum._moved import forward

# Before 0.2 this path was the module now at attnum.kernels.wheels.source; its names still resolve, with a warning.
__getattr__ = forward("attnum.kernels.wheels", "attnum.kernels.wheels.source", frozenset({
    "WHEELS", "PINS", "DISTS", "IMPORTS", "FILES", "cache_dir", "source_dir", "installed", "wheel_path", "missing",
    "fetch", "load"}))
