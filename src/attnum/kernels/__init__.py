"""Adapters giving real attention kernels the SDPA signature, and their registry."""

from attnum.kernels.registry import KERNELS, Kernel, available_kernels, get_kernel, kernel_status

__all__ = ["KERNELS", "Kernel", "available_kernels", "get_kernel", "kernel_status"]
