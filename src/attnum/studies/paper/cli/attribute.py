"""`attnum attribute`: the error budget of one configuration per rounding site (table, bar chart, JSON)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from attnum.console.progress import Activity
from attnum.store.jsonout import dumps
from attnum.studies.paper.cli.compare import config_command

if TYPE_CHECKING:
    from attnum.studies.paper.compare import CompareConfig

# attnum.studies.paper.attribute.METRICS, spelled here so that --help does not import torch (a test pins it)
METRICS = ("mean_abs", "max_abs", "rmse", "rel_mean_abs")


def register(app: typer.Typer) -> None:
    def attribute(
        cfg: CompareConfig,
        metric: str = typer.Option("mean_abs", help=f"Metric that ranks the sites: one of {METRICS}."),
        plot: Path | None = typer.Option(None, help="Write the bar chart as PLOT.png and PLOT.svg."),  # noqa: B008
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    ) -> None:
        """Which rounding site makes flash (and the baseline) deviate: each site alone, and each site exact."""
        import torch

        from attnum.studies.paper.attribute import AttributeConfig, run_attribute

        # One thread, as sweeps run points: the emulation is many small ops, where torch's intra-op
        # threads cost more than they give (and collapse on shared cores).
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            with Activity("attribute"):
                result = run_attribute(AttributeConfig(compare=cfg, metric=metric))
        finally:
            torch.set_num_threads(threads)
        if plot is not None:
            from attnum.studies.paper.report.budget_figure import budget_figure

            paths = budget_figure(result, plot.parent if str(plot.parent) else Path("."), plot.stem,
                                  title=_title(result))
            result["plot"] = [str(p) for p in paths]
        if as_json:
            print(dumps(result, indent=2))
            return
        print_budget(result)

    app.command(name="attribute")(config_command(attribute))


def _title(result: dict) -> str:
    c, t = result["config"], result["tiles"]
    base = "" if result["baseline_policy"] == result["policy"] else f", baseline {result['baseline_policy']}"
    return (f"Error budget: {result['policy']}{base}, variant {c['variant']}, N={c['seq_len']}, Bc={t['Bc']} "
            f"({result['metric']} vs golden)")


def print_budget(result: dict) -> None:
    from attnum.console.tables import print_table, say
    from attnum.studies.paper.attribute import budget_rows, dominant_sentence, ratio_text

    cols = ("site", "format", "only this rounds: flash", "baseline", "flash/baseline",
            "only this exact: flash", "baseline")
    rows = []
    for row in budget_rows(result, result["metric"]):
        rest = ("", "") if row["site"] in ("full", "floor") else (f"{row['without_flash']:.3e}",
                                                                  f"{row['without_baseline']:.3e}")
        fmt = row["format"] + ("" if row["rounds"] else " (= carrier)")
        rows.append([row["site"], fmt, f"{row['only_flash']:.3e}", f"{row['only_baseline']:.3e}",
                     ratio_text(row), *rest])
    print_table(cols, rows, title=_title(result) + f"; exact = {result['carrier']} (the carrier)",
                justify=["left" if c in ("site", "format") else "right" for c in cols])
    say(dominant_sentence(result))
    for site, why in result["not_attributed"].items():
        say(f"not attributed: {site}: {why}")
    if result.get("plot"):
        say(f"bar chart: {', '.join(result['plot'])}")
