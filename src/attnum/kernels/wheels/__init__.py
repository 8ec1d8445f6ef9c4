"""Third-party kernel source: the pin table (versions, wheels, kernel files and their sha256), the files fetched into a
user cache and checked on every use, the stand-ins for the heavy modules they import, and how adapters read a
version's entry-point signature."""

from attnum._moved import forward

# Before 0.2 this path was the module now at attnum.kernels.wheels.source; its names still resolve, with a warning.
__getattr__ = forward("attnum.kernels.wheels", "attnum.kernels.wheels.source", frozenset({
    "WHEELS", "PINS", "DISTS", "IMPORTS", "FILES", "cache_dir", "source_dir", "installed", "wheel_path", "missing",
    "fetch", "load"}))
