"""Biased rounding in low-precision attention training (Qiu & Yao, arXiv 2510.04212), on the byte LM.

Four runs, identical init and data order, differing only in the attention of every block:

============== ============================================ =========================================
run            attention                                    what it is
============== ============================================ =========================================
fp32           ``flash:fp32``                               the reference
uniform-bf16   ``flash:uniform:bf16``                       every site in bf16 (the paper's setting)
uniform-qy     ``flash:uniform:bf16,max_shift=qiu-yao``     the same with Qiu & Yao's max shift
fa2-bf16       ``flash:fa2:bf16``                           FA2's kernels: fp32 statistics, bf16 P
============== ============================================ =========================================

The rest of the model is fp32, so the attention's arithmetic is the only difference.

**Update error, defined.** At every step t of a run r, with r's weights W_t, r's AdamW moments and
batch b_t, two gradients are taken: g_r with r's attention and g_ref with the fp32 run's attention
(``flash:fp32``) -- *at the same weights* (teacher-forced, so the measure is the numerics of one
step, not the drift of two trajectories). Each is clipped as training clips it (global norm 1) and
turned into the AdamW update it would make from r's moments: u_r (the update r applies) and u_ref.
Per attention weight W (each layer's W_q, W_k, W_v -- the rows of ``qkv`` -- and W_o), with
e = u_r - u_ref:

- ``update_signed`` = mean(e * sign(u_ref)): the mean signed error of the update, signed so that
  > 0 means r's updates are systematically larger in magnitude than the reference's;
- ``update_bias`` = update_signed / mean|e| in [-1, 1] (``attnum.numerics.metrics.deviation``'s ``bias``);
- ``update_rel`` = ||e|| / ||u_ref||;
- ``grad_bias``, ``grad_rel``: the same for the raw gradients g_r - g_ref;
- ``coherence`` = ||sum_t e_t|| / sqrt(sum_t ||e_t||^2): ~1 when the per-step errors are
  independent (a random walk), ~sqrt(t) when they keep one direction (the paper's accumulation);
- ``lowrank`` = sigma_1(sum_t e_t) / ||sum_t e_t||_F: 1 when the accumulated error is rank one.

Also logged: the loss (and the reference loss at the same weights), the spectral norm sigma_1(W)
of every attention weight, and the fraction of attention rows with ties at the max (per full row
and per KV tile, on the run's own scores: the precondition of the mechanism). The fp32 run is its
own reference (e = 0).

Shapes: B batch, T tokens, D model width.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch

from attnum.attention.ties import TieCount, score_ties_by
from attnum.kernels.registry import require
from attnum.store.jsonout import dumps
from attnum.store.outfile import write_atomic
from attnum.studies.training.bias.config import (  # noqa: F401  (the study's names, as before)
    DATA,
    PROFILES,
    REFERENCE,
    RUNS,
    SITE_CASES,
    BiasConfig,
)
from attnum.studies.training.bias.sites import SiteBiasConfig, run_site_bias
from attnum.studies.training.bias.steps import (
    BETAS,
    CLIP,
    EPS,
    _clip_coef,
    _grads,
    _signed,
    adam_update,
    attention_weights,
    batch,
    split,
)
from attnum.workloads.models import set_attention
from attnum.workloads.workloads import Workload


def train_run(cfg: BiasConfig, name: str, log=print) -> dict:
    """Train run ``name``; returns its curves (see the module docstring)."""
    torch.set_num_threads(1)  # tiny tensors: threads cost more than they save on shared cores
    workload = Workload(cfg.workload())
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.init_seed)
        model = workload.build_model()
    fn = require(RUNS[name], "cpu", block_k=cfg.block_k).fn
    ref_fn = require(RUNS[REFERENCE], "cpu", block_k=cfg.block_k).fn
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=BETAS, eps=EPS, weight_decay=0.0)
    params = dict(model.named_parameters())
    attn = attention_weights(model)
    keys = [k for n, p in attn.items() for k in split(n, p)]
    per_step = ("update_signed", "update_bias", "update_rel", "grad_bias", "grad_rel")
    rec = {"name": name, "attention": RUNS[name], "loss": [], "loss_ref": [], "log_steps": [],
           "ties_row": [], "ties_tile": [],
           "sigma": {k: [] for k in keys}, "coherence": {k: [] for k in keys}, "lowrank": {k: [] for k in keys},
           **{m: {k: [] for k in keys} for m in per_step}}
    window = {m: {k: [] for k in keys} for m in per_step}
    cum = {k: torch.zeros_like(t, dtype=torch.float64) for n, p in attn.items() for k, t in split(n, p).items()}
    cum_sq = dict.fromkeys(keys, 0.0)
    t0 = time.perf_counter()
    for step in range(cfg.steps + 1):
        if step % cfg.log_every == 0 or step == cfg.steps:
            _log(rec, step, attn, cum, cum_sq, window)
            row, tile = tie_fractions(model, workload, batch(cfg, workload, step), RUNS[name], cfg.block_k)
            rec["ties_row"].append(row)
            rec["ties_tile"].append(tile)
            if step and log:
                log(f"[{name}] step {step}/{cfg.steps} loss {rec['loss'][-1]:.4f} "
                    f"max sigma {max(s[-1] for s in rec['sigma'].values()):.3f} ({time.perf_counter() - t0:.0f} s)")
        if step == cfg.steps:
            break
        b = batch(cfg, workload, step)
        loss, g = _grads(model, workload, b, fn)
        loss_ref, g_ref = (loss, g) if name == REFERENCE else _grads(model, workload, b, ref_fn)
        c, c_ref = _clip_coef(g), _clip_coef(g_ref)
        for n, p in attn.items():
            st = opt.state.get(p, {})
            u, u_ref = adam_update(g[n] * c, st, cfg.lr), adam_update(g_ref[n] * c_ref, st, cfg.lr)
            e_u, ref_u, e_g, ref_g = (split(n, t) for t in (u - u_ref, u_ref, g[n] - g_ref[n], g_ref[n]))
            for k in e_u:
                sgn, bias, rel = _signed(e_u[k], ref_u[k])
                _, gbias, grel = _signed(e_g[k], ref_g[k])
                for m, val in zip(per_step, (sgn, bias, rel, gbias, grel)):
                    window[m][k].append(val)
                cum[k] += e_u[k].double()
                cum_sq[k] += float(e_u[k].double().square().sum())
        for n, p in params.items():
            p.grad = g[n]
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        rec["loss"].append(loss)
        rec["loss_ref"].append(loss_ref)
    rec["wall_s"] = time.perf_counter() - t0
    return rec


def tie_fractions(model, workload, b, attention, block_k: int) -> tuple[float, float]:
    """Fractions of the attention rows, over every layer of a forward pass on batch ``b``, with more
    than one score within 1e-3 of the max: full rows, and rows of one KV tile (what flash's rule
    sees), on the scores as ``attention``'s policy forms them (fp32 for a non-flash attention)."""
    policy = attention.partition(":")[2] if isinstance(attention, str) and attention.startswith("flash:") else "fp32"
    counts = [TieCount(), TieCount()]
    real = require(attention, "cpu", block_k=block_k).fn

    def spy(q, k, v, **kw):
        row, tile = score_ties_by(q.detach(), k.detach(), blocks=(None, block_k), policy=policy,
                                  is_causal=kw.get("is_causal", False))
        counts[0], counts[1] = counts[0] + row, counts[1] + tile
        return real(q, k, v, **kw)

    set_attention(model, spy)
    with torch.no_grad():
        workload.loss(model, b)
    return counts[0].near_fraction, counts[1].near_fraction


