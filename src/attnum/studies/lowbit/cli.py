"""``attnum lowbit-table``: SageAttention's accuracy tables on attnum's emulation (and, with ``--exp2`` /
``--rescale``, FlashAttention-4's polynomial exp2 and lazy rescaling)."""

from __future__ import annotations

import typer

from attnum.console.progress import Activity
from attnum.errors import bad_value
from attnum.store.jsonout import dumps


def _floats(text: str, param: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise bad_value(param, text, "a comma list of numbers") from None


def _ints(text: str, param: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise bad_value(param, text, "a comma list of integers") from None


def register(app: typer.Typer) -> None:
    @app.command("lowbit-table")
    def lowbit_table(
        seq_len: int = typer.Option(1024, help="N = S of the synthetic inputs (lm: the model's 128)."),
        heads: int = typer.Option(2, help="Heads H of the synthetic inputs."),
        head_dim: int = typer.Option(64, help="Head dim d (a multiple of 16)."),
        format: str = typer.Option("fp16", "--format", help="Input/output format: fp16 or bf16."),
        dists: str = typer.Option("normal,kbias,massive,sink,lm", help="Input distributions, a comma list."),
        seed: int = typer.Option(0, help="Input seed (and the LM's training seed)."),
        exp2: bool = typer.Option(False, "--exp2", help="Instead: FA4's polynomial exp2, ulp error over whole "
                                                        "fp32 binades (2**23 inputs each)."),
        degree: int = typer.Option(3, help="--exp2: polynomial degree (FA4's POLY_EX2: 1..5)."),
        rescale: bool = typer.Option(False, "--rescale", help="Instead: FA4's lazy rescaling vs FA2 on the "
                                                              "microbenchmark with late row-max jumps."),
        thresholds: str = typer.Option("1,2,4,8,16", help="--rescale: thresholds in log2 units (each > 0)."),
        jumps: str = typer.Option("0,4,12", help="--rescale: late row-max jumps in log2 units."),
        seq_lens: str = typer.Option("512", help="--rescale: sequence lengths (head dim 128)."),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """CosSim / relative L1 / RMSE of SageAttention's configurations beside the published figures."""
        if exp2:
            from attnum.attention.lowbit.exp2 import POLY_EX2
            from attnum.studies.lowbit.fa4_study import exp2_binade_report

            if degree not in POLY_EX2:
                raise bad_value("--degree", degree, f"one of {sorted(POLY_EX2)}")
            with Activity("lowbit-table --exp2"):
                rows = exp2_binade_report(degree=degree)
            _print(rows, ("binade", "inputs", "degree", "max_ulp", "mean_ulp", "max_rel", "frac_over_half_ulp",
                          "frac_bf16_differs"), as_json, "FA4 exp2 emulation vs exact exp2 (all fp32 inputs of each binade)")
            return
        if rescale:
            from attnum.studies.lowbit.fa4_study import RescaleConfig, run_rescale_study

            cfg = RescaleConfig(seq_lens=_ints(seq_lens, "--seq-lens"), thresholds=_floats(thresholds, "--thresholds"),
                                jumps=_floats(jumps, "--jumps"), seed=seed)
            with Activity("lowbit-table --rescale"):
                rows = run_rescale_study(cfg)
            _print(rows, ("seq_len", "jump", "policy", "threshold", "rmse", "max_abs", "rows_rescale_skipped",
                          "rmse_skipped_rows"), as_json, "FA4 lazy rescaling vs FA2 (bf16, RMSE vs float64 golden)")
            return
        from attnum.studies.lowbit.table import LowbitTableConfig, run_lowbit_table, table_meta

        cfg = LowbitTableConfig(seq_len=seq_len, heads=heads, head_dim=head_dim, format=format, seed=seed,
                                dists=tuple(d.strip() for d in dists.split(",") if d.strip()))
        with Activity("lowbit-table", unit="settings", eta=True) as act:
            result = run_lowbit_table(cfg, progress=lambda done, total, label: act.update(done, total, label))
        if as_json:
            print(dumps({**table_meta(cfg), **result}, indent=2))
            return
        print(render(result))


def _print(rows, cols, as_json: bool, title: str) -> None:
    if as_json:
        print(dumps({"title": title, "rows": rows}, indent=2))
        return
    from attnum.console.rows import text_table

    print(title)
    print(text_table(rows, cols))


def render(result: dict) -> str:
    """The table as plain text: per setting, attnum's CosSim on each input beside the published row,
    then the orderings and the mechanisms."""
    from attnum.studies.lowbit.table import SETTINGS

    dists = list(result["mechanisms"])
    by = {(r["dist"], r["key"]): r for r in result["rows"]}
    out = []
    for key, table, label, _, pub in SETTINGS:
        row = {"table": table, "setting": label,
               "published CosSim/L1/RMSE": f"{pub[0]:.2f}% {pub[1]:.4f} {pub[2]:.3g}" if pub else "-"}
        for d in dists:
            r = by[d, key]
            row[d] = f"{100 * r['cossim']:.3f}% {r['rel_l1']:.4f} {r['rmse']:.2e}"
        out.append(row)
    from attnum.console.rows import text_table

    lines = [text_table(out, ("table", "setting", "published CosSim/L1/RMSE", *dists)), "", "Orderings (1 - CosSim):"]
    for o in result["orderings"]:
        def tag(d, o=o):
            why = o.get("why", {}).get(d, {})
            return d + (" [" + ", ".join(f"{k} {v:.3g}" for k, v in why.items()) + "]" if why else "")
        lines.append(f"  {o['source']}: {o['claim']}: {o['verdict']}")
        lines.append(f"    holds on: {'; '.join(tag(d) for d in o['holds_on']) or 'none'}")
        lines.append(f"    fails on: {'; '.join(tag(d) for d in o['fails_on']) or 'none'}")
    lines.append("Mechanisms per input:")
    for d, m in result["mechanisms"].items():
        lines.append(f"  {d}: K channel bias {m['k_channel_bias']:.3f}, Q channel bias {m['q_channel_bias']:.3f}, "
                     f"P entries below 1/254 {100 * m['p_below_int8_half_step']:.1f}% carrying "
                     f"{100 * m['p_mass_below_int8_half_step']:.2f}% of the row mass, peak/RMS of Q, K "
                     f"{m['qk_peak_to_rms']:.1f}")
    return "\n".join(lines)
