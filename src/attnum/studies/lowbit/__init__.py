"""The low-bit attention study: SageAttention's INT8/INT4/FP8/FP4 schemes and FlashAttention-4's arithmetic.

Sources: SageAttention (Zhang et al., arXiv 2410.02367, Tables 2-4), SageAttention2 (arXiv 2411.10958,
Tables 4, 6, 7), SageAttention3 (arXiv 2505.11594), thu-ml/SageAttention's Triton kernels;
FlashAttention-4 (Dao-AILab/flash-attention, ``flash_attn/cute``). The emulation is
:mod:`attnum.attention.lowbit.sage`, :mod:`attnum.numerics.lowbit`, :mod:`attnum.numerics.mx` and :mod:`attnum.attention.lowbit.exp2`.
"""
