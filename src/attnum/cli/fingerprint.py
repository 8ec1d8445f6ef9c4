"""``attnum fingerprint TARGET``: which arithmetic a black-box attention kernel implements.

Exit status: 0 a fingerprint was taken (whether or not a candidate explains it: the output says), 1 the
target crashed (raised), hung or exited, or the --matmul callable raised (the document is still printed),
2 usage error (and a shape over the memory budget), 3 the target is unavailable here. The target runs in a
kernel server (attnum.sandbox.server), as for ``attnum audit``, unless --no-isolate.
"""

from __future__ import annotations

import sys

import typer

PANEL = "Audit kernels"

EXIT_UNAVAILABLE = 3
HELP = ("Recover a black-box attention kernel's arithmetic from its outputs.\n\n"
        "The KV tile it sums in, its split-KV cut and merge, the format of each rounding site, and a policy that "
        "reproduces it bit for bit (docs/fingerprint.md). TARGET is anything `attnum audit` takes.")


def register(app: typer.Typer) -> None:
    @app.command("fingerprint", help=HELP)
    def fingerprint_cmd(
        target: str = typer.Argument(..., help="a name `attnum audit` takes: a built-in (torch-sdpa-math, "
                                               "flash:POLICY, ...), package.module:function or "
                                               "path/file.py:function"),
        dtype: str = typer.Option("bf16", "--dtype", help="input dtype: fp16, bf16 or fp32"),
        lengths: str = typer.Option("512,1200", "--lengths", help="comma-separated key lengths S to probe"),
        heads: int = typer.Option(16, "--heads", help="heads per call (B = 1, N = 1 query)"),
        head_dim: int = typer.Option(64, "--head-dim", help="head dim d (= dv)"),
        seed: int = typer.Option(0, "--seed", help="seed of the fitting inputs"),
        timeout: float = typer.Option(300.0, "--timeout", help="seconds a target may take for one call"),
        numerics: str = typer.Option("faithful", "--numerics", help="arithmetic of interpreted Triton kernels "
                                                                     "(as for attnum audit)"),
        arch: str | None = typer.Option(None, "--arch",
                                        help="the GPU whose tensor cores interpreted Triton kernels' tl.dot runs on "
                                             "under faithful numerics: sm80, sm89, sm90 (the default) or sm100 (as "
                                             "for attnum audit; refused for a target attnum does not interpret)"),
        num_splits: int | None = typer.Option(None, "--num-splits",
                                              help="call a serving target's decode entry point with this split "
                                                   "count (as a serving framework would ask) instead of its own "
                                                   "choice"),
        no_isolate: bool = typer.Option(False, "--no-isolate", help="run the target in this process"),
        matmul: str | None = typer.Option(None, "--matmul", help="the kernel's matrix unit to name: "
                                                                  "module:function or file.py:function taking "
                                                                  "(a, b, c) and returning a @ b + c in float32 "
                                                                  "(run in this process), or mma:ARCH (attnum's "
                                                                  "model of ARCH, a self-check)"),
        memory: str = typer.Option("auto", "--memory", help="memory budget of the fingerprint's own arrays: a size "
                                                             "(4G, 512M) or auto (half of the memory available); a "
                                                             "replay over it is skipped and listed"),
        resolve: bool = typer.Option(False, "--resolve", help="tell undetermined sites, merges and structures apart "
                                                              "with more calls of the target"),
        as_json: bool = typer.Option(False, "--json", help="print the JSON document instead of the table"),
    ) -> None:
        """Fingerprint an attention kernel (the help text is HELP above)."""
        from attnum.errors import bad_value

        # Every input is checked before the work starts, the cheap ones before torch is loaded: a mistake
        # is the first and only line the command prints.
        try:
            lens = tuple(int(x) for x in lengths.split(",") if x.strip())
        except ValueError:
            raise bad_value("--lengths", lengths, "comma-separated integers, e.g. 512,1200") from None
        if not lens or min(lens) < 8:
            raise bad_value("--lengths", lengths, "key lengths of at least 8")
        for name, value in (("--heads", heads), ("--head-dim", head_dim), ("--num-splits", num_splits)):
            if value is not None and value < 1:  # --num-splits 0 is a mistake, not "the kernel's own choice"
                raise bad_value(name, value, "a positive integer")
        from attnum.kernels.user import precheck_target

        precheck_target(target)
        if matmul and not matmul.startswith("mma:"):
            from attnum.kernels.user import precheck

            precheck(matmul, param="--matmul")
        from attnum.audit.config import check_timeout
        from attnum.audit.fingerprint.budget import parse_memory

        timeout = check_timeout(timeout, param="--timeout")
        budget = parse_memory(memory)
        from attnum.audit.fingerprint import fingerprint
        from attnum.audit.fingerprint.probes import TargetFailed, torch_dtype
        from attnum.console.progress import Activity
        from attnum.kernels.registry import arch_flag

        torch_dtype(dtype)
        arch = arch_flag(arch, target, numerics=numerics)
        from attnum.kernels.registry import check_policy_target
        from attnum.numerics.formats import get_format

        check_policy_target(target, (get_format(dtype).name,))
        from attnum.console.streams import user_output_to_stderr

        # stdout is the document's alone: what a target or a --matmul function prints goes to stderr
        with user_output_to_stderr():
            matmul_fn = _matmul(matmul, dtype) if matmul else None
            fn = _resolve(target, numerics, arch) if no_isolate else None
            server = None if no_isolate else _start(target, numerics, arch, timeout)
            tty = sys.stderr.isatty()
            failed = None
            try:
                with Activity(f"fingerprint {target}") as act:
                    def progress(msg: str) -> None:
                        act.update(label=msg)
                        if tty:
                            print(f"attnum fingerprint: {msg}", file=sys.stderr, flush=True)

                    kw = dict(dtype=dtype, lengths=lens, heads=heads, d=head_dim, seed=seed, progress=progress,
                              matmul=matmul_fn, num_splits=num_splits, memory=budget, resolve=resolve)
                    try:
                        if no_isolate:
                            doc = fingerprint(fn, **kw)
                            doc["isolated"] = False
                        else:
                            doc = _isolated(server, kw)
                            server = None  # _isolated closed it
                        doc["numerics"] = _numerics_label(target, numerics, arch)
                    except TargetFailed as exc:
                        failed = exc
            finally:
                if server is not None:
                    server.close()
        if failed is not None:  # after the progress line: the target's failure is the last word
            print(f"attnum fingerprint: the target crashed: {failed.what} ({failed.where})", file=sys.stderr)
            raise typer.Exit(1)
        if doc.get("resolve"):
            plan = doc["resolve"].removeprefix("resolve=True (--resolve) runs ")
            doc["resolve"] = (f"attnum fingerprint {target} --dtype {dtype} --lengths {','.join(map(str, lens))} "
                              f"--heads {heads} --head-dim {head_dim} --seed {seed} --resolve  (runs {plan})")
        _print(doc, as_json)
        mma = doc.get("mma")
        if isinstance(mma, str) and "the matmul callable raised" in mma:
            print(f"attnum fingerprint: --matmul {matmul}: {mma.removeprefix('not identified: ')}", file=sys.stderr)
            raise typer.Exit(1)


