"""The paper's Stage 2: does flash attention's deviation matter for the weights?

For each init seed ``s`` of ``seeds``, three runs of one workload with one data order (``data_seed``):

- ``baseline-s``: the reference attention, by default the paper's baseline at low precision
  (``baseline:uniform:bf16``: materialised softmax, every site rounded to bf16);
- ``flash-s``: flash attention at the *same* precision (``flash:uniform:bf16``), everything else
  equal (comparison a) -- the paper's pairing, so the difference is the algorithm, not the dtype;
- ``lowprec-s``: the baseline with the whole model under bf16 (or fp16) autocast (comparison c, a
  difference known to matter).

The different-init proxy (comparison b, a difference everyone accepts) pairs ``baseline-s`` with the
baseline of the next seed. Every comparison is made at every checkpoint (max |dW| and W1, see
``divergence``); the headline divides flash's figures by each proxy's, per seed, and gives their
spread over the seeds (:mod:`attnum.studies.training.headline`).

Runs resume: a run whose ``log.json`` records this exact configuration is finished and is not
trained again (an interrupted run has no log and is retrained from its start), as a sweep skips
its done points.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from attnum.errors import AttnumInputError, bad_value
from attnum.kernels.registry import require, runs_user_code
from attnum.store.jsonout import dumps
from attnum.store.outfile import write_atomic
from attnum.studies.training.checkpoints import checkpoint_name, load_state
from attnum.studies.training.divergence import weight_divergence
from attnum.studies.training.headline import COMPARISONS, headline, summarise
from attnum.studies.training.loop import PRECISIONS, RunConfig, attention_fn, finished, train
from attnum.workloads.models import ModelConfig
from attnum.workloads.workloads import WORKLOADS, WorkloadConfig

PROFILES: dict[str, dict[str, int]] = {
    "quick": {"steps": 400, "ckpt_every": 20},
    "full": {"steps": 3000, "ckpt_every": 100},
}
__all__ = ["COMPARISONS", "PROFILES", "DivergeConfig", "headline", "run_configs", "run_diverge", "workload_config"]


@dataclass(frozen=True, kw_only=True)
class DivergeConfig:
    """Fields map 1:1 onto ``attnum diverge`` flags; ``steps``/``ckpt_every`` override the profile."""

    workload: str = "digits"
    profile: str = "quick"
    attention: str = "flash:uniform:bf16"
    baseline: str = "baseline:uniform:bf16"
    block_q: int | None = None
    block_k: int | None = 8  # small KV tiles so the online softmax rescales several times per row
    low_precision: str = "bf16"
    steps: int | None = None
    ckpt_every: int | None = None
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    data_seed: int = 0
    out: Path = Path("runs/diverge")
    # A user's attention (file.py:fn, module:fn) runs in a kernel server (attnum.sandbox.server);
    # False runs it in this process, trusting it. ``timeout``: seconds one of its calls may take.
    isolate: bool = True
    timeout: float = 300.0

    def __post_init__(self) -> None:
        if self.workload not in WORKLOADS:
            raise bad_value("workload", self.workload, " | ".join(WORKLOADS))
        if self.profile not in PROFILES:
            raise bad_value("profile", self.profile, " | ".join(PROFILES))
        if self.low_precision not in PRECISIONS or self.low_precision == "fp32":
            raise bad_value("low_precision", self.low_precision, "bf16 | fp16")
        seeds = tuple(self.seeds)
        if len(seeds) < 2 or len(set(seeds)) != len(seeds) or any(not isinstance(s, int) or s < 0 for s in seeds):
            raise bad_value("seeds", ",".join(map(str, seeds)), "at least two distinct non-negative init seeds "
                            "(the different-init proxy pairs each seed's baseline with the next seed's)")
        object.__setattr__(self, "seeds", seeds)
        # Fail before any training: unknown names, bad policies, kernels this machine cannot run
        # (the runs train on the CPU).
        # A user's code is resolved in its kernel server (check_attention), never imported here.
        for param in ("attention", "baseline"):
            if not (self.isolate and runs_user_code(getattr(self, param))):
                require(getattr(self, param), "cpu", param=param)
        if not self.timeout > 0:
            raise bad_value("timeout", self.timeout, "a positive number of seconds")
        for name in ("steps", "ckpt_every", "block_q", "block_k"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise AttnumInputError(f"{name}={value!r} is not allowed; expected a positive integer")

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
    """Every run by name: ``baseline-s``, ``flash-s`` and ``lowprec-s`` for each seed s."""
    out = {}
    for s in cfg.seeds:
        base = RunConfig(
            name=f"baseline-s{s}", workload=workload_config(cfg.workload), steps=cfg.resolved_steps,
            ckpt_every=cfg.resolved_ckpt_every, init_seed=s, data_seed=cfg.data_seed, attention=cfg.baseline,
        )
        out[base.name] = base
        out[f"flash-s{s}"] = replace(base, name=f"flash-s{s}", attention=cfg.attention, block_q=cfg.block_q,
                                     block_k=cfg.block_k)
        out[f"lowprec-s{s}"] = replace(base, name=f"lowprec-s{s}", precision=cfg.low_precision)
    return out


def pairs(cfg: DivergeConfig) -> dict[int, dict[str, tuple[str, str]]]:
    """seed -> comparison -> (reference run, other run)."""
    seeds = cfg.seeds
    return {s: {"flash": (f"baseline-s{s}", f"flash-s{s}"),
                "seed": (f"baseline-s{s}", f"baseline-s{seeds[(i + 1) % len(seeds)]}"),
                "lowprec": (f"baseline-s{s}", f"lowprec-s{s}")} for i, s in enumerate(seeds)}


def divergence_curves(run_dir: Path, steps: list[int], comparisons: dict[str, tuple[str, str]]) -> dict:
    """For each comparison (ref, other): step, max_abs, w1, w1_mean lists, and ``per_tensor[name]`` =
    {"max_abs": [...], "w1": [...]} over the same steps."""
    curves: dict[str, dict] = {}
    for name, (ref, other) in comparisons.items():
        c: dict = {"step": [], "max_abs": [], "w1": [], "w1_mean": [], "per_tensor": {}, "runs": [ref, other]}
        for step in steps:
            a = load_state(run_dir / ref / "ckpt" / checkpoint_name(step))
            b = load_state(run_dir / other / "ckpt" / checkpoint_name(step))
            div = weight_divergence(a, b)
            c["step"].append(step)
            for key in ("max_abs", "w1", "w1_mean"):
                c[key].append(getattr(div, key))
            for tensor, m in div.per_tensor.items():
                t = c["per_tensor"].setdefault(tensor, {"max_abs": [], "w1": []})
                t["max_abs"].append(m["max_abs"])
                t["w1"].append(m["w1"])
        curves[name] = c
    return curves


def check_attention(cfg: DivergeConfig) -> None:
    """Resolve a user's --attention / --baseline in its kernel server before any training: a name that
    does not resolve is an AttnumInputError, an import that dies is :class:`AttentionFailed`."""
    if not cfg.isolate:
        return
    for param in ("attention", "baseline"):
        spec = getattr(cfg, param)
        if runs_user_code(spec):
            with attention_fn(spec, "cpu", isolate=True, timeout=cfg.timeout, param=param, threads=1):
                pass


def run_diverge(cfg: DivergeConfig, *, log=print, progress=None) -> dict:
    """Train (or reuse) every run, compare them, write results.json + figures + index.html into ``cfg.out``.
    ``progress(done, total, label)`` is called before each run to train (runs reused from an earlier
    call are not counted: the CLI's "k of n" and ETA are about the work left)."""
    from attnum.studies.training.report import write_report

    out = Path(cfg.out)
    run_dir = out / "runs"
    t0 = time.perf_counter()
    check_attention(cfg)
    runs = run_configs(cfg)
    results = {}
    to_train = [key for key, rc in runs.items() if finished(rc, run_dir) is None]
    for key, rc in runs.items():
        done = finished(rc, run_dir)
        if done is None and progress is not None:
            progress(to_train.index(key) if key in to_train else 0, len(to_train), f"training {key}")
        if done is not None:
            log(f"{key}: finished earlier ({done['wall_s']:.1f} s), reused")
            losses, wall = done["losses"], done["wall_s"]
        else:
            log(f"training {key}: attention={rc.attention} precision={rc.precision} init_seed={rc.init_seed}")
            r = train(rc, run_dir, isolate=cfg.isolate, timeout=cfg.timeout)
            losses, wall = r.losses, r.wall_s
            log(f"  {wall:.1f} s, final loss {losses[-1]:.4f}")
        results[key] = {"losses": losses, "wall_s": wall, "attention": rc.attention, "precision": rc.precision,
                        "init_seed": rc.init_seed, "reused": done is not None}
    steps = next(iter(runs.values())).checkpoint_steps()
    curves = {s: divergence_curves(run_dir, steps, comps) for s, comps in pairs(cfg).items()}
    head = summarise({s: headline(c) for s, c in curves.items()})
    summary = {
        "config": {k: (str(v) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v)
                   for k, v in asdict(cfg).items()},
        "runs": results,
        "curves": {str(s): c for s, c in curves.items()},
        "headline": {**head, "per_seed": {str(s): h for s, h in head["per_seed"].items()}},
        "wall_s": time.perf_counter() - t0,
    }
    out.mkdir(parents=True, exist_ok=True)
    write_atomic((out / "results.json"), dumps(summary, indent=1))
    write_report(summary, out)
    return summary
