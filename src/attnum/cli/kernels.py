"""``attnum kernels fetch sglang|vllm|sageattention|flashinfer|ring-flash-attn|fla``: the pinned wheel, without
dependencies, into the user cache (its sha256 checked where pinned).

SGLang's, vLLM's and SageAttention's Triton kernels (built-in ``sglang-*`` / ``vllm-*`` / ``sage1-triton``),
FlashInfer's Triton merges (``flashinfer-triton-merge*``), ring-flash-attn's merge
(``ring-flash-attn-merge``) and fla's softmax attention (``fla-parallel-attn``, ``fla-decode``, ``fla-nsa``) run from the installed package, or else from the kernel files of their wheel
(attnum.kernels.wheels.source). Exit 0 when the files are there (fetched now or before), 2 for an unknown package, 3 when the download fails.
"""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    kernels = typer.Typer(help="Third-party kernels attnum can audit without installing their package.",
                          no_args_is_help=True)

    @kernels.command("fetch")
    def fetch(package: str = typer.Argument(..., help="sglang, vllm, sageattention, flashinfer, ring-flash-attn or "
                                                      "fla (pinned: sglang 0.5.3, vllm 0.33.0, sageattention 1.0.6, "
                                                      "flashinfer-python 0.7.2.post1, ring-flash-attn 0.1.8, "
                                                      "fla-core 0.6.0)")) -> int:
        """Download PACKAGE's pinned wheel (no dependencies) once and extract its Triton kernel files."""
        from attnum.errors import AttnumEnvironmentError
        from attnum.kernels.wheels import source as wheels

        wheels._check(package)
        if wheels.installed(package):
            print(f"{package} is installed; its kernels run from the installed package")
            raise typer.Exit(0)
        try:
            where = wheels.fetch(package)
        except AttnumEnvironmentError as err:
            import sys

            print(f"attnum: error: {err}", file=sys.stderr)  # one line: a refused or failed fetch
            raise typer.Exit(3) from None
        print(f"{package} {wheels.PINS[package]} kernel files in {where}")
        raise typer.Exit(0)

    app.add_typer(kernels, name="kernels")
