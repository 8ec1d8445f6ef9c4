"""``attnum kernels fetch PACKAGE[@VERSION]``: a pinned wheel, without dependencies, into the user cache; only
its kernel files are kept (each checked against the pin table's sha256), the wheel is deleted.
``attnum kernels list``: every pinned version, the default marked (``fetch --help`` lists the packages).

SGLang's, vLLM's and SageAttention's Triton kernels (built-in ``sglang-*`` / ``vllm-*`` / ``sage1-triton``),
FlashInfer's Triton merges (``flashinfer-triton-merge*``), ring-flash-attn's merge (``ring-flash-attn-merge``)
and fla's attention (``fla-parallel-attn``, ``fla-decode``, ``fla-nsa``) run from the installed package, or
else from the kernel files of their wheel (attnum.kernels.wheels.source). Exit 0 when the files are there
(fetched now or before: then at once and in one line), 2 for an unknown package or a version attnum has not
pinned, 3 when the download fails or is refused (a hash that does not match).
"""

from __future__ import annotations

import typer

PANEL = "Audit kernels"


def _epilog() -> str:
    """The packages and their pins, read from attnum.kernels.wheels when the help is shown."""
    from attnum.cli.catalogue import help_packages

    return f"Packages (pinned defaults; `attnum kernels list` for every version): {help_packages()}."


def register(app: typer.Typer) -> None:
    from attnum.console.conventions import lazy_epilog

    kernels = typer.Typer(help="Third-party kernels attnum can audit without installing their package.",
                          no_args_is_help=True)

    @kernels.command("fetch", cls=lazy_epilog(_epilog))
    def fetch(package: str = typer.Argument(..., help="the package whose pinned wheel to fetch (listed below), "
                                                      "optionally @VERSION (a version of `attnum kernels list`)")
              ) -> int:
        """Download PACKAGE's pinned wheel (no dependencies) once and keep its Triton kernel files."""
        from attnum.errors import AttnumEnvironmentError
        from attnum.kernels.wheels import source as wheels

        name, version = _known(package, wheels)
        if wheels.installed(name):
            why = wheels.missing(name, version)
            if why:
                _fail(why, 3)
            print(f"{name} is installed; its kernels run from the installed package")
            raise typer.Exit(0)
        # Already here: every kernel file verifies against the pin table's sha256, so nothing to download and
        # nothing from pip -- one line, at once.
        if not wheels.missing(name, version):
            print(f"{name} {version}: already fetched, sha256 checked; kernel files in "
                  f"{wheels.source_dir(name, version)}")
            raise typer.Exit(0)
        from attnum.console.progress import Activity

        try:
            with Activity(f"kernels fetch {name}@{version}"):  # pip's own output is kept for its error line
                where = wheels.fetch(name, version, quiet=True)
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


def _known(spec: str, wheels) -> tuple[str, str]:
    """(package, version) of ``PACKAGE[@VERSION]``, checked by attnum.kernels.wheels, with a "did you mean" for a
    misspelt package."""
    from attnum.errors import AttnumInputError, did_you_mean

    try:
        name, version = wheels.split(spec)
    except AttnumInputError as err:
        package = spec.strip().partition("@")[0]
        hint = "" if package in wheels.packages() else did_you_mean(package, list(wheels.packages()))
        text = str(err)
        raise AttnumInputError(text.replace("is not allowed; ", f"is not allowed; {hint}", 1) if hint else text) \
            from None
    return name, wheels.version_of(name, version)


def _fail(message: str, code: int) -> None:
    import sys

    print(f"attnum: error: {message}", file=sys.stderr)
    raise typer.Exit(code)
