"""Low-bit attention schemes: FP8/INT8 quantized formats and scales, SageAttention, FlashAttention-4's exp2 and softmax steps."""
