"""`attnum compare`: one configuration -> flash/baseline/golden deviation table.

The flags are :class:`CompareConfig`'s fields, one each (a test pins the map); ``attnum attribute``
takes the same flags through :func:`config_command`.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING

import typer

from attnum.console.progress import Activity
from attnum.store.jsonout import dumps

if TYPE_CHECKING:  # the command imports the study when it runs, so --help never loads torch
    from attnum.studies.paper.compare import CompareConfig

PAIRS = ("flash_vs_golden", "baseline_vs_golden", "flash_vs_baseline")
COLUMNS = ("max_abs", "mean_abs", "rmse", "max_ulp", "mean_signed", "bias", "rel_mean_abs", "row_rel_max_abs",
           "cosine")

# (field, type, default, help): the CompareConfig flags, in the order --help shows them.
CONFIG_OPTIONS: tuple[tuple[str, type, object, str], ...] = (
    ("policy", str, "uniform", "NAME or NAME:FORMAT (uniform, fa2, torch-cpu, torch-eager), or a format."),
    ("format", str, "bf16", "Format for a policy NAME given without one."),
    ("baseline_policy", str | None, None,
     "The baseline's own policy (default: --policy), e.g. torch-eager: PyTorch eager attention in the format."),
    ("mma", str | None, None,
     "Run both matmuls of flash and baseline as this GPU's tensor-core instructions (sm80, sm89, sm90, sm100, "
     "...; the policy knob mma=ARCH); default: the policy's own (exact chunks)."),
    ("seq_len", int, 1024, "Query length N."),
    ("kv_len", int | None, None, "Key length S (default N)."),
    ("head_dim", int, 64, "Head dimension d."),
    ("heads", int, 8, "Query heads H."),
    ("kv_heads", int | None, None, "Key/value heads G (GQA when < H)."),
    ("batch", int, 1, "Batch B."),
    ("block_q", int | None, None, "Query tile Br (default 128)."),
    ("block_k", int | None, None, "Key/value tile Bc (default 128)."),
    ("sram", int | None, None, "SRAM size M in elements: Bc=ceil(M/4d), Br=min(Bc,d)."),
    ("swap_blocks", bool, False, "Exchange Br and Bc."),
    ("square", bool, False, "Force Br = Bc."),
    ("variant", str, "fa2", "fa1 (normalize every tile) or fa2 (normalize once)."),
    ("kv_order", str, "forward", "forward, reverse or random[:SEED] tile order."),
    ("causal", bool, False, "Causal mask."),
    ("causal_alignment", str, "top_left",
     "Causal diagonal: top_left (query i sees keys j <= i, as torch) or bottom_right (j <= i + S - N, as "
     "flash-attn >= 2.1)."),
    ("dist", str, "normal", "normal, uniform or outlier."),
    ("logit_scale", float, 1.0, "Multiply Q by this (logit magnitude)."),
    ("seed", int, 0, "Input seed."),
    ("device", str, "cpu", "cpu or cuda."),
)


def config_command(fn: Callable) -> Callable:
    """Give ``fn(cfg: CompareConfig, **extra)`` the CompareConfig flags before its own options.

    Typer reads the signature: the wrapper's is the config fields (each ``--field-name``) followed
    by ``fn``'s own keyword parameters other than ``cfg``.
    """
    names = [name for name, *_ in CONFIG_OPTIONS]

    def command(**kwargs):
        from attnum.studies.paper.compare import CompareConfig

        cfg = CompareConfig(**{k: kwargs.pop(k) for k in names})
        return fn(cfg, **kwargs)

    params = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=kind,
                                default=typer.Option(default, help=help_))
              for name, kind, default, help_ in CONFIG_OPTIONS]
    hints = typing.get_type_hints(fn, localns={"CompareConfig": object})
    own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=hints.get(name, p.annotation))
           for name, p in inspect.signature(fn).parameters.items() if name != "cfg"]
    command.__signature__ = inspect.Signature(params + own)
    command.__name__, command.__doc__ = fn.__name__, fn.__doc__
    return command


def run_compare(cfg: CompareConfig) -> dict:
    """:func:`attnum.studies.paper.compare.run_compare`, imported when a command runs."""
    from attnum.studies.paper.compare import run_compare as run

    return run(cfg)


def register(app: typer.Typer) -> None:
    def compare(
        cfg: CompareConfig,
        grad: bool = typer.Option(False, "--grad", help="Compare gradients dQ, dK, dV instead of outputs."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    ) -> None:
        """Compare flash and baseline attention under a precision policy with the float64 golden value."""
        from attnum.studies.paper.compare import check_point

        check_point(cfg)  # before the progress starts: too large for this machine, or inputs that overflow
        if grad:
            from attnum.studies.paper.grad_compare import run_grad_compare

            with Activity("compare --grad", spinner=True):
                result = run_grad_compare(cfg)
            if as_json:
                print(dumps(result, indent=2))
            else:
                print_grad_result(result)
            return
        with Activity("compare"):
            result = run_compare(cfg)
        if as_json:
            print(dumps(result, indent=2))
            return
        print_result(result)

    app.command(name="compare")(config_command(compare))


def print_result(result: dict) -> None:
    from attnum.console.tables import print_table, say

    pol, tiles = result["policy"], result["tiles"]
    base = result.get("baseline_policy", pol)
    title = (f"{pol['name']}" + (f" (baseline {base['name']})" if base["name"] != pol["name"] else "")
             + f"  N={result['config']['seq_len']} d={result['config']['head_dim']}  "
             f"Br={tiles['Br']} Bc={tiles['Bc']} Tc={tiles['Tc']}  variant={result['config']['variant']}  "
             f"carrier={pol['carrier']}")
    rows = [[pair, *(_cell(c, result["metrics"][pair][c]) for c in COLUMNS)] for pair in PAIRS]
    print_table(("pair", *COLUMNS), rows, title=title, justify=("left", *("right" for _ in COLUMNS)))
    r = result["ratio"]
    say(f"flash/baseline error vs golden: max_abs {r['max_abs']:.3g}x, mean_abs {r['mean_abs']:.3g}x, "
                  f"rmse {r['rmse']:.3g}x")


def _cell(column: str, value: float) -> str:
    if column == "cosine":
        return f"{value:.9f}"
    return f"{value:+.3f}" if column == "bias" else f"{value:.3e}"


def print_grad_result(result: dict) -> None:
    from attnum.console.tables import print_table, say
    from attnum.studies.paper.grad_compare import grad_rows

    pol, tiles = result["policy"], result["tiles"]
    cols = ("pair", "grad", "max_abs", "mean_abs", "rmse", "max_ulp")
    print_table(cols, [[pair, gr, *(f"{x:.3e}" for x in vals)] for pair, gr, *vals in grad_rows(result)],
                title=f"gradients under {pol['name']}  N={result['config']['seq_len']}  Bc={tiles['Bc']}",
                justify=["left" if c in ("pair", "grad") else "right" for c in cols])
    for gr, r in result["ratio"].items():
        say(f"{gr}: flash/baseline error vs golden max_abs {r['max_abs']:.3g}x, rmse {r['rmse']:.3g}x")
