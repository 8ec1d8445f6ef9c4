"""Tensor cores as they round: ``attnum.mma``, the public face of :mod:`attnum.numerics.mma`.

    from attnum import mma
    c = mma.matmul(a, b, arch="sm90")             # a (..., M, K), b (..., K, N) -> (..., M, N) float32
    d = mma.matmul_block_scaled(a, b, sa, sb, ...)  # Blackwell MXFP8/6/4, NVFP4 (sm100, sm120)
    mma.arch_names(), mma.get_arch("hopper")      # the architectures, as data

Every result is bit for bit MMA-Sim's (Xie et al., arXiv 2511.10909; the ``mmasim`` package is the test
oracle). ``matmul_reference`` and ``matmul_block_scaled_reference`` are the same arithmetic written plainly.
"""

from attnum.numerics.mma.arch import ARCHS, Arch, BlockScaledInstruction, Instruction, arch_names, get_arch
from attnum.numerics.mma.dense import matmul, matmul_reference
from attnum.numerics.mma.scaled import matmul_block_scaled, matmul_block_scaled_reference

__all__ = ["ARCHS", "Arch", "BlockScaledInstruction", "Instruction", "arch_names", "get_arch", "matmul",
           "matmul_block_scaled", "matmul_block_scaled_reference", "matmul_reference"]
