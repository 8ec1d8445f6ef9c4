"""Every attention name resolved in one registry: attnum's implementations, real kernels, user callables."""

from attnum.kernels.registry import (
    KERNELS,
    Kernel,
    Target,
    available_kernels,
    builtin_names,
    get_kernel,
    kernel_status,
    require,
    resolve,
)

__all__ = ["KERNELS", "Kernel", "Target", "available_kernels", "builtin_names", "get_kernel", "kernel_status",
           "require", "resolve"]
