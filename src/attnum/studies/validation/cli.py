"""`attnum validate`: the re-implementation against PyTorch's CPU flash kernel."""

from __future__ import annotations

import typer

from attnum.console.conventions import check_number
from attnum.console.progress import Activity
from attnum.errors import bad_value
from attnum.store.jsonout import dumps


def _ints(text: str, name: str) -> tuple[int, ...]:
    try:
        values = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise bad_value(name, text, "comma-separated integers") from None
    check_number(f"--{name.replace('_', '-')}", name, values)
    return values


def register(app: typer.Typer) -> None:
    @app.command()
    def validate(
        formats: str = typer.Option("bf16,fp16,fp32", help="Comma-separated: bf16, fp16, fp32 (or aliases)."),
        seq_lens: str = typer.Option("256,512,1024,2048", help="Comma-separated sequence lengths."),
        heads: int = typer.Option(4),
        head_dim: int = typer.Option(64),
        causal: bool = typer.Option(False),
        seed: int = typer.Option(0),
        eager: bool = typer.Option(False, "--eager", help="Validate the torch-eager:<fmt> policy against "
                                                          "PyTorch eager attention instead."),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """Emulation under torch-cpu:<fmt> vs torch's CPU flash SDPA (or, with --eager, torch-eager:<fmt>
        vs op-by-op eager attention): ULPs apart and % identical."""
        if eager:
            _validate_eager(formats, seq_lens, heads, head_dim, causal, seed, as_json)
            return
        from attnum.studies.validation.validate import ValidateConfig, run_validate

        cfg = ValidateConfig(formats=tuple(f.strip() for f in formats.split(",") if f.strip()),
                             seq_lens=_ints(seq_lens, "seq_lens"), heads=heads, head_dim=head_dim,
                             causal=causal, seed=seed)
        with Activity("validate", spinner=True):
            rows = run_validate(cfg)
        if as_json:
            print(dumps(rows, indent=2))
            return
        from attnum.console.tables import print_table

        print_table(("format", "N", "KV tiles", "max ULP", "mean ULP", "identical", "emu vs golden",
                     "kernel vs golden"),
                    [[r["format"], str(r["seq_len"]), str(r["kv_tiles"]), f"{r['max_ulp']:.2f}",
                      f"{r['mean_ulp']:.4f}", f"{100 * r['identical']:.2f}%",
                      f"{r['emulation_vs_golden']:.3e}", f"{r['kernel_vs_golden']:.3e}"] for r in rows],
                    title="attnum (torch-cpu policy, CPU tiles) vs torch SDPA flash on CPU", justify=["right"] * 8)

def _validate_eager(formats: str, seq_lens: str, heads: int, head_dim: int, causal: bool, seed: int,
                    as_json: bool) -> None:
    from attnum.studies.validation.validate_eager import FORMATS, EagerValidateConfig, run_validate_eager

    wanted = tuple(f.strip() for f in formats.split(",") if f.strip()) or FORMATS
    cfg = EagerValidateConfig(formats=wanted, seq_lens=_ints(seq_lens, "seq_lens"), heads=heads,
                              head_dim=head_dim, causal=causal, seed=seed)
    with Activity("validate --eager", spinner=True):
        rows = run_validate_eager(cfg)
    if as_json:
        print(dumps(rows, indent=2))
        return
    from attnum.console.tables import print_table

    print_table(("format", "N", "max ULP", "mean ULP", "identical", "uniform identical", "fa2 identical",
                 "emu vs golden", "eager vs golden"),
                [[r["format"], str(r["seq_len"]), f"{r['max_ulp']:.2f}", f"{r['mean_ulp']:.4f}",
                  f"{100 * r['identical']:.2f}%", f"{100 * r['identical_uniform']:.2f}%",
                  f"{100 * r['identical_fa2']:.2f}%", f"{r['emulation_vs_golden']:.3e}",
                  f"{r['eager_vs_golden']:.3e}"] for r in rows],
                title="attnum (torch-eager policy) vs PyTorch eager attention on CPU", justify=["right"] * 9)
