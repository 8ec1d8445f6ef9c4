"""attnum: how far does an attention implementation deviate from exact attention, and why."""

from attnum import metrics
from attnum.attention import baseline_attention, flash_attention, golden_attention
from attnum.errors import AttnumInputError
from attnum.formats import FloatFormat, get_format
from attnum.metrics import wasserstein_distance
from attnum.policy import Policy, parse_policy
from attnum.rounding import round_to
from attnum.shadow import shadow

__version__ = "0.1.0"

__all__ = [
    "AttnumInputError", "FloatFormat", "Policy", "get_format", "parse_policy", "round_to",
    "golden_attention", "baseline_attention", "flash_attention", "metrics", "wasserstein_distance", "shadow",
    "__version__",
]
