"""``attnum spec`` (exact TV of speculative decoding per format and k) and ``attnum spec-audit``
(a speculative sampler's output law tested against the exact one)."""

from __future__ import annotations

from pathlib import Path

import typer

from attnum.console.progress import Activity
from attnum.console.rows import show_table
from attnum.store.jsonout import dumps


def register(app: typer.Typer) -> None:
    @app.command()
    def spec(
        vocab: int = typer.Option(32, help="Vocabulary V (exact enumeration needs V**(k+1) <= 2**27)."),
        k: str = typer.Option("4", help="Draft tokens per step; a comma list gives a grid."),
        format: str = typer.Option("bf16", "--format", help="Format of p, q and the verification arithmetic; a comma list."),
        draft_format: str | None = typer.Option(None, help="Format the draft samples in (default: the verified q)."),
        noise: str = typer.Option("exact", help="Categorical draws: exact, exp-fp32, gumbel-fp32, gumbel-tlrand, "
                                                 "exp-fp64 or race:FLOOR[:CAP]."),
        q_zero: str = typer.Option("reject", help="A drafted token with q^ = 0: reject (vLLM) or accept (p/0 = inf)."),
        zero_residual: str = typer.Option("fail", help="All-zero residual: fail, first (token 0) or target."),
        uniform_bits: int | None = typer.Option(None, help="Acceptance uniform on a 2**-b grid (24: torch.rand fp32)."),
        logit_std: float = typer.Option(2.0, help="Target logits ~ logit_std * N(0, 1)."),
        draft_noise: float = typer.Option(0.5, help="Draft logits = target + draft_noise * N(0, 1)."),
        seed: int = typer.Option(0, help="Logit seed."),
        monte_carlo: int | None = typer.Option(None, help="Samples for the Monte-Carlo path (large vocabularies)."),
        mechanisms: bool = typer.Option(False, "--mechanisms", help="Print the table of named mechanisms instead."),
        out: Path | None = typer.Option(None, help="Write spec.json, the TV figure and report.html here."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    ) -> None:
        """Exact total-variation distance of one speculative step to the target, under a format."""
        from attnum.studies.speculative.spec_decode import SpecConfig, run_spec
        from attnum.studies.speculative.spec_decode import mechanisms as mech_table

        if mechanisms:
            rows = mech_table()
            if as_json:
                print(dumps(rows, indent=2))
            else:
                show_table(rows, ("mechanism", "setting", "measure", "value", "extra", "without"))
            return
        cfg = SpecConfig(vocab=vocab, k=k, format=format, draft_format=draft_format, noise=noise, q_zero=q_zero,
                         zero_residual=zero_residual, uniform_bits=uniform_bits, logit_std=logit_std,
                         draft_noise=draft_noise, seed=seed, monte_carlo=monte_carlo)
        if out is not None:
            from attnum.store.outdir import check_out_folder

            check_out_folder(out)
        with Activity("spec"):
            result = run_spec(cfg)
        written = None
        if out is not None:
            from attnum.studies.speculative.report import write_spec_report

            written = str(write_spec_report(result, out))
            if not as_json:
                print(f"wrote {written}")
        if as_json:  # where it wrote goes into the document: stdout stays one JSON document
            print(dumps({**result, "written": written} if written else result, indent=2, default=str))
            return
        cols = ("format", "k", "vocab", "tv", "tv_plain", "ratio", "tv_first", "fail", "expected_tokens") \
            if monte_carlo is None else ("format", "k", "vocab", "mc_tv_first", "mc_floor", "fail", "expected_tokens")
        show_table(result["rows"], cols)

    @app.command("spec-audit")
    def spec_audit(
        target: str = typer.Argument(..., help="attnum, hf-transformers, package.module:function or file.py:function."),
        cases: str | None = typer.Option(None, help="Comma-separated cases (default: all)."),
        samples: int | None = typer.Option(None, help="Samples per case (default: from the power analysis)."),
        detect_tv: float = typer.Option(0.01, help="TV each case must detect (sets the samples when not given)."),
        alpha: float = typer.Option(1e-3, help="False-alarm rate of the whole audit (Bonferroni over cases)."),
        power: float = typer.Option(0.99, help="Power at detect_tv."),
        batch: int = typer.Option(1 << 16, help="Steps per sampler call."),
        seed: int = typer.Option(0, help="Seed of the drafts and the generator passed to the sampler."),
        timeout: float = typer.Option(300.0, "--timeout", help="Seconds the sampler may stay silent in one call "
                                                               "before its case fails as 'timed out'."),
        no_isolate: bool = typer.Option(False, "--no-isolate", help="Run the sampler in this process (debugging: "
                                                                    "a crash or exit then ends the audit)."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    ) -> None:
        """Run a speculative sampler on crafted (p, q) pairs; chi-square against the exact law. Exit 1 on failure.

        The sampler runs in a child process: a crash, an exit (0 included) or a hang fails its case."""
        from attnum.errors import bad_value
        from attnum.kernels.user import precheck

        if not timeout > 0:
            raise bad_value("--timeout", timeout, "a positive number of seconds")
        if ":" in target:  # a user's sampler: its file exists, its module is installed (before torch)
            precheck(target.strip(), param="target")
        from attnum.spec_audit import SpecAuditConfig, run_spec_audit

        cfg = SpecAuditConfig(target=target, cases=cases, samples=samples, detect_tv=detect_tv, alpha=alpha,
                              power=power, batch=batch, seed=seed)
        if not timeout > 0:
            raise bad_value("--timeout", timeout, "a positive number of seconds")
        from attnum.console.streams import user_output_to_stderr

        with Activity("spec-audit"), user_output_to_stderr():  # stdout is the table's or the JSON's alone
            result = run_spec_audit(cfg, isolate=not no_isolate, timeout=timeout)
        if as_json:
            print(dumps(result, indent=2))
        else:
            show_table(result["cases"], ("case", "k", "V", "samples", "df", "statistic", "p_value", "alpha",
                                           "detectable_tv", "impossible", "prefix_violations", "verdict", "error"))
            print(f"{result['target']}: {result['verdict']} (alpha {cfg.alpha} over {len(result['cases'])} cases, "
                  f"power {cfg.power}; {result['seconds']:.1f} s)")
        if result["verdict"] != "pass":
            raise typer.Exit(1)