def _matmul(spec: str, dtype: str):
    """``mma:ARCH`` or a user's ``module:function`` / ``file.py:function`` (imported here), tried once on one
    tile (attnum.audit.fingerprint.mma_id.check_matmul): a wrong signature is refused before any work."""
    fn = _load_matmul(spec)
    from attnum.audit.fingerprint.mma_id import check_matmul

    check_matmul(fn, dtype=dtype if dtype != "fp32" else "tf32")
    return fn


def _load_matmul(spec: str):
    from pathlib import Path

    from attnum.errors import bad_value
    from attnum.kernels.user import _import_module, import_file

    if spec.startswith("mma:"):
        from attnum.numerics.mma import dense as mma
        from attnum.numerics.mma.arch import get_arch

        arch = get_arch(spec[4:]).name
        return lambda a, b, c: mma.matmul(a, b, c, arch=arch)
    where, _, attr = spec.rpartition(":")
    if not where or not attr:
        raise bad_value("--matmul", spec, "mma:ARCH, module:function or file.py:function")
    is_file = where.endswith(".py") or "/" in where
    fn = import_file(Path(where), spec) if is_file else _import_module(where, spec)
    for part in attr.split("."):
        if not hasattr(fn, part):
            raise bad_value("--matmul", spec, f"an attribute of {where!r} (it has no {attr!r})")
        fn = getattr(fn, part)
    return fn


