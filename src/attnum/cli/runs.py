"""`attnum runs DIR`: the runs recorded in DIR's store and how complete the sweep is."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import typer

PANEL = "Store and reports"


def register(app: typer.Typer) -> None:
    @app.command()
    def runs(out: Path = typer.Argument(..., help="A folder holding attnum.sqlite.")) -> None:
        """List runs (start, end, status, points written) and the sweep's completeness."""
        from attnum.console.tables import print_table, say
        from attnum.store.db import open_store

        with open_store(out) as store:
            meta, counts, rows = store.meta(), store.counts(), store.runs()
        cols = ("run", "started (UTC)", "finished", "status", "to run", "done", "failed", "executor", "command")
        print_table(cols, [[str(r["run_id"]), _ts(r["started_at"]), _ts(r["finished_at"]), r["status"],
                            str(r["n_todo"]), str(r["done"]), str(r["failed"]), f"{r['executor']} x{r['jobs']}",
                            r["command"] or ""] for r in rows],
                    title=f"{meta.get('spec_name')} (spec {meta.get('spec_hash')}) in {out}",
                    justify=["right" if c in ("run", "to run", "done", "failed") else "left" for c in cols])
        pct = 100.0 * counts["done"] / counts["planned"] if counts["planned"] else 0.0
        say(f"complete: {counts['done']}/{counts['planned']} points done ({pct:.1f}%), "
            f"{counts['failed']} failed, {counts['missing']} missing")

def _ts(t: float | None) -> str:
    if not t:
        return "-"
    try:
        return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError, TypeError):
        return f"? ({t!r})"  # a time out of range: shown, not a crash
