"""Every attention name resolved in one registry: attnum's implementations, real kernels, user callables.

The registry's names are loaded on first use (PEP 562): ``attnum.kernels.user`` and ``attnum.kernels.wheels``
stay importable without torch, so the command line checks a user's file or a package name before torch loads.
"""

__all__ = ["KERNELS", "Kernel", "Target", "available_kernels", "builtin_names", "get_kernel", "kernel_status",
           "require", "resolve"]


def __getattr__(name: str):
    if name in __all__:
        from attnum.kernels import registry

        return getattr(registry, name)
    raise AttributeError(f"module 'attnum.kernels' has no attribute {name!r}")
