"""Does it matter for tokens? Greedy completions of attnum's bundled LM under two serving schedules.

The model: :class:`attnum.workloads.models.ByteLM` trained here for ``train_steps`` steps on the bundled
``lm`` workload (stdlib ``pydoc_data`` prose, no download), cached under the out folder.

Each of ``prompts`` prompts (``prompt_len`` bytes of held-out text) is completed greedily for
``gen_len`` bytes ``runs`` times per schedule. At every decode step of a run the request shares the
GPU with a batch whose size is drawn uniformly from 1..``max_batch`` (seeded by run and step), as
requests join and leave a server; the split rule then plans the step for that batch
(:mod:`attnum.attention.serving.split_rules`). ``variant_rule`` (vLLM's unified kernel: 3D segments at small
batch, 2D above 128 // G sequences) depends on the batch; ``invariant_rule`` does not. The Thinking
Machines experiment counted unique completions of 1,000 runs of one prompt; here we count unique
completions per prompt over the runs.

Log-probabilities: a training-side pass (the whole sequence at once, attention one causal pass under
``train_policy``) against the inference-side log-probs of the same tokens: KL(train || inference) per
position and the largest |Δ log p| of the generated token.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from attnum.attention.serving.split_rules import parse_split_rule, plan_splits
from attnum.errors import bad_value
from attnum.numerics.policy import parse_policy
from attnum.numerics.threads import one_thread
from attnum.studies.consistency.lm_decode import ServedLM, training_logits
from attnum.workloads.models import ByteLM, ModelConfig


@dataclass(frozen=True, kw_only=True)
class TokensConfig:
    """Fields map 1:1 onto ``attnum consistency-tokens``'s flags."""

    formats: tuple[str, ...] = ("bf16", "e4m3fn")
    policy: str = "fa2"
    train_policy: str | None = None  # None: the inference policy (same precision: isolates the schedule)
    variant_rule: str = "vllm"
    invariant_rule: str = "vllm-invariant"
    prompts: int = 12
    runs: int = 4
    prompt_len: int = 24
    gen_len: int = 40
    max_batch: int = 128
    train_steps: int = 200
    d_model: int = 64
    n_heads: int = 2
    n_layers: int = 2
    seq_len: int = 128
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("prompts", "runs", "prompt_len", "gen_len", "max_batch", "train_steps", "d_model", "n_heads",
                     "n_layers", "seq_len"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise bad_value(name, v, "a positive integer")
        if self.prompt_len + self.gen_len > self.seq_len:
            raise bad_value("gen_len", self.gen_len, f"at most seq_len - prompt_len = {self.seq_len - self.prompt_len}")
        from attnum.attention.serving.decode import check_decodable

        for f in self.formats:
            check_decodable(parse_policy(self.policy, f))  # served by decode steps: no low-bit substitution
        parse_split_rule(self.variant_rule), parse_split_rule(self.invariant_rule)

    def model_key(self) -> str:
        keep = {k: getattr(self, k) for k in ("train_steps", "d_model", "n_heads", "n_layers", "seq_len", "seed")}
        return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:12]


def trained_model(cfg: TokensConfig, out_dir: Path | None) -> tuple[ByteLM, dict[str, Any]]:
    """The LM, trained now or loaded from ``out_dir/lm-<key>.pt`` -> (model, {final_loss, cached})."""
    from attnum.workloads.workloads import Workload, WorkloadConfig

    mcfg = ModelConfig(d_model=cfg.d_model, n_heads=cfg.n_heads, n_layers=cfg.n_layers)
    wl = Workload(WorkloadConfig(name="lm", model=mcfg, batch_size=16, seq_len=cfg.seq_len))
    torch.manual_seed(cfg.seed)
    model = wl.build_model()
    path = None if out_dir is None else Path(out_dir) / f"lm-{cfg.model_key()}.pt"
    if path is not None and path.exists():
        saved = torch.load(path, weights_only=True)
        model.load_state_dict(saved["state"])
        return model, {"final_loss": float(saved["loss"]), "cached": True}
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    loss = torch.tensor(float("nan"))
    for step in range(cfg.train_steps):
        loss = wl.loss(model, wl.batch(data_seed=cfg.seed, step=step))
        opt.zero_grad()
        loss.backward()
        opt.step()
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"state": model.state_dict(), "loss": float(loss.detach())}, path)
    return model, {"final_loss": float(loss.detach()), "cached": False}


