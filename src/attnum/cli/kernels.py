"""``attnum kernels fetch PACKAGE``: the pinned wheel, without dependencies, into the user cache (its sha256
checked); the packages are :data:`attnum.kernels.wheels.source.PINS` (``--help`` lists them).

SGLang's, vLLM's and SageAttention's Triton kernels (built-in ``sglang-*`` / ``vllm-*`` / ``sage1-triton``),
FlashInfer's Triton merges (``flashinfer-triton-merge*``), ring-flash-attn's merge
(``ring-flash-attn-merge``) and fla's softmax attention (``fla-parallel-attn``, ``fla-decode``, ``fla-nsa``) run from the installed package, or else from the kernel files of their wheel
(attnum.kernels.wheels.source). Exit 0 when the files are there (fetched now or before), 2 for an unknown package, 3 when the download fails.
"""

from __future__ import annotations

import typer

PANEL = "Audit kernels"


def _epilog() -> str:
    """The packages and their pins, read from attnum.kernels.wheels when the help is shown."""
    from attnum.cli.catalogue import help_packages

    return f"Packages (pinned): {help_packages()}."


def register(app: typer.Typer) -> None:
    from attnum.console.conventions import lazy_epilog

    kernels = typer.Typer(help="Third-party kernels attnum can audit without installing their package.",
                          no_args_is_help=True)

    @kernels.command("fetch", cls=lazy_epilog(_epilog))
    def fetch(package: str = typer.Argument(..., help="the package whose pinned wheel to fetch (listed below)")) -> int:
        """Download PACKAGE's pinned wheel (no dependencies) once and extract its Triton kernel files."""
        import sys

        from attnum.errors import AttnumEnvironmentError
        from attnum.kernels.wheels import source as wheels

        _known(package, wheels)
        if wheels.installed(package):
            print(f"{package} is installed; its kernels run from the installed package")
            raise typer.Exit(0)
        # Already here: the pinned wheel's own check (its sha256, the extracted files' bytes) passes, so
        # nothing to download and nothing from pip -- one line, at once.
        if not wheels.missing(package):
            print(f"{package}: already fetched, sha256 checked; kernel files in {wheels.source_dir(package)}")
            raise typer.Exit(0)
        from attnum.console.progress import Activity

        try:
            with Activity(f"kernels fetch {package}"):  # pip's own output is kept for its error line
                where = wheels.fetch(package, quiet=True)
        except AttnumEnvironmentError as err:
            print(f"attnum: error: {err}", file=sys.stderr)  # one line: a refused or failed fetch
            raise typer.Exit(3) from None
        print(f"{package} {wheels.PINS[package]} kernel files in {where}")
        raise typer.Exit(0)

    app.add_typer(kernels, name="kernels")


def _known(package: str, wheels) -> None:
    """attnum.kernels.wheels' own check of the name, with a "did you mean" for a misspelt one."""
    from attnum.errors import AttnumInputError, did_you_mean

    try:
        wheels._check(package)
    except AttnumInputError as err:
        hint = did_you_mean(package, list(wheels.PINS))
        text = str(err)
        raise AttnumInputError(text.replace("is not allowed; ", f"is not allowed; {hint}", 1) if hint else text) \
            from None
