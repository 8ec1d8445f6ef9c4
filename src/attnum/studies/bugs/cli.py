"""``attnum bugs list`` and ``attnum bugs run [ID...]``: the corpus of upstream bugs, and attnum's recall on it.

``run`` fetches both versions of each case, audits each with the case's probes (isolated, as ``attnum audit``
does; every probe with ``--all-probes``) into a results store, and prints one table: case, package,
versions, broken caught? (which probe, its line), fixed silent? (or which probe fails), seconds. Exit 0 every
case caught and every fixed release silent, 1 otherwise, 2 bad input (an unknown case id), 3 a case that
cannot run here (a download that fails, a wheel or kernel file whose sha256 is not the pinned one, a signature
the target cannot call), refused before anything is written.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from attnum.store.jsonout import dumps

EXIT_UNAVAILABLE = 3


def register(app: typer.Typer) -> None:
    bugs = typer.Typer(help="The corpus of upstream attention-kernel bugs, and attnum's recall on it.",
                       no_args_is_help=True)

    @bugs.command("list")
    def list_cases(as_json: bool = typer.Option(False, "--json", help="Print the table as JSON.")) -> None:
        """Every case: package, versions (broken -> fixed or open), target, dtype, probes, symptom."""
        from dataclasses import asdict

        from attnum.audit.bugs.corpus import corpus

        cases = corpus()
        if as_json:
            print(dumps([asdict(c) for c in cases], indent=2))
            return
        from attnum.console.tables import print_table

        print_table(("case", "package", "versions", "target", "dtype", "probes", "symptom"),
                    [[c.id, c.package, c.label(), c.target, c.dtype, ", ".join(c.probes), c.symptom] for c in cases],
                    title=f"{len(cases)} upstream bugs, {len({c.package for c in cases})} packages")

    @bugs.command("run")
    def run(
        ids: list[str] = typer.Argument(None, help="Case ids (`attnum bugs list`); default: every case."),
        as_json: bool = typer.Option(False, "--json", help="Print the JSON document instead of the table."),
        all_probes: bool = typer.Option(False, "--all-probes", help="Run every probe at both versions (the verdict "
                                                                    "still reads the case's probes)."),
        out: Path | None = typer.Option(None, "--out", help="Results store folder (default runs/bugs-DATE-TIME); "
                                                            "re-run into it to finish a run cut short."),
        seed: int = typer.Option(0, "--seed", help="Seed of the probes' random inputs."),
    ) -> None:
        """Audit each case's broken and fixed release with the probes that name its symptom."""
        import time

        from attnum.audit.bugs import run as runner
        from attnum.audit.bugs.corpus import select
        from attnum.audit.bugs.table import failed, summarize, table_rows, totals
        from attnum.store.db import open_store
        from attnum.store.outdir import check_out_folder

        cases = select(ids or ())
        out_dir = check_out_folder(out or Path("runs") / time.strftime("bugs-%Y%m%d-%H%M%S"))
        options = runner.Options(all_probes=all_probes, seed=seed, quiet=True)

        def say(text: str) -> None:
            print(f"attnum bugs: {text}", file=sys.stderr, flush=True)

        pts = runner.points(cases, options)
        command = " ".join(["attnum", *sys.argv[1:]])
        runner.check_out(pts, out_dir, command=command)  # another spec's store: refused before any download
        try:
            runner.prepare(cases, options, say)
        except runner.Unavailable as err:
            print(f"attnum: error: {err}", file=sys.stderr)
            raise typer.Exit(EXIT_UNAVAILABLE) from None
        say(f"{len(pts)} audits of {len(cases)} case(s) into {out_dir}")

        from attnum.console.progress import Activity

        # A line per finished audit; in a log also a heartbeat every ATTNUM_PROGRESS_INTERVAL seconds while
        # one runs (an audit can take minutes).
        with Activity("bugs run", total=len(pts), unit="audits") as act:
            act.update(done=0)

            def progress(i, n, p, result) -> None:
                m = result.get("metrics") or {}
                what = m.get("verdict", "error") + (f" by {m['probe']}" if m.get("verdict") == "caught" else "")
                say(f"[{i} of {n}] {p.case} {p.role} {p.target}: {what} ({result['wall_s']:.1f} s)")
                act.update(done=i, label=f"last: {p.case} {p.role}")
                act.printed()

            store_path = runner.run_points(pts, out_dir, command=command, progress=progress)
        keys = {p.key for p in pts}
        with open_store(out_dir) as store:
            rows = [r for r in store.rows(kind="bug-case", status=None) if r["key"] in keys]
        summary = summarize(rows, cases)
        t = totals(summary)
        if as_json:
            print(dumps({"store": str(store_path), "totals": t, "cases": summary}, indent=2))
        else:
            from attnum.console.tables import print_table
            from attnum.studies.bugs.family import recall_line

            print_table(("case", "package", "versions", "broken caught?", "fixed silent?", "seconds"),
                        table_rows(summary), title="upstream bugs at their broken and fixed releases",
                        caption=f"{recall_line(t)}; store {store_path} (attnum report {out_dir})")
        raise typer.Exit(1 if failed(summary) else 0)

    app.add_typer(bugs, name="bugs")