def _prompts(cfg: TokensConfig) -> list[torch.Tensor]:
    from attnum.workloads.data import TextData

    data = TextData.load()
    return [data.batch(data_seed=cfg.seed + 7919, step=i, batch_size=1, seq_len=cfg.prompt_len)["inputs_BT"][0]
            for i in range(cfg.prompts)]


def _generate(model, cfg: TokensConfig, policy, rule, prompt: torch.Tensor, run: int):
    """One greedy completion -> (tokens (gen_len,), inference log-probs (gen_len, V), plan notes)."""
    served = ServedLM(model, policy, cfg.prompt_len + cfg.gen_len)
    logits = served.prefill(prompt)[-1]
    g = torch.Generator().manual_seed(cfg.seed * 1_000_003 + run)
    toks, logps, notes = [], [], set()
    heads, G, d = served.H, served.H, served.D // served.H
    for i in range(cfg.gen_len):
        logp = torch.log_softmax(logits.double(), -1)
        tok = int(torch.argmax(logits))
        toks.append(tok)
        logps.append(logp)
        if i == cfg.gen_len - 1:
            break
        B = int(torch.randint(1, cfg.max_batch + 1, (1,), generator=g))
        L = served.length + 1
        co = torch.randint(cfg.prompt_len, cfg.seq_len + 1, (B - 1,), generator=g).tolist()
        plan = plan_splits(rule, lens=[L, *co], heads=heads, kv_heads=G, head_dim=d).select([0])
        notes.add(plan.note.split(" (")[0])
        logits = served.step(tok, plan)
    return torch.tensor(toks), torch.stack(logps), sorted(notes)


def run_tokens(cfg: TokensConfig, out_dir: Path | None = None) -> dict[str, Any]:
    """Unique completions per prompt and train/inference log-prob gaps, per format and schedule."""
    with one_thread():
        return _run_tokens(cfg, out_dir)


def _run_tokens(cfg: TokensConfig, out_dir: Path | None) -> dict[str, Any]:
    t0 = time.perf_counter()
    model, train_info = trained_model(cfg, out_dir)
    prompts = _prompts(cfg)
    results = []
    for fmt in cfg.formats:
        policy = parse_policy(cfg.policy, fmt)
        train_policy = parse_policy(cfg.train_policy or cfg.policy, fmt)
        for schedule, rule in (("batch-variant", cfg.variant_rule), ("batch-invariant", cfg.invariant_rule)):
            uniques, kl_mean, kl_max, dlogp, notes = [], [], 0.0, 0.0, set()
            first_div = []
            for prompt in prompts:
                outs = []
                for run in range(cfg.runs):
                    toks, logp_inf, n = _generate(model, cfg, policy, rule, prompt, run)
                    notes.update(n)
                    outs.append(tuple(toks.tolist()))
                    seq = torch.cat([prompt, toks])
                    lt = training_logits(model, seq[:-1], train_policy)[cfg.prompt_len - 1:].double()
                    logp_tr = torch.log_softmax(lt, -1)
                    kl = (logp_tr.exp() * (logp_tr - logp_inf)).sum(-1)
                    kl_mean.append(float(kl.mean()))
                    kl_max = max(kl_max, float(kl.max()))
                    chosen = toks[:, None]
                    dlogp = max(dlogp, float((logp_tr.gather(1, chosen) - logp_inf.gather(1, chosen)).abs().max()))
                uniques.append(len(set(outs)))
                ref = outs[0]
                first_div += [next(i for i, (a, b) in enumerate(zip(o, ref)) if a != b) for o in outs if o != ref]
            results.append({
                "format": fmt, "schedule": schedule, "rule": parse_split_rule(rule).label, "plans": sorted(notes),
                "unique_per_prompt": uniques, "prompts_with_flips": sum(u > 1 for u in uniques),
                "max_unique": max(uniques), "first_divergence": sorted(first_div),
                "kl_mean": sum(kl_mean) / len(kl_mean), "kl_max": kl_max, "max_abs_dlogp": dlogp})
    return {"config": asdict(cfg), "model": {"key": cfg.model_key(), **train_info}, "results": results,
            "timing_s": time.perf_counter() - t0}
