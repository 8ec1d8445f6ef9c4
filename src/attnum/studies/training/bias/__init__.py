"""The biased-rounding study (Qiu & Yao, arXiv 2510.04212): ``attnum diverge --profile bias``."""

from attnum._moved import forward

# Before 0.2 this path was the module now at attnum.studies.training.bias.study; its names still resolve, with a warning.
__getattr__ = forward("attnum.studies.training.bias", "attnum.studies.training.bias.study", frozenset({
    "BiasConfig", "DATA", "PROFILES", "REFERENCE", "RUNS", "SITE_CASES", "run_bias", "tie_fractions",
    "train_run"}))
