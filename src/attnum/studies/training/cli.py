"""`attnum diverge`: the paper's weight-divergence runs, or the same metrics on two checkpoint folders."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import typer

from attnum.console.progress import Activity
from attnum.errors import AttnumInputError
from attnum.store.jsonout import dumps
from attnum.store.outfile import write_atomic

DEFAULT_OUT = Path("runs/diverge")


def register(app: typer.Typer) -> None:
    @app.command()
    def diverge(
        workload: str = typer.Option("digits", help="digits (caption-conditioned diffusion) or lm (byte LM)."),
        profile: str = typer.Option("quick", help="quick (minutes on 2 CPU cores) or full; bias (bias-tiny): the "
                                                  "biased-rounding comparison of attnum.studies.training.bias.study (lm only)."),
        attention: str = typer.Option(
            "flash:uniform:bf16", help="Candidate: flash:POLICY, baseline:POLICY, eager, or a kernel name (default: "
                                       "flash with every site in bf16, the paper's pairing)."),
        baseline: str = typer.Option("baseline:uniform:bf16",
                                     help="Reference attention of the baseline runs (default: the same low precision)."),
        block_q: int | None = typer.Option(None, help="Query tile Br of a flash:POLICY candidate."),
        block_k: int | None = typer.Option(8, help="Key/value tile Bc of a flash:POLICY candidate."),
        low_precision: str = typer.Option("bf16", help="Autocast dtype of the low-precision run: bf16 or fp16."),
        steps: int | None = typer.Option(None, help="Override the profile's step count."),
        ckpt_every: int | None = typer.Option(None, help="Override the profile's checkpoint interval K."),
        seeds: str = typer.Option("0,1,2,3,4", help="Init seeds, comma-separated (>= 2): one baseline, flash and "
                                                "low-precision run each; the different-init proxy pairs each "
                                                "seed's baseline with the next seed's."),
        data_seed: int = typer.Option(0, help="Data order seed (the same in every run)."),
        out: Path = typer.Option(DEFAULT_OUT, help="Output folder (runs, results.json, figures, index.html)."),  # noqa: B008
        checkpoints: tuple[Path, Path] | None = typer.Option(
            None, help="Compare two checkpoint folders A B instead of training (safetensors or torch state dicts)."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of text."),
        isolate: bool = typer.Option(True, "--isolate/--no-isolate", help="Run a user's --attention/--baseline "
                                     "(file.py:fn, module:fn) in a kernel server process (attnum.sandbox.server); "
                                     "--no-isolate runs it in this process, trusting its code."),
        timeout: float = typer.Option(300.0, help="Seconds one call of a user's attention may take (isolated)."),
    ) -> None:
        """Train flash vs baseline, a different init seed, and low precision per seed; compare the weights.

        Re-running with the same flags and --out reuses every finished run (resume after an interruption)."""
        from attnum.store.outdir import check_out_folder

        check_out_folder(out)  # an existing file as --out: one line, before any training
        from attnum.kernels.user import precheck_target

        precheck_target(attention, "--attention")  # a user's file that is not there: before torch loads
        precheck_target(baseline, "--baseline")
        if checkpoints:
            from attnum.studies.training.folder_compare import compare_folders
            from attnum.studies.training.report import write_checkpoint_report

            with Activity("diverge --checkpoints"):
                result = compare_folders(*checkpoints)
            with one_writer(out):
                write_atomic((out / "checkpoints.json"), dumps(result, indent=1))
                report = write_checkpoint_report(result, out)
            written = [str(out / "checkpoints.json"), str(report)]
            print(dumps({**result, "written": written}, indent=1) if as_json else _folders_text(result))
            if not as_json:
                print(f"wrote {' and '.join(written)}")
            return
        if profile.startswith("bias"):
            from attnum.studies.training.bias.cli import diverge_bias

            if workload != "lm":  # before the folder is made or locked: a rejected command leaves nothing
                raise AttnumInputError(f"workload={workload!r} is not allowed with --profile {profile}; expected lm")

            with one_writer(out):
                diverge_bias(profile=profile, workload=workload, steps=steps, block_k=block_k,
                             seeds=_ints(seeds, "seeds"), data_seed=data_seed, out=out, as_json=as_json)
            return
        from attnum.studies.training.diverge import DivergeConfig, run_diverge

        cfg = DivergeConfig(
            workload=workload, profile=profile, attention=attention, baseline=baseline, block_q=block_q,
            block_k=block_k, low_precision=low_precision, steps=steps, ckpt_every=ckpt_every,
            seeds=_ints(seeds, "seeds"), data_seed=data_seed, out=out, isolate=isolate, timeout=timeout,
        )
        from attnum.studies.training.loop import AttentionFailed

        try:
            with one_writer(out), Activity("diverge", unit="runs trained", eta=True) as act:
                summary = run_diverge(cfg, log=(lambda *_: None) if as_json else print,
                                      progress=lambda done, total, label: act.update(done, total, label))
        except AttentionFailed as err:  # the user's attention died, hung, raised or lied: no result
            print(f"attnum: error: {str(err).splitlines()[0]}", file=sys.stderr)
            raise typer.Exit(1) from None
        if as_json:
            head = {k: v for k, v in summary["headline"].items() if k != "per_seed"}
            print(dumps({"headline": head, "wall_s": summary["wall_s"], "report": str(out / "index.html")}, indent=1))
            return
        for line in summary["headline"]["lines"]:
            print(line)
        print(summary["headline"]["sentence"])
        print(f"wall time {summary['wall_s']:.1f} s; report: {out / 'index.html'}")


@contextlib.contextmanager
def one_writer(out: Path) -> Iterator[None]:
    """Create ``out`` and hold its one-writer lock (``attnum.store.lock``) while the block runs: a second
    ``diverge`` on the same folder is refused in one line naming the first, as a second sweep is.

    A command rejected inside the block (bad input, exit 2) leaves nothing behind: the lock file is
    removed on release, and the folder too when this call created it and it is still empty."""
    from attnum.store.lock import FolderLock
    from attnum.store.outdir import make_out_folder

    created = not out.exists()
    lock = FolderLock(make_out_folder(out))
    try:
        yield
    except AttnumInputError:
        lock.release()
        if created:
            with contextlib.suppress(OSError):
                out.rmdir()  # only if empty
        raise
    finally:
        lock.release()


def _ints(text: str, name: str) -> tuple[int, ...]:
    try:
        values = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise AttnumInputError(f"{name}={text!r} is not allowed; expected comma-separated integers") from None
    from attnum.console.conventions import check_number

    check_number(f"--{name}", "seed", values)  # each is an init seed
    return values


def _folders_text(result: dict) -> str:
    lines = [f"{'pair':<40} {'max|dW|':>11} {'W1':>11} {'mean W1':>11} {'tensors':>8}"]
    for r in result["pairs"]:
        lines.append(f"{r['name']:<40} {r['max_abs']:>11.3e} {r['w1']:>11.3e} {r['w1_mean']:>11.3e} "
                     f"{len(r['per_tensor']):>8}")
        lines += [f"  mismatch: {m['name']}: {m['reason']}" for m in r["mismatches"]]
    lines += [f"unpaired file: {u}" for u in result["unpaired_files"]]
    return "\n".join(lines)
