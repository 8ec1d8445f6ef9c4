"""`attnum decode`: one KV-cache decode configuration -> deviation from float64 golden, and its cost."""

from __future__ import annotations

import typer

from attnum.console.progress import Activity
from attnum.store.jsonout import dumps

COLUMNS = ("max_abs", "mean_abs", "rmse", "max_ulp", "cosine")


def _opt_int(text: str | None, name: str) -> int | None:
    """``none`` (or nothing) -> None; an integer otherwise (DecodeConfig validates the value)."""
    if text is None or text.strip().lower() in ("", "none"):
        return None
    try:
        return int(text)
    except ValueError:
        from attnum.errors import bad_value

        raise bad_value(name, text, "an integer or none") from None


def register(app: typer.Typer) -> None:
    @app.command()
    def decode(
        policy: str = typer.Option("fa2", help="NAME or NAME:FORMAT (uniform, fa2, torch-cpu), or a format."),
        format: str = typer.Option("bf16", "--format", help="Format for a policy NAME given without one."),
        splits: int = typer.Option(1, help="num_splits: split-KV chunks, each an (O, LSE) partial, merged in fp32."),
        page_size: str = typer.Option(None, "--page-size", help="Paged KV: tokens per page (the kernel tiles by "
                                      "page); default none = contiguous cache."),
        kv_heads: str = typer.Option(None, "--kv-heads", help="KV heads G (GQA when < H, MQA = 1); default H."),
        lse_base: str = typer.Option("e", help="LSE base of the partials and the merge: e (flash-attn, vLLM) or 2 "
                                     "(FlashInfer)."),
        cache_len: int = typer.Option(4096, help="S: keys in each sequence's KV cache."),
        queries: int = typer.Option(1, help="N: new queries per sequence (1 = decode; > 1 speculative verify)."),
        batch: int = typer.Option(1, help="B: sequences."),
        heads: int = typer.Option(8, help="H: query heads."),
        head_dim: int = typer.Option(128, help="d: head dimension (MLA: the per-head no-RoPE and value dim)."),
        causal_alignment: str = typer.Option("bottom_right", help="bottom_right (query i sees keys j <= i + S - N, "
                                             "as flash-attn/vLLM) or top_left (torch's is_causal)."),
        seed: int = typer.Option(0, help="Input seed."),
        kv_cache_dtype: str = typer.Option("auto", help="KV-cache storage, vLLM's names: auto, bf16, fp16, fp8 "
                                           "(= fp8_e4m3), fp8_e5m2, int8."),
        kv_scale: str = typer.Option("1.0", help="KV-cache scale: a number (vLLM's default 1.0) or calibrated."),
        mla_rank: str = typer.Option(None, "--mla-rank", help="MLA latent rank r (DeepSeek: 512); default none."),
        absorbed: bool = typer.Option(False, "--absorbed", help="MLA: the absorbed path (W_UK folded into q)."),
        split_rule: str = typer.Option(None, "--split-rule", help="A kernel's split rule instead of --splits: fa2, "
                                       "flashinfer:2048, sglang-fixed:256, sglang, vllm, vllm-invariant, count:N."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    ) -> None:
        """Decode attention with a KV cache (split-KV, paged, GQA, quantized KV, MLA) against the float64 golden."""
        from attnum.studies.serving.decode import DecodeConfig, run_decode

        cfg = DecodeConfig(
            policy=policy, format=format, splits=splits, page_size=_opt_int(page_size, "page_size"),
            kv_heads=_opt_int(kv_heads, "kv_heads"), lse_base=lse_base, cache_len=cache_len, queries=queries,
            batch=batch, heads=heads, head_dim=head_dim, causal_alignment=causal_alignment, seed=seed,
            kv_cache_dtype=kv_cache_dtype, kv_scale=kv_scale, mla_rank=_opt_int(mla_rank, "mla_rank"),
            absorbed=absorbed, split_rule=split_rule,
        )
        from attnum.sweep.memory_budget import require_decode

        require_decode(cfg)  # too large for this machine: one line before the progress starts
        with Activity("decode"):
            result = run_decode(cfg)
        if as_json:
            print(dumps(result, indent=2))
            return
        print_result(result)


def print_result(result: dict) -> None:
    from attnum.console.tables import print_table, say

    c, t = result["config"], result["tiles"]
    shape = (f"B={c['batch']} H={c['heads']} G={c['kv_heads'] or c['heads']} N={c['queries']} S={c['cache_len']} "
             f"d={c['head_dim']}")
    kernel = f"splits={t['splits']} Bc={t['Bc']}" + (f" paged P={c['page_size']}" if t["paged"] else "")
    if c["mla_rank"]:
        kernel = f"MLA r={c['mla_rank']} {'absorbed' if c['absorbed'] else 'explicit'}"
    rows = [[pair, *(f"{m[k]:.9f}" if k == "cosine" else f"{m[k]:.3e}" for k in COLUMNS)]
            for pair, m in result["metrics"].items()]
    print_table(("pair", *COLUMNS), rows, justify=("left", *("right" for _ in COLUMNS)),
                title=f"{result['policy']['name']}  {shape}  {kernel}  kv={c['kv_cache_dtype']}  lse base {c['lse_base']}")
    kv = result["kv"]
    if kv["quantized"]:
        say(f"KV cache {kv['dtype']} (scale {c['kv_scale']}): {kv['overflow']} value(s) overflowed the format")
    cost = result["cost"]
    if cost:
        times = ", ".join(f"{d} {s * 1e6:.1f} us" for d, s in cost["bound_time_s"].items() if s is not None)
        say(f"cost: {cost['flops']:.3g} FLOPs, {cost['bytes']:.3g} bytes, intensity "
            f"{cost['intensity']:.2f} FLOP/B; roofline bound {times}")
