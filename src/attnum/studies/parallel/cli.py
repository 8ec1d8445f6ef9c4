"""``attnum ring``: context-parallel ring attention against the fp64 golden, simulated or on gloo."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from attnum.console.progress import Activity
from attnum.store.jsonout import dumps


def register(app: typer.Typer) -> None:
    @app.command()
    def ring(
        shards: str = typer.Option("2,4,8", help="Shards P; a comma list."),
        layout: str = typer.Option("contiguous,zigzag", help="contiguous and/or zigzag (load-balanced causal)."),
        merge_policy: list[str] = typer.Option(["fp32"], help="Merge policy of the (O, LSE) states (repeatable): "
                                               "fp32, 'fp32,out=bf16' (running output in bf16 each step), bf16."),
        policy: str = typer.Option("fa2:bf16", help="Attention policy of every block (its out format is the "
                                                    "format a block's O arrives in)."),
        merge_method: str = typer.Option("lse", help="ratio, lse (flash-attn's combine) or online."),
        seq_len: int = typer.Option(4096, help="Sequence length N (queries = keys)."),
        heads: int = typer.Option(4, help="Query heads H."),
        kv_heads: int | None = typer.Option(None, help="Key/value heads G (GQA when < H)."),
        head_dim: int = typer.Option(64, help="Head dimension d."),
        batch: int = typer.Option(1, help="Batch B."),
        causal: bool = typer.Option(True, "--causal/--no-causal", help="Causal mask (global positions)."),
        block_k: int | None = typer.Option(None, help="Key tile Bc of every block (default 128)."),
        seed: int = typer.Option(0, help="Input seed."),
        backend: str = typer.Option("sim", help="sim (one process), gloo (one CPU process per shard), nccl, "
                                                "ring-flash-attn, torch-context-parallel."),
        timeout: float = typer.Option(300.0, help="Seconds for every collective and for the whole run."),
        allreduce: bool = typer.Option(False, "--allreduce", help="Also run the TP/DP reduction-order study."),
        out: Path | None = typer.Option(None, help="Write ring.json, figures and report.html here."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    ) -> None:
        """Ring attention's deviation from golden against shards, layout and merge policy."""
        from attnum.console.rows import show_table
        from attnum.kernels.context_parallel import available_cp_kernels
        from attnum.studies.parallel.ring_study import RingConfig, run_ring
        from attnum.studies.parallel.spawn import RankFailed

        cfg = RingConfig(shards=shards, layout=layout, merge_policy=tuple(merge_policy), policy=policy,
                         merge_method=merge_method, seq_len=seq_len, heads=heads, kv_heads=kv_heads,
                         head_dim=head_dim, batch=batch, causal=causal, block_k=block_k, seed=seed, backend=backend,
                         timeout=timeout)
        if out is not None:
            from attnum.store.outdir import check_out_folder

            check_out_folder(out)  # before the ranks run, not after
        try:
            with Activity("ring"):
                result = run_ring(cfg)
        except RankFailed as err:
            print(f"attnum: ring: {err}", file=sys.stderr)
            raise typer.Exit(1) from None
        study = None
        if allreduce:
            from attnum.studies.parallel.allreduce_study import AllreduceConfig, run_allreduce_study

            with Activity("ring --allreduce"):
                study = run_allreduce_study(AllreduceConfig())
        written = None
        if out is not None:
            from attnum.studies.parallel.report import write_ring_report

            written = str(write_ring_report(result, out, study))
            if not as_json:
                print(f"wrote {written}")
        if as_json:  # where it wrote goes into the document: stdout stays one JSON document
            print(dumps({"ring": result, "allreduce": study, "written": written}, indent=2, default=str))
        else:
            show_table(result["rows"], ("shards", "layout", "merge_policy", "backend", "max_abs", "mean_abs",
                                          "single_mean_abs", "ratio_to_single", "nan", "bit_equal_sim",
                                          "sim_seconds", "seconds"))
            if study is not None:
                show_table(study["rows"], ("study", "tp", "dp", "algorithm", "reduce_format", "rel_max_abs",
                                             "rel_rmse", "changed"))
            for name, (ok, why) in available_cp_kernels().items():
                print(f"{name}: {'available' if ok else 'unavailable: ' + why}")
        if any(r["nan"] for r in result["rows"]) or not all(r.get("bit_equal_sim", True) for r in result["rows"]):
            raise typer.Exit(1)