def _log(rec, step, attn, cum, cum_sq, window) -> None:
    rec["log_steps"].append(step)
    for n, p in attn.items():
        for k, w in split(n, p.detach()).items():
            rec["sigma"][k].append(float(torch.linalg.matrix_norm(w.double(), ord=2)))
            c = cum[k]
            fro = float(c.norm())
            rec["coherence"][k].append(fro / math.sqrt(cum_sq[k]) if cum_sq[k] > 0 else 0.0)
            rec["lowrank"][k].append(float(torch.linalg.matrix_norm(c, ord=2)) / fro if fro > 0 else 0.0)
    for m, per in window.items():
        for k, vals in per.items():
            rec[m][k].append(sum(vals) / len(vals) if vals else 0.0)
            vals.clear()


def _worker(args) -> dict:
    cfg, name, progress = args
    return train_run(cfg, name, log=(lambda line: print(line, flush=True)) if progress else None)


def run_bias(cfg: BiasConfig, *, log=print, progress: bool = True) -> dict:
    """Train every run (``cfg.jobs`` processes; ``progress``: each prints a line every ``log_every``
    steps), compute the headline, write results.json and the report (index.html and figures) into
    ``cfg.out``; returns the summary."""
    from attnum.studies.training.bias.headline import headline
    from attnum.studies.training.bias.report import write_report

    t0 = time.perf_counter()
    log(f"bias profile {cfg.profile}: runs {', '.join(cfg.runs)}; {cfg.steps} steps, lr {cfg.lr}, "
        f"T={cfg.seq_len}, B={cfg.batch_size}, Bc={cfg.block_k}, data={cfg.data}, {cfg.jobs} process(es)")
    if cfg.jobs == 1:
        records = [train_run(cfg, name, log=log if progress else None) for name in cfg.runs]
    else:
        import concurrent.futures as cf
        import multiprocessing as mp
        import os

        from attnum.sandbox.processes import die_with_parent

        with cf.ProcessPoolExecutor(max_workers=min(cfg.jobs, len(cfg.runs)), mp_context=mp.get_context("spawn"),
                                    initializer=die_with_parent, initargs=(os.getpid(),)) as pool:
            records = list(pool.map(_worker, [(cfg, name, progress) for name in cfg.runs]))
    runs = {r["name"]: r for r in records}
    sites = []
    for case in SITE_CASES[cfg.profile]:
        site_cfg = SiteBiasConfig(**case)
        log(f"per-site signed error: {site_cfg}")
        sites.append(run_site_bias(site_cfg))
    summary = {"config": cfg.jsonable(), "runs": runs, "headline": headline(runs, cfg.steps), "sites": sites,
               "wall_s": time.perf_counter() - t0}
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic((out / "results.json"), dumps(summary, indent=1))
    write_report(summary, out)
    return summary
