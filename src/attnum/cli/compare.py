"""`attnum compare`: one configuration -> flash/baseline/golden deviation table."""

from __future__ import annotations

import json

import typer

from attnum.experiments.compare import CompareConfig, run_compare

PAIRS = ("flash_vs_golden", "baseline_vs_golden", "flash_vs_baseline")
COLUMNS = ("max_abs", "mean_abs", "rmse", "max_ulp", "mean_signed", "bias", "rel_mean_abs", "row_rel_max_abs",
           "cosine")


def register(app: typer.Typer) -> None:
    @app.command()
    def compare(
        policy: str = typer.Option("uniform", help="NAME or NAME:FORMAT (uniform, fa2, torch-cpu), or a format."),
        format: str = typer.Option("bf16", "--format", help="Format for a policy NAME given without one."),
        seq_len: int = typer.Option(1024, help="Query length N."),
        kv_len: int | None = typer.Option(None, help="Key length S (default N)."),
        head_dim: int = typer.Option(64, help="Head dimension d."),
        heads: int = typer.Option(8, help="Query heads H."),
        kv_heads: int | None = typer.Option(None, help="Key/value heads G (GQA when < H)."),
        batch: int = typer.Option(1, help="Batch B."),
        block_q: int | None = typer.Option(None, help="Query tile Br (default 128)."),
        block_k: int | None = typer.Option(None, help="Key/value tile Bc (default 128)."),
        sram: int | None = typer.Option(None, help="SRAM size M in elements: Bc=ceil(M/4d), Br=min(Bc,d)."),
        swap_blocks: bool = typer.Option(False, help="Exchange Br and Bc."),
        square: bool = typer.Option(False, help="Force Br = Bc."),
        variant: str = typer.Option("fa2", help="fa1 (normalize every tile) or fa2 (normalize once)."),
        kv_order: str = typer.Option("forward", help="forward, reverse or random[:SEED] tile order."),
        causal: bool = typer.Option(False, help="Causal mask."),
        causal_alignment: str = typer.Option(
            "top_left", help="Causal diagonal: top_left (query i sees keys j <= i, as torch) or bottom_right "
                             "(j <= i + S - N, as flash-attn >= 2.1)."),
        dist: str = typer.Option("normal", help="normal, uniform or outlier."),
        logit_scale: float = typer.Option(1.0, help="Multiply Q by this (logit magnitude)."),
        seed: int = typer.Option(0, help="Input seed."),
        device: str = typer.Option("cpu", help="cpu or cuda."),
        grad: bool = typer.Option(False, "--grad", help="Compare gradients dQ, dK, dV instead of outputs."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    ) -> None:
        """Compare flash and baseline attention under a precision policy with the float64 golden value."""
        cfg = CompareConfig(
            policy=policy, format=format, seq_len=seq_len, kv_len=kv_len, head_dim=head_dim, heads=heads,
            kv_heads=kv_heads, batch=batch, block_q=block_q, block_k=block_k, sram=sram,
            swap_blocks=swap_blocks, square=square, variant=variant, kv_order=kv_order, causal=causal,
            causal_alignment=causal_alignment, dist=dist, logit_scale=logit_scale, seed=seed, device=device,
        )
        if grad:
            from attnum.experiments.grad_compare import run_grad_compare

            result = run_grad_compare(cfg)
            if as_json:
                print(json.dumps(result, indent=2))
            else:
                print_grad_result(result)
            return
        result = run_compare(cfg)
        if as_json:
            print(json.dumps(result, indent=2))
            return
        print_result(result)


def print_result(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    pol, tiles = result["policy"], result["tiles"]
    title = (f"{pol['name']}  N={result['config']['seq_len']} d={result['config']['head_dim']}  "
             f"Br={tiles['Br']} Bc={tiles['Bc']} Tc={tiles['Tc']}  variant={result['config']['variant']}  "
             f"carrier={pol['carrier']}")
    table = Table(title=title)
    table.add_column("pair")
    for col in COLUMNS:
        table.add_column(col, justify="right")
    for pair in PAIRS:
        m = result["metrics"][pair]
        table.add_row(pair, *(_cell(c, m[c]) for c in COLUMNS))
    console = Console(width=max(Console().width, 150))
    console.print(table)
    r = result["ratio"]
    console.print(f"flash/baseline error vs golden: max_abs {r['max_abs']:.3g}x, mean_abs {r['mean_abs']:.3g}x, "
                  f"rmse {r['rmse']:.3g}x")


def _cell(column: str, value: float) -> str:
    if column == "cosine":
        return f"{value:.9f}"
    return f"{value:+.3f}" if column == "bias" else f"{value:.3e}"


def print_grad_result(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    from attnum.experiments.grad_compare import grad_rows

    pol, tiles = result["policy"], result["tiles"]
    table = Table(title=f"gradients under {pol['name']}  N={result['config']['seq_len']}  Bc={tiles['Bc']}")
    for col in ("pair", "grad", "max_abs", "mean_abs", "rmse", "max_ulp"):
        table.add_column(col, justify="right" if col not in ("pair", "grad") else "left")
    for pair, gr, *vals in grad_rows(result):
        table.add_row(pair, gr, *(f"{x:.3e}" for x in vals))
    console = Console(width=max(Console().width, 150))
    console.print(table)
    for gr, r in result["ratio"].items():
        console.print(f"{gr}: flash/baseline error vs golden max_abs {r['max_abs']:.3g}x, rmse {r['rmse']:.3g}x")
