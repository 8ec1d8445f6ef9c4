"""Inputs with the structure that breaks low-bit attention, and Q, K, V captured from a trained model.

Distributions (``InputSpec.dist``; Q, K, V float64, N(0, 1) unless said):

- ``kbias``: K = N(0, 1) + b, one bias b ~ N(0, KBIAS_STD**2) per channel shared by every token (the
  channel-wise bias of real keys that SageAttention's smooth-K removes, arXiv 2410.02367 Fig. 4).
- ``massive``: massive activations (Sun et al., arXiv 2402.17762): MASSIVE_CHANNELS channels of
  the first token and of a MASSIVE_RATE fraction of others carry MASSIVE in Q and K; a per-block
  or per-tensor scale set by them crushes every other entry of the block to a few levels.
- ``sink``: an attention sink on the first token: the queries share a unit direction u (Q = N(0, 1)
  + SINK_SHARED u) and k_0 = SINK_GAIN sqrt(d) / SINK_SHARED u, so every query's score on it is about
  SINK_GAIN (far above the others'), and v_0 = 0.1 * N(0, 1) (sinks carry small values); the other
  keys N(0, 1) plus the K bias of ``kbias`` / 4.
- ``lm``: Q, K, V of one attention layer of attnum's byte-level LM (the ``lm`` training workload)
  after LM_STEPS AdamW steps on its bundled text (seconds; cached per process and in
  ``$ATTNUM_CACHE`` (default ``~/.cache/attnum``) as ``lm_qkv_<seed>_<batch>.pt``); heads and
  head_dim are the model's (LM_HEADS x LM_HEAD_DIM), seq_len <= LM_SEQ.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import torch

from attnum.errors import bad_value

STRUCTURED = ("kbias", "massive", "sink", "lm")
KBIAS_STD = 4.0
MASSIVE, MASSIVE_CHANNELS, MASSIVE_RATE = 100.0, 2, 0.002
SINK_GAIN, SINK_SHARED = 8.0, 3.0
LM_STEPS, LM_HEADS, LM_HEAD_DIM, LM_SEQ, LM_LAYER, LM_BATCH = 60, 2, 64, 128, 1, 8


def structured_qkv(spec, device="cpu") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q (B, H, N, d), k, v (B, G, S, d) float64 for one of :data:`STRUCTURED` (see the module docstring)."""
    if spec.dist == "lm":
        return tuple(t.to(device) for t in lm_qkv(spec))
    g = torch.Generator().manual_seed(spec.seed)
    B, H, G, N, S, d = spec.batch, spec.heads, spec.G, spec.seq_len, spec.S, spec.head_dim
    q = torch.randn(B, H, N, d, generator=g, dtype=torch.float64)
    k = torch.randn(B, G, S, d, generator=g, dtype=torch.float64)
    v = torch.randn(B, G, S, d, generator=g, dtype=torch.float64)
    bias = KBIAS_STD * torch.randn(B, G, 1, d, generator=g, dtype=torch.float64)
    if spec.dist == "kbias":
        k = k + bias
    elif spec.dist == "massive":
        ch = torch.randperm(d, generator=g)[:MASSIVE_CHANNELS]
        for x, n in ((q, N), (k, S)):
            rows = torch.rand(n, generator=g) < MASSIVE_RATE
            rows[0] = True
            x[:, :, rows.nonzero().flatten()[:, None], ch] = MASSIVE
    elif spec.dist == "sink":
        u = torch.randn(B, G, 1, d, generator=g, dtype=torch.float64)
        u = u / u.norm(dim=-1, keepdim=True)
        q = q + SINK_SHARED * u.repeat_interleave(H // G, dim=1)  # queries share a direction (as real ones do)
        k = k + bias / 4
        k[:, :, 0] = (SINK_GAIN * d**0.5 / SINK_SHARED) * u[:, :, 0]  # q . k_0 / sqrt(d) ~ SINK_GAIN (1 + z / 3)
        v[:, :, 0] = 0.1 * torch.randn(B, G, d, generator=g, dtype=torch.float64)
    else:
        raise bad_value("dist", spec.dist, f"one of {STRUCTURED}")
    return (q * spec.logit_scale).to(device), k.to(device), v.to(device)


def lm_qkv(spec) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The captured layer's Q, K, V for ``spec`` (heads = LM_HEADS, head_dim = LM_HEAD_DIM, no GQA,
    seq_len = kv_len <= LM_SEQ, batch = text windows), float64."""
    if spec.heads != LM_HEADS or spec.head_dim != LM_HEAD_DIM or spec.G != LM_HEADS:
        raise bad_value("heads/head_dim", (spec.heads, spec.head_dim),
                        f"({LM_HEADS}, {LM_HEAD_DIM}) for dist='lm' (the trained model's attention shape)")
    if spec.seq_len > LM_SEQ or spec.S != spec.seq_len:
        raise bad_value("seq_len", spec.seq_len, f"at most {LM_SEQ} with kv_len = seq_len for dist='lm'")
    q, k, v = _captured(spec.batch, spec.seed)
    n = spec.seq_len
    return q[:, :, :n] * spec.logit_scale, k[:, :, :n], v[:, :, :n]


def _cache_path(batch: int, seed: int) -> Path:
    root = Path(os.environ.get("ATTNUM_CACHE") or Path.home() / ".cache" / "attnum")
    return root / f"lm_qkv_{seed}_{batch}_s{LM_STEPS}_n{LM_SEQ}.pt"


@functools.lru_cache(maxsize=4)
def _captured(batch: int, seed: int):
    path = _cache_path(batch, seed)
    if path.is_file() and not path.is_symlink():
        try:
            got = _checked(torch.load(path, weights_only=True), batch)
        except Exception:  # a torn or foreign file: retrain and overwrite
            got = None
        if got is not None:
            return got
    qkv = _train_and_capture(batch, seed)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        torch.save(list(qkv), tmp)
        os.replace(tmp, path)
    except OSError:  # a read-only home: the in-process cache still holds it
        pass
    return qkv


def _checked(loaded, batch: int):
    """The cached (q, k, v) when it is what :func:`_train` returns (three finite float64 tensors
    (batch, LM_HEADS, LM_SEQ, LM_HEAD_DIM)), else None: a foreign or wrong-shaped file is never used."""
    shape = (batch, LM_HEADS, LM_SEQ, LM_HEAD_DIM)
    if not (isinstance(loaded, list | tuple) and len(loaded) == 3):
        return None
    for t in loaded:
        if not (isinstance(t, torch.Tensor) and t.dtype == torch.float64 and tuple(t.shape) == shape
                and bool(torch.isfinite(t).all()) and bool(t.abs().amax() > 0)):
            return None
    return tuple(t.contiguous() for t in loaded)


def _train_and_capture(batch: int, seed: int):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: the same bits on every machine, and faster on a loaded one
    try:
        return _train(batch, seed)
    finally:
        torch.set_num_threads(threads)


def _train(batch: int, seed: int):
    from attnum.workloads.models import ModelConfig, set_attention
    from attnum.workloads.workloads import Workload, WorkloadConfig

    torch.manual_seed(seed)
    if batch > LM_BATCH:
        raise bad_value("batch", batch, f"at most {LM_BATCH} for dist='lm' (text windows of one batch)")
    wl = Workload(WorkloadConfig(name="lm", model=ModelConfig(d_model=LM_HEADS * LM_HEAD_DIM, n_heads=LM_HEADS,
                                                              n_layers=2), batch_size=LM_BATCH, seq_len=LM_SEQ))
    model = wl.build_model()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.0)
    for step in range(LM_STEPS):
        loss = wl.loss(model, wl.batch(data_seed=seed, step=step))
        opt.zero_grad()
        loss.backward()
        opt.step()
    seen = []

    def record(q, k, v, *, is_causal):
        seen.append((q.detach().double(), k.detach().double(), v.detach().double()))
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal)

    set_attention(model, record)
    with torch.no_grad():
        model(wl.batch(data_seed=seed + 1, step=0)["inputs_BT"][:batch])
    return tuple(t.contiguous() for t in seen[LM_LAYER])
