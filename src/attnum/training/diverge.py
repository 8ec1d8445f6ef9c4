"""The paper's Stage 2: does flash attention's deviation matter for the weights?

Four runs of one workload, identical data order (``data_seed``):

- ``baseline``: the reference attention (default ``eager``: softmax(QK^T)V op by op, fp32);
- ``flash``: the candidate attention, everything else equal (comparison a);
- ``seed``: the baseline with a different init seed (comparison b, a difference everyone accepts);
- ``lowprec``: the baseline under bf16 (or fp16) autocast (comparison c, a difference known to matter).

Each of flash/seed/lowprec is compared with ``baseline`` at every checkpoint (max |dW| and W1, see
``divergence``), and the headline divides flash's figures by each proxy's, from the data.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from attnum.errors import bad_value
from attnum.kernels.registry import require
from attnum.training.checkpoints import checkpoint_name, load_state
from attnum.training.divergence import weight_divergence
from attnum.training.loop import PRECISIONS, RunConfig, train
from attnum.training.models import ModelConfig
from attnum.training.workloads import WORKLOADS, WorkloadConfig

PROFILES: dict[str, dict[str, int]] = {
    "quick": {"steps": 400, "ckpt_every": 20},
    "full": {"steps": 3000, "ckpt_every": 100},
}
COMPARISONS = {"flash": "flash vs baseline", "seed": "different init seed", "lowprec": "low precision"}


@dataclass(frozen=True, kw_only=True)
class DivergeConfig:
    """Fields map 1:1 onto ``attnum diverge`` flags; ``steps``/``ckpt_every`` override the profile."""

    workload: str = "digits"
    profile: str = "quick"
    attention: str = "flash:fp32"
    baseline: str = "eager"
    block_q: int | None = None
    block_k: int | None = 8  # small KV tiles so the online softmax rescales several times per row
    low_precision: str = "bf16"
    steps: int | None = None
    ckpt_every: int | None = None
    init_seed: int = 0
    alt_seed: int = 1
    data_seed: int = 0
    out: Path = Path("runs/diverge")

    def __post_init__(self) -> None:
        if self.workload not in WORKLOADS:
            raise bad_value("workload", self.workload, " | ".join(WORKLOADS))
        if self.profile not in PROFILES:
            raise bad_value("profile", self.profile, " | ".join(PROFILES))
        if self.low_precision not in PRECISIONS or self.low_precision == "fp32":
            raise bad_value("low_precision", self.low_precision, "bf16 | fp16")
        if self.alt_seed == self.init_seed:
            raise ValueError(f"alt_seed={self.alt_seed} must differ from init_seed={self.init_seed}")
        # Fail before any training: unknown names, bad policies, kernels this machine cannot run
        # (the runs train on the CPU).
        require(self.attention, "cpu", param="attention")
        require(self.baseline, "cpu", param="baseline")
        for name in ("steps", "ckpt_every", "block_q", "block_k"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name}={value} must be positive")

    @property
    def resolved_steps(self) -> int:
        return self.steps or PROFILES[self.profile]["steps"]

    @property
    def resolved_ckpt_every(self) -> int:
        return self.ckpt_every or PROFILES[self.profile]["ckpt_every"]


def workload_config(name: str) -> WorkloadConfig:
    """The model and batch sizes that keep the quick profile within minutes on 2 CPU cores."""
    if name == "digits":
        return WorkloadConfig(name="digits", model=ModelConfig(d_model=32, n_heads=2, n_layers=2), batch_size=64)
    return WorkloadConfig(name="lm", model=ModelConfig(d_model=32, n_heads=2, n_layers=2), batch_size=32, seq_len=32)


def run_configs(cfg: DivergeConfig) -> dict[str, RunConfig]:
    base = RunConfig(
        name="baseline", workload=workload_config(cfg.workload), steps=cfg.resolved_steps,
        ckpt_every=cfg.resolved_ckpt_every, init_seed=cfg.init_seed, data_seed=cfg.data_seed,
        attention=cfg.baseline,
    )
    return {
        "baseline": base,
        "flash": replace(base, name="flash", attention=cfg.attention, block_q=cfg.block_q, block_k=cfg.block_k),
        "seed": replace(base, name="seed", init_seed=cfg.alt_seed),
        "lowprec": replace(base, name="lowprec", precision=cfg.low_precision),
    }


def divergence_curves(run_dir: Path, steps: list[int]) -> dict[str, dict[str, list[float]]]:
    """For each comparison: step, max_abs, w1, w1_mean lists against the baseline run, and
    ``per_tensor[name]`` = {"max_abs": [...], "w1": [...]} over the same steps."""
    curves: dict[str, dict] = {}
    for other in COMPARISONS:
        c: dict = {"step": [], "max_abs": [], "w1": [], "w1_mean": [], "per_tensor": {}}
        for step in steps:
            a = load_state(run_dir / "baseline" / "ckpt" / checkpoint_name(step))
            b = load_state(run_dir / other / "ckpt" / checkpoint_name(step))
            div = weight_divergence(a, b)
            c["step"].append(step)
            for key in ("max_abs", "w1", "w1_mean"):
                c[key].append(getattr(div, key))
            for name, m in div.per_tensor.items():
                t = c["per_tensor"].setdefault(name, {"max_abs": [], "w1": []})
                t["max_abs"].append(m["max_abs"])
                t["w1"].append(m["w1"])
        curves[other] = c
    return curves


def _slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares growth rate dy/dstep (the paper's "rate of weight deviation")."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else float("nan")


def _ratio(a: float, b: float) -> float:
    return a / b if b and math.isfinite(b) else float("nan")


def headline(curves: dict[str, dict[str, list[float]]]) -> dict:
    """Flash's deviation relative to each proxy at the last step, and of the growth rates."""
    f = curves["flash"]
    last = f["step"][-1]
    out: dict = {"step": last, "ratios": {}, "lines": []}
    for proxy, label in (("seed", "different-init"), ("lowprec", "low-precision")):
        p = curves[proxy]
        r = {
            "w1": _ratio(f["w1"][-1], p["w1"][-1]),
            "max_abs": _ratio(f["max_abs"][-1], p["max_abs"][-1]),
            "w1_rate": _ratio(_slope(f["step"], f["w1"]), _slope(p["step"], p["w1"])),
        }
        out["ratios"][proxy] = r
        out["lines"].append(f"flash / {label} W1 at step {last}: {r['w1']:.3g}")
        out["lines"].append(f"flash / {label} max|dW| at step {last}: {r['max_abs']:.3g}")
        out["lines"].append(f"flash / {label} W1 growth rate: {r['w1_rate']:.3g}")
    return out


def run_diverge(cfg: DivergeConfig, *, log=print) -> dict:
    """Train the four runs, compare them, write results.json + figures + index.html into ``cfg.out``."""
    from attnum.training.report import write_report

    out = Path(cfg.out)
    run_dir = out / "runs"
    t0 = time.perf_counter()
    runs = run_configs(cfg)
    results = {}
    for key, rc in runs.items():
        log(f"training {key}: attention={rc.attention} precision={rc.precision} init_seed={rc.init_seed}")
        r = train(rc, run_dir)
        results[key] = {"losses": r.losses, "wall_s": r.wall_s, "attention": rc.attention,
                        "precision": rc.precision, "init_seed": rc.init_seed}
        log(f"  {r.wall_s:.1f} s, final loss {r.losses[-1]:.4f}")
    curves = divergence_curves(run_dir, runs["baseline"].checkpoint_steps())
    head = headline(curves)
    summary = {
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items()},
        "runs": results,
        "curves": curves,
        "headline": head,
        "wall_s": time.perf_counter() - t0,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(summary, indent=1))
    write_report(summary, out)
    return summary
