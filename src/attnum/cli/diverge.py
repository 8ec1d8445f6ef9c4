"""`attnum diverge`: the paper's weight-divergence runs, or the same metrics on two checkpoint folders."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from attnum.errors import AttnumInputError

DEFAULT_OUT = Path("runs/diverge")


def register(app: typer.Typer) -> None:
    @app.command()
    def diverge(
        workload: str = typer.Option("digits", help="digits (caption-conditioned diffusion) or lm (byte LM)."),
        profile: str = typer.Option("quick", help="quick (minutes on 2 CPU cores) or full."),
        attention: str = typer.Option("flash:fp32", help="Candidate: flash:POLICY, baseline:POLICY, eager, or a kernel name."),
        baseline: str = typer.Option("eager", help="Reference attention of the baseline run."),
        block_q: int | None = typer.Option(None, help="Query tile Br of a flash:POLICY candidate."),
        block_k: int | None = typer.Option(8, help="Key/value tile Bc of a flash:POLICY candidate."),
        low_precision: str = typer.Option("bf16", help="Autocast dtype of the low-precision run: bf16 or fp16."),
        steps: int | None = typer.Option(None, help="Override the profile's step count."),
        ckpt_every: int | None = typer.Option(None, help="Override the profile's checkpoint interval K."),
        init_seed: int = typer.Option(0, help="Init seed of baseline, flash and low-precision runs."),
        alt_seed: int = typer.Option(1, help="Init seed of the different-init run."),
        data_seed: int = typer.Option(0, help="Data order seed (the same in every run)."),
        out: Path = typer.Option(DEFAULT_OUT, help="Output folder (runs, results.json, figures, index.html)."),  # noqa: B008
        checkpoints: tuple[Path, Path] | None = typer.Option(
            None, help="Compare two checkpoint folders A B instead of training (safetensors or torch state dicts)."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of text."),
    ) -> None:
        """Train flash vs baseline, a different init seed, and low precision; compare the weights."""
        if checkpoints:
            from attnum.training.folder_compare import compare_folders
            from attnum.training.report import write_checkpoint_report

            result = compare_folders(*checkpoints)
            out.mkdir(parents=True, exist_ok=True)
            (out / "checkpoints.json").write_text(json.dumps(result, indent=1))
            write_checkpoint_report(result, out)
            print(json.dumps(result, indent=1) if as_json else _folders_text(result))
            return
        from attnum.training.diverge import DivergeConfig, run_diverge

        try:
            cfg = DivergeConfig(
                workload=workload, profile=profile, attention=attention, baseline=baseline, block_q=block_q,
                block_k=block_k, low_precision=low_precision, steps=steps, ckpt_every=ckpt_every,
                init_seed=init_seed, alt_seed=alt_seed, data_seed=data_seed, out=out,
            )
        except ValueError as err:
            # DivergeConfig only validates these flags, but some of its checks still raise a bare
            # ValueError (training/diverge.py); until they raise AttnumInputError, they are input here.
            raise AttnumInputError(str(err)) from None
        summary = run_diverge(cfg, log=(lambda *_: None) if as_json else print)
        if as_json:
            print(json.dumps({"headline": summary["headline"], "wall_s": summary["wall_s"]}, indent=1))
            return
        for line in summary["headline"]["lines"]:
            print(line)
        print(f"wall time {summary['wall_s']:.1f} s; report: {out / 'index.html'}")


def _folders_text(result: dict) -> str:
    lines = [f"{'pair':<40} {'max|dW|':>11} {'W1':>11} {'mean W1':>11} {'tensors':>8}"]
    for r in result["pairs"]:
        lines.append(f"{r['name']:<40} {r['max_abs']:>11.3e} {r['w1']:>11.3e} {r['w1_mean']:>11.3e} "
                     f"{len(r['per_tensor']):>8}")
        lines += [f"  mismatch: {m['name']}: {m['reason']}" for m in r["mismatches"]]
    lines += [f"unpaired file: {u}" for u in result["unpaired_files"]]
    return "\n".join(lines)
