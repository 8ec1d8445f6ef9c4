"""``attnum diverge --profile bias``: the biased-rounding comparison (attnum.studies.training.bias.study), printed."""

from __future__ import annotations

from pathlib import Path

from attnum.console.progress import Activity
from attnum.errors import AttnumInputError
from attnum.store.jsonout import dumps


def diverge_bias(*, profile: str, workload: str, steps: int | None, block_k: int | None, seeds: tuple[int, ...],
                 data_seed: int, out: Path, as_json: bool) -> None:
    """Map ``attnum diverge``'s flags onto :class:`BiasConfig` (the first seed is the init seed of
    every run), run it with progress lines, print the headline."""
    from attnum.studies.training.bias.study import BiasConfig, run_bias

    if workload != "lm":
        raise AttnumInputError(f"workload={workload!r} is not allowed with --profile {profile}; expected lm")
    if not seeds:
        raise AttnumInputError("seeds='' is not allowed; expected at least one integer")
    cfg = BiasConfig(profile=profile, steps=steps, block_k=block_k, init_seed=seeds[0], data_seed=data_seed,
                     out=out)
    with Activity("diverge --profile bias"):
        summary = run_bias(cfg, log=(lambda *_: None) if as_json else (lambda line: print(line, flush=True)),
                           progress=not as_json)
    if as_json:
        print(dumps({"headline": summary["headline"], "wall_s": summary["wall_s"],
                     "report": str(Path(out) / "index.html")}, indent=1))
        return
    for line in summary["headline"]["lines"]:
        print(line)
    print(f"wall time {summary['wall_s']:.1f} s; report: {Path(out) / 'index.html'}")
