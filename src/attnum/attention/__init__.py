"""Attention implementations sharing one keyword signature: golden, baseline, flash."""

from attnum.attention.baseline import baseline_attention
from attnum.attention.flash import flash_attention
from attnum.attention.golden import golden_attention

__all__ = ["baseline_attention", "flash_attention", "golden_attention"]
