"""``attnum scan``: the static scanner of attention code for numerical hazards (sentinels, casts, masks)."""

from attnum._moved import forward

# Before 0.2 this path was the module now at attnum.audit.scan.scanner; its names still resolve, with a warning.
__getattr__ = forward("attnum.audit.scan", "attnum.audit.scan.scanner", frozenset({
    "SEVERITIES", "SENTINEL_MIN", "WINDOW", "Finding", "Rule", "RULES", "scan_text", "ScanReport", "scan", "scan_paths"}))
