"""`attnum fp8-table`: FlashAttention-3's FP8 RMSE table (arXiv 2407.08608, Table 3) re-run on the emulation."""

from __future__ import annotations

import typer

from attnum.console.progress import Activity
from attnum.errors import bad_value
from attnum.store.jsonout import dumps


def _e(x) -> str:
    return "-" if x is None else f"{x:.2e}"


def _r(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def register(app: typer.Typer) -> None:
    @app.command("fp8-table")
    def fp8_table(
        seq_len: int = typer.Option(2048, help="N = S (the paper goes to 16k; 2048 runs in ~15 s on 2 cores)."),
        heads: int = typer.Option(4, help="Heads H."),
        head_dim: int = typer.Option(128, help="Head dim d (a power of two: the Hadamard rotation)."),
        batch: int = typer.Option(1, help="Batch B."),
        fmt: str = typer.Option("e4m3fn", "--format", help="FP8 format: e4m3fn or e5m2."),
        block: int = typer.Option(128, help="Block quantization size = tile size Br = Bc."),
        seed: int = typer.Option(0, help="Input and rotation seed."),
        fp16: bool = typer.Option(True, help="Include the FP16 rows."),
        mma: str | None = typer.Option(None, "--mma", help="Run every GEMM as this GPU's tensor-core instructions "
                                                           "(sm90: Hopper's wgmma, FP8 with its 13-bit "
                                                           "accumulator); default: exact products, fp32 sums."),
        mla: bool = typer.Option(False, help="Instead: MLA explicit vs absorbed per latent-cache format "
                                             "(DeepSeek-V3 shapes, 16 heads, decode over --mla-kv-len tokens)."),
        mla_kv_len: int = typer.Option(1024, help="Cached tokens for --mla."),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """RMSE vs float64 golden of baseline/FA2/FA3 in FP16 and FP8, beside the paper's numbers."""
        from attnum.studies.serving.fp8_table import PAPER_RATIO, FP8TableConfig, run_fp8_table, table_meta

        if mla_kv_len < 1:  # checked with or without --mla: a flag that is given is a flag that is read
            raise bad_value("--mla-kv-len", mla_kv_len, "a positive integer (cached tokens)")
        if mla:
            from attnum.studies.serving.mla_table import MLATableConfig

            _mla_table(MLATableConfig(kv_len=mla_kv_len, seed=seed), as_json)
            return
        cfg = FP8TableConfig(seq_len=seq_len, heads=heads, head_dim=head_dim, batch=batch, fmt=fmt, block=block,
                             seed=seed, fp16=fp16, mma=mma)
        with Activity("fp8-table"):
            rows = run_fp8_table(cfg)
        if as_json:
            print(dumps({**table_meta(cfg), "rows": rows}, indent=2))
            return
        from attnum.console.tables import print_table, say

        cols = ("setting", "attnum RMSE", "paper RMSE", "attnum / FA3 FP8", "paper / FA3 FP8", "s")
        print_table(cols, [[r["setting"], _e(r["rmse"]), _e(r["paper_rmse"]), _r(r["ratio_to_fa3_fp8"]),
                            _r(r["paper_ratio_to_fa3_fp8"]), f"{r['seconds']:.2f}"] for r in rows],
                    title=f"FA3 Table 3 on attnum: outlier inputs, B={batch} H={heads} N=S={seq_len} d={head_dim}, "
                          f"{cfg.fmt}, RMSE vs float64 golden" + (f", mma={cfg.mma}" if cfg.mma else ""),
                    justify=["left" if c == "setting" else "right" for c in cols])
        by = {r["key"]: r for r in rows}
        say(f"baseline FP8 / FA3 FP8: attnum {by['baseline-fp8']['ratio_to_fa3_fp8']:.2f}x, paper "
            f"{PAPER_RATIO}x. Paper digits: FlashAttention-3 (Shah et al., arXiv 2407.08608), Table 3.")

def _mla_table(cfg, as_json: bool) -> None:
    from attnum.studies.serving.mla_table import run_mla_table

    with Activity("fp8-table --mla"):
        rows = run_mla_table(cfg)
    if as_json:
        print(dumps({"config": cfg.__dict__, "rows": rows}, indent=2))
        return
    from attnum.console.tables import print_table

    cols = ("latent cache", "path", "RMSE", "max abs", "absorbed vs explicit", "overflow", "bytes/token")
    print_table(cols, [[r["cache"], r["path"], _e(r["rmse"]), _e(r["max_abs"]), _e(r["vs_explicit_rmse"]),
                        str(r["overflow"]), f"{r['cache_bytes_per_token']:.0f}"] for r in rows],
                title=f"MLA r={cfg.rank} dn={cfg.nope_dim} dr={cfg.rope_dim} H={cfg.heads} S={cfg.kv_len} "
                      f"N={cfg.q_len}, {cfg.policy}: deviation from float64 golden",
                justify=["left" if c in ("latent cache", "path") else "right" for c in cols])
