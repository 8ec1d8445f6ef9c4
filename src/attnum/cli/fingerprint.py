"""``attnum fingerprint TARGET``: which arithmetic a black-box attention kernel implements.

Exit status: 0 a fingerprint was taken (whether or not a candidate explains it: the output says), 1 the
target crashed (raised), hung or exited, or the --matmul callable raised (the document is still printed),
2 usage error (and a shape over the memory budget), 3 the target is unavailable here. The target runs in a
kernel server (attnum.sandbox.server), as for ``attnum audit``, unless --no-isolate.
"""

from __future__ import annotations

import sys

import typer

EXIT_UNAVAILABLE = 3
HELP = ("Recover a black-box attention kernel's arithmetic from its outputs: the KV tile it sums in, its "
        "split-KV cut and merge, the format of each rounding site, and a policy that reproduces it bit for "
        "bit (docs/fingerprint.md). TARGET is anything `attnum audit` takes.")


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

        from attnum.audit.config import check_timeout
        from attnum.audit.fingerprint import fingerprint
        from attnum.audit.fingerprint.budget import parse_memory
        from attnum.audit.fingerprint.probes import TargetFailed, torch_dtype
        from attnum.console.progress import Activity
        from attnum.errors import bad_value
        from attnum.kernels.registry import arch_flag

        torch_dtype(dtype)
        timeout = check_timeout(timeout)
        budget = parse_memory(memory)
        arch = arch_flag(arch, target)
        try:
            lens = tuple(int(x) for x in lengths.split(",") if x.strip())
        except ValueError:
            raise bad_value("--lengths", lengths, "comma-separated integers, e.g. 512,1200") from None
        if not lens or min(lens) < 8:
            raise bad_value("--lengths", lengths, "key lengths of at least 8")
        for name, value in (("--heads", heads), ("--head-dim", head_dim), ("--num-splits", num_splits or 1)):
            if value < 1:
                raise bad_value(name, value, "a positive integer")
        tty = sys.stderr.isatty()
        with Activity(f"fingerprint {target}") as act:
            def progress(msg: str) -> None:
                act.update(label=msg)
                if tty:
                    print(f"attnum fingerprint: {msg}", file=sys.stderr, flush=True)

            kw = dict(dtype=dtype, lengths=lens, heads=heads, d=head_dim, seed=seed, progress=progress,
                      matmul=_matmul(matmul) if matmul else None, num_splits=num_splits, memory=budget,
                      resolve=resolve)
            failed = None
            try:
                if no_isolate:
                    fn = _resolve(target, numerics, arch)
                    doc = fingerprint(fn, **kw)
                    doc["isolated"] = False
                else:
                    doc = _isolated(target, numerics, arch, timeout, kw)
                doc["numerics"] = _numerics_label(target, numerics, arch)
            except TargetFailed as exc:
                failed = exc
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


def _matmul(spec: str):
    """``mma:ARCH`` or a user's ``module:function`` / ``file.py:function`` (imported here)."""
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


def _isolated(target: str, numerics: str, arch: str, timeout: float, kw: dict) -> dict:
    """The fingerprint with the target in a kernel server: a crash, hang or exit of the target ends the
    fingerprint with exit 1 and one line, never this process."""
    import torch

    from attnum.audit.fingerprint import fingerprint
    from attnum.kernels import user
    from attnum.sandbox.remote import RemoteTarget
    from attnum.sandbox.server import KernelServer, TargetGone

    if not user.is_user_spec(target.strip()):
        _resolve(target, numerics, arch)  # attnum's own names: unknown or unavailable needs no child
    server = KernelServer("attention", target, device="cpu", timeout=timeout, threads=torch.get_num_threads(),
                          numerics=numerics, arch=arch)
    try:
        try:
            info = server.start()
            if info.get("available") is not True:
                print(f"attnum fingerprint: {target} is unavailable here: {info.get('reason', '')}", file=sys.stderr)
                raise typer.Exit(EXIT_UNAVAILABLE)
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
