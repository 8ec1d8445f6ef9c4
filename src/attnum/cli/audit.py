"""``attnum audit TARGET``: adversarial probes against a float64 golden, with FA's verdict rule.

Exit status: 0 every probe passed, 1 any probe failed, errored, crashed, timed out or exited, 2 usage
error, 3 nothing was tested: the target is unavailable here (package or device missing) or refused
every case. The target runs in a kernel server (attnum.sandbox.server) unless --no-isolate.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

PANEL = "Audit kernels"

EXIT_UNAVAILABLE = 3
HELP = ("Audit an attention kernel for silent numerical bugs (exit 0 pass, 1 fail, 2 usage, 3 unavailable).\n\n"
        "TARGET is package.module:function, path/file.py:function, triton-interpret:FILE.py:FUNCTION (a Triton "
        "kernel run on CPU by Triton's interpreter with the GPU's arithmetic; see --numerics), or a built-in "
        "(listed below; docs/audit.md has what each is). Serving kernels (prefill incl. varlen cu_seqlens, "
        "decode, paged, merges) follow docs/audit.md, 'The serving protocol'; the third-party Triton kernels "
        "run from the installed package or from its wheel: attnum kernels fetch PACKAGE. A built-in of a fetched "
        "package takes @VERSION for another pinned release (vllm-unified@0.30.0; attnum kernels list).")


def _epilog() -> str:
    """The built-in targets, read from the registry when the help is shown (no torch for ``attnum --help``)."""
    from attnum.cli.catalogue import help_targets

    return f"Built-in targets: {help_targets()}."


def register(app: typer.Typer) -> None:
    from attnum.console.conventions import lazy_epilog

    @app.command("audit", help=HELP, cls=lazy_epilog(_epilog))
    def audit(
        target: str | None = typer.Argument(None, help="package.module:function, path/file.py:function, "
                                                       "triton-interpret:FILE.py:FUNCTION, or a built-in (below)"),
        dtype: str = typer.Option("bf16,fp16,fp32", "--dtype", help="comma-separated: bf16, fp16, fp32"),
        device: str = typer.Option("cpu", "--device", help="cpu or cuda"),
        probes: str | None = typer.Option(None, "--probes", help="comma-separated probe names (default: all; "
                                                                  "--list shows them)"),
        strict: bool = typer.Option(False, "--strict", help="behaviour probes (NaN in masked K/V, determinism, "
                                                            "batch invariance) fail instead of noting"),
        k: float = typer.Option(2.0, "--k", help="fail when err > k x baseline err + floor"),
        k_grad: float = typer.Option(5.0, "--k-grad", help="the multiplier for gradients"),
        floor_ulps: float = typer.Option(2.0, "--floor-ulps", help="floor, in ULPs of the dtype at the output's scale"),
        empty_rows: str | None = typer.Option(None, "--empty-rows",
                                              help="output of rows with no key: zeros, nan, mean-v or any "
                                                   "(don't care); default: the target's declaration, else zeros"),
        causal_alignment: str | None = typer.Option(None, "--causal-alignment",
                                                    help="is_causal with N != S: top-left or bottom-right; "
                                                         "default: the target's declaration, else top-left"),
        seed: int = typer.Option(0, "--seed", help="seed of the probes' random inputs"),
        timeout: float = typer.Option(300.0, "--timeout", help="seconds a target may stay silent in one case "
                                                               "before the probe is 'timed out'"),
        no_isolate: bool = typer.Option(False, "--no-isolate", help="run the target in this process (debugging: "
                                                                    "a crash or exit then ends the audit)"),
        as_json: bool = typer.Option(False, "--json", help="print the JSON document instead of the table"),
        html_file: Path | None = typer.Option(None, "--html", help="also write an HTML report here"),
        list_probes: bool = typer.Option(False, "--list", help="list the probes and exit (no TARGET needed)"),
        show_all: bool = typer.Option(False, "--all", help="show every row, the unsupported ones too (by default "
                                                           "they fold into one line per reason; --json and "
                                                           "--html always have them)"),
        numerics: str = typer.Option("faithful", "--numerics",
                                     help="arithmetic of interpreted Triton kernels: faithful (the GPU's: bf16 "
                                          "rounding, TF32 dots, fp32 a*b+c fused unless "
                                          "TRITON_DEFAULT_FP_FUSION=0; verdicts say "
                                          "triton-interp:nvidia-sm90[,fp-fusion]), raw "
                                          "(Triton's interpreter as is) or faithful-ex2-approx"),
        arch: str | None = typer.Option(None, "--arch",
                                        help="the GPU whose tensor cores interpreted Triton kernels' tl.dot runs on "
                                             "under faithful numerics: sm80, sm89 (mma.sync), sm90 (wgmma, the "
                                             "default) or sm100 (tcgen05); verdicts say triton-interp:nvidia-ARCH; "
                                             "refused for a target attnum does not interpret"),
        emulation: str | None = typer.Option(None, "--emulation",
                                             help="judge forward cases against attnum's emulation of the kernel's "
                                                  "designed arithmetic (a policy, e.g. sage1) instead of the dtype's "
                                                  "bounds; none: the bounds; default: the target's declaration"),
    ) -> int:
        """Audit an attention kernel (the help text is HELP above)."""
        if list_probes:  # the catalogue needs no target (and with --json it is a JSON document too)
            from attnum.audit.probes import PROBES

            if as_json:
                from attnum.store.jsonout import dumps

                print(dumps([{"probe": p.name, "kind": p.kind, "checks": p.summary, "sources": list(p.refs)}
                             for p in PROBES.values()], indent=2))
            else:
                from attnum.console.tables import print_table as emit

                emit(("probe", "kind", "what it checks", "sources"),
                     [[p.name, p.kind, p.summary, ", ".join(p.refs)] for p in PROBES.values()])
            raise typer.Exit(0)
        from attnum.errors import AttnumInputError

        if target is None:
            raise AttnumInputError("TARGET is missing: name the kernel to audit (package.module:function, "
                                   "path/file.py:function or a built-in: attnum audit --help lists them), or "
                                   "--list for the probes")
        # Every input is checked before the work starts, the cheap ones before torch is loaded: a mistake
        # is the first and only line the command prints.
        if html_file is not None:
            check_writable(html_file, "--html")
        from attnum.kernels.user import precheck_target

        precheck_target(target)  # a user's file exists, its module is installed: no import yet
        from attnum.audit.config import AuditConfig
        from attnum.kernels.registry import arch_flag

        arch = arch_flag(arch, target, device, numerics=numerics)
        cfg = AuditConfig(target=target, dtypes=dtype, device=device, probes=probes, strict=strict, k=k,
                          k_grad=k_grad, floor_ulps=floor_ulps, empty_rows=empty_rows,
                          causal_alignment=causal_alignment, seed=seed, timeout=timeout, isolate=not no_isolate,
                          numerics=numerics, arch=arch, emulation=emulation)
        from attnum.audit.runner import plan, run_audit

        from attnum.console.streams import user_output_to_stderr

        if cfg.isolate:
            from attnum.audit.isolate import start

            started = start(cfg)  # the target resolved (a user's code imported, its signature checked)
        else:
            from attnum.kernels.registry import resolve

            with user_output_to_stderr():  # what a user's module prints as it is imported is not the document's
                started = resolve(cfg.target, cfg.device, param="target", numerics=cfg.numerics, arch=cfg.arch)
        total = len(plan(cfg))
        from attnum.console.progress import Activity

        # Progress on stderr (stdout keeps the table or the JSON document alone): on a terminal one line
        # per probe; in a log a line every ATTNUM_PROGRESS_INTERVAL seconds saying how many probes are
        # done and which ran last (a few lines a minute however many probes).
        tty = sys.stderr.isatty()
        with Activity(f"audit {target}", total=total) as act:
            act.update(done=0)

            def progress(r) -> None:
                act.update(done=(act.done or 0) + 1, label=f"last: {r.name} {r.dtype} {r.status}")
                if tty:
                    print(f"attnum audit: [{act.done}/{total}] {r.name} {r.dtype}: {r.status} ({r.seconds:.1f}s)",
                          file=sys.stderr, flush=True)

            with user_output_to_stderr():  # stdout is the table's or the JSON's alone, --no-isolate too
                report = run_audit(cfg, progress=progress, isolate=cfg.isolate, started=started)
        from attnum.audit.report import print_table, to_html, to_json

        if html_file is not None:
            from attnum.store.outfile import write_atomic

            try:
                write_atomic(html_file, to_html(report))  # a temp file renamed into place
            except OSError as err:
                from attnum.errors import AttnumEnvironmentError

                raise AttnumEnvironmentError(f"--html {str(html_file)!r}: cannot write it ({err.strerror or err}); "
                                             "name a file in a writable folder") from None
        if as_json:  # where the HTML went is part of the document: stdout stays one JSON document
            from attnum.store.jsonout import dumps

            print(dumps({**to_json(report), "html": str(html_file) if html_file else None}, indent=2))
        else:
            if html_file is not None:  # before the table: its last line stays the summary (for tail)
                print(f"HTML report written to {html_file}")
            print_table(report, show_all=show_all)
        if not report.available:
            raise typer.Exit(EXIT_UNAVAILABLE)
        raise typer.Exit(0 if report.passed else 1)


def check_writable(path: Path, flag: str) -> None:
    """Refuse, before any work, an output path that cannot become a file: a folder, a missing or
    non-folder parent."""
    from attnum.errors import AttnumInputError
    from attnum.store.outfile import is_own_file

    if is_own_file(path):
        raise AttnumInputError(f"{flag} {str(path)!r} is attnum's own bookkeeping file (a results store, its "
                               "WAL or a folder lock), never an output: name another file")
    if path.is_dir():
        raise AttnumInputError(f"{flag} {str(path)!r} is a folder; name a file (e.g. {str(path / 'audit.html')!r})")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise AttnumInputError(f"{flag} {str(path)!r}: the folder {str(parent)!r} does not exist")
