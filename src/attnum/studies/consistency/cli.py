"""``attnum consistency`` and ``attnum consistency-tokens``: flags map 1:1 onto the study's configs."""

from __future__ import annotations

import typer

DEFAULT_RULES = "fa2;flashinfer:2048;sglang-fixed:256;sglang;vllm;vllm-invariant"


def _ints(text: str, name: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        from attnum.errors import bad_value

        raise bad_value(name, text, "comma-separated positive integers") from None


def _rules(text: str) -> tuple[str, ...]:
    """--rules "fa2;vllm": an empty rule ("fa2;;vllm", a trailing ';') is refused, never dropped."""
    parts = [r.strip() for r in text.split(";")]
    if not parts or any(not r for r in parts):
        from attnum.errors import bad_value

        raise bad_value("--rules", text, "split rules separated by ';', none of them empty")
    return tuple(parts)


def _out(out: str | None) -> None:
    """--out is a folder: checked (and created) before the study starts, so a file, /dev/null or
    /proc/version is one line, not an error after minutes of work."""
    if out:
        from attnum.store.outdir import make_out_folder

        make_out_folder(out)


def _save(out: str | None, name: str, data, as_json: bool = False) -> str | None:
    """Write ``data`` to OUT/NAME; say where (with --json the caller puts the path into its document, so
    stdout stays one JSON document). Returns the path written, or None."""
    if out:
        from pathlib import Path

        from attnum.store.jsonout import dumps
        from attnum.store.outfile import write_atomic

        path = Path(out)
        path.mkdir(parents=True, exist_ok=True)
        write_atomic(path / name, dumps(data, indent=2))
        if not as_json:
            print(f"wrote {path / name}")
        return str(path / name)
    return None


def register(app: typer.Typer) -> None:
    @app.command()
    def consistency(
        policy: str = typer.Option("fa2:bf16", help="Policy of every way the request is computed."),
        length: int = typer.Option(1536, help="T: the request's tokens."),
        first_position: int = typer.Option(320, help="First decode position studied."),
        positions: int = typer.Option(10, help="Decode positions studied (evenly spaced to the last)."),
        heads: int = typer.Option(8, help="H: query heads."),
        kv_heads: int = typer.Option(2, help="G: kv heads."),
        head_dim: int = typer.Option(64, help="d: head dim."),
        rules: str = typer.Option(DEFAULT_RULES, help="Split rules, ';'-separated (attnum.attention.serving.split_rules)."),
        batch_sizes: str = typer.Option("1,4,16,64,160", help="Batch sizes the request is served in."),
        mixes: int = typer.Option(4, help="Batch compositions drawn per batch size."),
        co_len_min: int = typer.Option(16, help="Other requests' lengths: log-uniform from this ..."),
        co_len_max: int = typer.Option(4096, help="... to this."),
        chunk_sizes: str = typer.Option("64,256", help="Chunked-prefill chunk sizes."),
        page_sizes: str = typer.Option("16,64", help="Paged-KV page sizes."),
        seed: int = typer.Option(0, help="Input and batch-mix seed."),
        device: str = typer.Option("cpu", help="cpu, or cuda (the same emulation on the GPU's arithmetic)."),
        out: str = typer.Option(None, "--out", help="Folder to write consistency.json into."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    ) -> None:
        """One request under every way a server computes it: bit-identical share, max ulp, the knob that breaks it."""
        from attnum.console.progress import Activity
        from attnum.studies.consistency import report
        from attnum.studies.consistency.config import ConsistencyConfig
        from attnum.studies.consistency.cost_table import cost_table
        from attnum.studies.consistency.run import run_consistency

        cfg = ConsistencyConfig(
            policy=policy, length=length, first_position=first_position, positions=positions, heads=heads,
            kv_heads=kv_heads, head_dim=head_dim, rules=_rules(rules),
            batch_sizes=_ints(batch_sizes, "batch_sizes"), mixes=mixes, co_len_min=co_len_min, co_len_max=co_len_max,
            chunk_sizes=_ints(chunk_sizes, "chunk_sizes"), page_sizes=_ints(page_sizes, "page_sizes"), seed=seed,
            device=device)
        _out(out)
        cfg.require_memory()  # too large for this machine: one line before the progress starts
        with Activity("consistency"):
            result = run_consistency(cfg)
        cost = cost_table()
        written = _save(out, "consistency.json", {"study": result, "cost": cost}, as_json)
        if as_json:
            from attnum.store.jsonout import dumps

            print(dumps({"study": result, "cost": cost, "written": written}, indent=2))
            return
        print(report.invariance_legend(result))
        print(report.text_table(report.invariance_header(result), report.invariance_rows(result)))
        print()
        print(report.text_table(report.MODE_HEADER, report.mode_rows(result)))
        print()
        print("Cost of invariance (decode bound, H=32 G=8 d=128 bf16; occupancy model in attnum.attention.cost.model):")
        print(report.text_table(report.COST_HEADER, report.cost_rows(cost)))

    @app.command("consistency-tokens")
    def consistency_tokens(
        formats: str = typer.Option("bf16,e4m3fn", help="Formats of the attention policy, comma-separated."),
        policy: str = typer.Option("fa2", help="Attention policy NAME (takes each format)."),
        train_policy: str = typer.Option(None, help="Training-side pass policy (default: the inference one)."),
        variant_rule: str = typer.Option("vllm", help="Split rule of the batch-variant schedule."),
        invariant_rule: str = typer.Option("vllm-invariant", help="Split rule of the batch-invariant schedule."),
        prompts: int = typer.Option(12, help="Prompts."),
        runs: int = typer.Option(4, help="Greedy runs per prompt and schedule."),
        prompt_len: int = typer.Option(24, help="Prompt bytes."),
        gen_len: int = typer.Option(40, help="Generated bytes."),
        max_batch: int = typer.Option(128, help="Batch size per step drawn from 1..this."),
        train_steps: int = typer.Option(200, help="Training steps of the bundled LM (cached under --out)."),
        d_model: int = typer.Option(64, help="Model width of the bundled LM."),
        n_heads: int = typer.Option(2, help="Attention heads of the bundled LM."),
        n_layers: int = typer.Option(2, help="Blocks of the bundled LM."),
        seq_len: int = typer.Option(128, help="Context of the bundled LM (prompt + generation fit in it)."),
        seed: int = typer.Option(0, help="Seed of the model, prompts and schedules."),
        out: str = typer.Option("attnum-out/consistency", "--out", help="Folder for tokens.json and the model cache."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    ) -> None:
        """Greedy completions of the bundled LM under a batch-variant and a batch-invariant schedule."""
        from pathlib import Path

        from attnum.console.progress import Activity
        from attnum.studies.consistency import report
        from attnum.studies.consistency.tokens import TokensConfig, run_tokens

        cfg = TokensConfig(
            formats=tuple(f.strip() for f in formats.split(",") if f.strip()), policy=policy,
            train_policy=train_policy, variant_rule=variant_rule, invariant_rule=invariant_rule, prompts=prompts,
            runs=runs, prompt_len=prompt_len, gen_len=gen_len, max_batch=max_batch, train_steps=train_steps,
            d_model=d_model, n_heads=n_heads, n_layers=n_layers, seq_len=seq_len, seed=seed)
        _out(out)
        with Activity("consistency-tokens"):
            result = run_tokens(cfg, Path(out) if out else None)
        written = _save(out, "tokens.json", result, as_json)
        if as_json:
            from attnum.store.jsonout import dumps

            print(dumps({**result, "written": written}, indent=2))
            return
        m = result["model"]
        print(f"bundled LM {m['key']}: loss {m['final_loss']:.3f} ({'cached' if m['cached'] else 'trained now'}); "
              f"{cfg.prompts} prompts x {cfg.runs} runs x {cfg.gen_len} bytes")
        print(report.text_table(report.TOKEN_HEADER, report.token_rows(result)))