def _numerics_label(target: str, numerics: str, arch: str) -> str:
    """The arithmetic the target ran under, as the audit names it (``triton-interp:nvidia-sm90,...`` for
    an interpreted Triton kernel, else ``native``)."""
    from attnum.kernels.registry import interpreted_triton
    from attnum.kernels.triton import interp as triton_interp

    return triton_interp.label(numerics, arch) if interpreted_triton(target, "cpu") else "native"


def _resolve(target: str, numerics: str, arch: str):
    from attnum.kernels.registry import resolve

    t = resolve(target, "cpu", param="target", numerics=numerics, arch=arch)
    if not t.available:
        print(f"attnum fingerprint: {target} is unavailable here: {t.reason}", file=sys.stderr)
        raise typer.Exit(EXIT_UNAVAILABLE)
    return t.fn


def _start(target: str, numerics: str, arch: str, timeout: float):
    """A kernel server with ``target`` resolved in it (a user's code imported, its signature checked), before
    the fingerprint's progress starts: an unknown or bad target is the command's first and only line."""
    import torch

    from attnum.kernels import user
    from attnum.sandbox.server import KernelServer, TargetGone

    if not user.is_user_spec(target.strip()):
        _resolve(target, numerics, arch)  # attnum's own names: unknown or unavailable needs no child
    server = KernelServer("attention", target, device="cpu", timeout=timeout, threads=torch.get_num_threads(),
                          numerics=numerics, arch=arch)
    try:
        info = server.start()
    except TargetGone as gone:
        server.close()
        print(f"attnum fingerprint: the target {gone.status}: {gone.what}", file=sys.stderr)
        raise typer.Exit(1) from None
    except BaseException:
        server.close()
        raise
    if info.get("available") is not True:
        server.close()
        print(f"attnum fingerprint: {target} is unavailable here: {info.get('reason', '')}", file=sys.stderr)
        raise typer.Exit(EXIT_UNAVAILABLE)
    return server


def _isolated(server, kw: dict) -> dict:
    """The fingerprint with the target in the kernel server :func:`_start` opened (closed here): a crash,
    hang or exit of the target ends the fingerprint with exit 1 and one line, never this process."""
    from attnum.audit.fingerprint import fingerprint
    from attnum.sandbox.remote import RemoteTarget
    from attnum.sandbox.server import TargetGone

    try:
        doc = fingerprint(RemoteTarget(server), **kw)
    except TargetGone as gone:
        print(f"attnum fingerprint: the target {gone.status}: {gone.what}", file=sys.stderr)
        raise typer.Exit(1) from None
    finally:
        server.close()
    doc["isolated"] = True
    doc["target_peak_rss_mib"] = _peak_mib()
    return doc


def _peak_mib() -> float:
    """The kernel server's high-water resident memory, once it is closed and reaped: the largest of this
    process's reaped children (getrusage RUSAGE_CHILDREN; the server is not dumpable, its /proc is closed)."""
    import resource

    return round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)


def _print(doc: dict, as_json: bool) -> None:
    if as_json:
        from attnum.store.jsonout import dumps

        print(dumps(doc, indent=2))
        return
    from attnum.audit.fingerprint.report import rows
    from attnum.console.tables import print_table

    where = "kernel server" if doc.get("isolated") else "in process"
    print_table(("finding", "value"), rows(doc), title=f"attnum fingerprint (target run in {where})")
