"""``attnum kernels fetch PACKAGE[@VERSION]``: a pinned wheel, without dependencies, into the user cache; only
its kernel files are kept (each checked against the pin table's sha256), the wheel is deleted.

SGLang's, vLLM's and SageAttention's Triton kernels (built-in ``sglang-*`` / ``vllm-*`` / ``sage1-triton``),
FlashInfer's Triton merges (``flashinfer-triton-merge*``), ring-flash-attn's merge (``ring-flash-attn-merge``)
and fla's attention (``fla-parallel-attn``, ``fla-decode``, ``fla-nsa``) run from the installed package, or
else from the kernel files of their wheel (attnum.kernels.wheels.source); ``attnum kernels list`` shows every
pinned version. Exit 0 when the files are there (fetched now or before), 2 for an unknown package or a version
attnum has not pinned, 3 when the download fails or is refused (a hash that does not match).
"""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    kernels = typer.Typer(help="Third-party kernels attnum can audit without installing their package.",
                          no_args_is_help=True)

    @kernels.command("fetch")
    def fetch(package: str = typer.Argument(..., help="sglang, vllm, sageattention, flashinfer, ring-flash-attn or "
                                                      "fla, optionally @VERSION (a version of `attnum kernels "
                                                      "list`; default: the pinned one, e.g. vllm 0.33.0)")) -> int:
        """Download PACKAGE's pinned wheel (no dependencies) once and keep its Triton kernel files."""
        from attnum.errors import AttnumEnvironmentError
        from attnum.kernels.wheels import source as wheels

        name, version = wheels.split(package)
        version = wheels.version_of(name, version)
        if wheels.installed(name):
            why = wheels.missing(name, version)
            if why:
                _fail(why, 3)
            print(f"{name} is installed; its kernels run from the installed package")
            raise typer.Exit(0)
        try:
            where = wheels.fetch(name, version)
        except AttnumEnvironmentError as err:
            _fail(str(err), 3)  # one line: a refused or failed fetch
        print(f"{name} {version} kernel files in {where}")
        raise typer.Exit(0)

    @kernels.command("list")
    def list_versions() -> None:
        """Every package and version attnum can fetch, the default marked, and whether it is here."""
        from attnum.console.tables import print_table
        from attnum.kernels.wheels import source as wheels

        rows = []
        for name, pkg in wheels.packages().items():
            for v, w in pkg.versions.items():
                state = "installed" if wheels.installed(name) else ("fetched" if not wheels.missing(name, v) else "-")
                rows.append([name, v + (" (default)" if v == pkg.default else ""), w.name, f"{w.size / 1e6:.3g} MB",
                             str(len(w.files)), state])
        print_table(("package", "version", "wheel", "download", "kernel files", "here"), rows,
                    title=f"pinned third-party kernels (cache: {wheels.cache_dir()})")

    app.add_typer(kernels, name="kernels")


def _fail(message: str, code: int) -> None:
    import sys

    print(f"attnum: error: {message}", file=sys.stderr)
    raise typer.Exit(code)
