"""The tensor-core model: matrix multiplies computed as each GPU architecture's MMA instructions round.

The public name is :mod:`attnum.mma` (``from attnum import mma; mma.matmul(a, b, arch="sm90")``). Inside:

- :mod:`.arch` -- the matrix units of every architecture, as data (MMA-Sim's per-architecture parameters);
- :mod:`.dense` -- ``matmul`` / ``matmul_reference``: fp16, bf16, TF32, FP8 MMA chains;
- :mod:`.scaled` -- ``matmul_block_scaled`` / ``_reference``: Blackwell's block-scaled MXFP8/6/4 and NVFP4;
- :mod:`.dense_kernels`, :mod:`.scaled_kernels` -- their compiled (numba) arithmetic;
- :mod:`.sites` -- a policy's matmul sites as tensor-core instructions (``mma=ARCH``).

Before 0.2 this path was a module holding ``matmul``; its names still resolve here, with a DeprecationWarning.
"""

from attnum._moved import forward

__getattr__ = forward("attnum.numerics.mma", "attnum.numerics.mma.dense", frozenset({"matmul", "matmul_reference"}),
                      public="attnum.mma")
