"""One training run: fixed data order, seeded init, chosen attention and precision, checkpoints.

Runs differ only in the fields the paper varies (``attention``, ``init_seed``, ``precision``); the
data order, noise and timesteps are a function of ``data_seed`` and the step alone. Under torchrun
(``torch.distributed`` initialised) the model is wrapped in DDP and each rank trains on its slice of
the same global batch; rank 0 writes the checkpoints and the log.

A user's attention (``file.py:fn``, ``module:fn``, ``triton-interpret:...``) runs in a kernel server
(:mod:`attnum.sandbox.server`) unless ``isolate=False``: the training loop, the optimizer and the
checkpoints stay in this process and each attention call (forward, and backward through the server's
own autograd) is one request. A server that dies, hangs past ``timeout`` s in one call, raises, or
returns an output of the wrong shape or dtype ends the run with :class:`AttentionFailed` (the CLI
exits 1 with one line); nothing it does reaches this process's state.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist

from attnum.errors import AttnumInputError, bad_value
from attnum.kernels.registry import require, runs_user_code
from attnum.numerics.formats import torch_dtype
from attnum.sandbox.wire import WrongOutput
from attnum.store.jsonout import dumps
from attnum.studies.training.checkpoints import checkpoint_name, save_checkpoint
from attnum.workloads.data import shard
from attnum.workloads.models import set_attention
from attnum.workloads.workloads import Workload, WorkloadConfig

PRECISIONS = ("fp32", "bf16", "fp16")


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """One run. ``precision`` bf16/fp16 means autocast around forward and loss (weights stay fp32)."""

    name: str
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    steps: int = 300
    ckpt_every: int = 25
    lr: float = 2e-3
    init_seed: int = 0
    data_seed: int = 0
    attention: str = "eager"
    block_q: int | None = None
    block_k: int | None = None
    precision: str = "fp32"
    device: str = "cpu"
    # Intra-op threads while training. 1 by default: on tensors this small, thread synchronisation
    # costs more than it saves, and it collapses (10-50x slower steps) when other jobs share the cores.
    threads: int | None = 1

    def __post_init__(self) -> None:
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads={self.threads} must be positive or None (torch's default)")
        if not self.name or "/" in self.name:
            raise bad_value("name", self.name, "a non-empty name without '/'")
        if self.steps <= 0 or self.ckpt_every <= 0:
            raise ValueError(f"steps={self.steps} and ckpt_every={self.ckpt_every} must be positive")
        if not self.lr > 0:
            raise ValueError(f"lr={self.lr} must be positive")
        if self.precision not in PRECISIONS:
            raise bad_value("precision", self.precision, " | ".join(PRECISIONS))

    def checkpoint_steps(self) -> list[int]:
        return sorted(set(range(0, self.steps, self.ckpt_every)) | {self.steps})


@dataclass(frozen=True, kw_only=True)
class RunResult:
    name: str
    ckpt_dir: Path
    losses: list[float]  # one per optimizer step, mean over ranks
    wall_s: float
    final_state: dict = field(default_factory=dict, repr=False)  # this rank's weights after the last step


def _rank_world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class AttentionFailed(Exception):
    """The user's attention, in its kernel server, died, hung, raised or returned a wrong output."""


def _checked(fn):
    """``fn`` whose output must be a (B, H, N, dv) tensor of q's dtype, else :class:`WrongOutput`."""

    def attention(q, k, v, **kw):
        out = fn(q, k, v, **kw)
        want = (*q.shape[:-1], v.shape[-1])
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != want or out.dtype != q.dtype:
            got = f"{tuple(out.shape)} {out.dtype}" if isinstance(out, torch.Tensor) else type(out).__name__
            raise WrongOutput(f"the attention returned {got}, expected a tensor {want} {q.dtype}")
        return out

    return attention


@contextlib.contextmanager
def attention_fn(spec: str, device: str, *, block_q=None, block_k=None, threads: int | None = None,
                 isolate: bool = True, timeout: float = 300.0, param: str = "attention") -> Iterator:
    """The attention ``spec`` names: attnum's own in this process; a user's in a kernel server
    (module doc) unless ``isolate`` is False, started here and killed whole when the block ends."""
    if not (isolate and runs_user_code(spec)):
        yield require(spec, device, block_q=block_q, block_k=block_k, param=param).fn
        return
    from attnum.sandbox.remote import RemoteTarget
    from attnum.sandbox.server import KernelServer, TargetGone

    with KernelServer("attention", spec, device=device, timeout=timeout, threads=threads or torch.get_num_threads(),
                      block_q=block_q, block_k=block_k) as server:
        try:
            info = server.start()
        except TargetGone as gone:
            raise AttentionFailed(f"{param} {spec!r}: {gone.status}: {gone.what}") from None
        if info.get("available") is not True:
            raise AttnumInputError(f"{param}={spec!r} is not available here: {info.get('reason')}")
        yield _checked(RemoteTarget(server))


def build_model(cfg: RunConfig, workload: Workload, attention=None) -> torch.nn.Module:
    # Init from a private RNG stream so that the init seed alone decides the weights.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.init_seed)
        model = workload.build_model()
    if attention is None:
        attention = require(cfg.attention, cfg.device, block_q=cfg.block_q, block_k=cfg.block_k).fn
    set_attention(model, attention)
    return model.to(cfg.device)


def train(cfg: RunConfig, out_dir: Path, *, isolate: bool = True, timeout: float = 300.0) -> RunResult:
    """Train, writing ``out_dir/<name>/ckpt/step_XXXXXX.safetensors`` and ``log.json``. A user's
    attention runs in a kernel server unless ``isolate`` is False (module doc); ``timeout``: seconds
    one of its calls may take."""
    before = torch.get_num_threads()
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    from attnum.sandbox.server import RemoteError, TargetGone

    try:
        with attention_fn(cfg.attention, cfg.device, block_q=cfg.block_q, block_k=cfg.block_k,
                          threads=cfg.threads, isolate=isolate, timeout=timeout) as fn:
            return _train(cfg, out_dir, fn)
    except TargetGone as gone:
        raise AttentionFailed(f"training {cfg.name}: attention {cfg.attention!r} {gone.status}: {gone.what}") \
            from None
    except (RemoteError, WrongOutput) as err:
        raise AttentionFailed(f"training {cfg.name}: attention {cfg.attention!r}: {type(err).__name__}: "
                              f"{err}".splitlines()[0][:500]) from None
    finally:
        torch.set_num_threads(before)


def _train(cfg: RunConfig, out_dir: Path, attention=None) -> RunResult:
    rank, world = _rank_world()
    workload = Workload(cfg.workload)
    model = build_model(cfg, workload, attention)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    inner = model.module if world > 1 else model
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    autocast = (
        torch.autocast(device_type=torch.device(cfg.device).type, dtype=torch_dtype(cfg.precision, param="precision"))
        if cfg.precision != "fp32"
        else nullcontext()
    )
    run_dir = Path(out_dir) / cfg.name
    ckpt_dir = run_dir / "ckpt"
    save_at = set(cfg.checkpoint_steps())
    losses: list[float] = []
    t0 = time.perf_counter()
    for step in range(cfg.steps + 1):
        if step in save_at and rank == 0:
            save_checkpoint(inner.state_dict(), ckpt_dir / checkpoint_name(step))
        if step == cfg.steps:
            break
        batch = workload.batch(data_seed=cfg.data_seed, step=step)
        batch = {k: v.to(cfg.device) for k, v in shard(batch, rank, world).items()}
        with autocast:
            loss = workload.loss(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        logged = loss.detach().float()
        if world > 1:
            dist.all_reduce(logged)
            logged /= world
        losses.append(float(logged))
    wall = time.perf_counter() - t0
    if rank == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
        log = {"config": _jsonable(asdict(cfg)), "losses": losses, "wall_s": wall, "world_size": world}
        tmp = run_dir / "log.json.tmp"
        tmp.write_text(dumps(log, indent=1))  # strict JSON: a NaN loss is null
        tmp.replace(run_dir / "log.json")  # the log appears last and whole: it marks the run finished
    return RunResult(name=cfg.name, ckpt_dir=ckpt_dir, losses=losses, wall_s=wall,
                     final_state={k: v.detach().cpu().clone() for k, v in inner.state_dict().items()})


def finished(cfg: RunConfig, out_dir: Path) -> dict | None:
    """The log of an earlier run of exactly ``cfg`` in ``out_dir`` with all its checkpoints, else None.

    ``log.json`` is written after the last checkpoint, so a run interrupted at any point has none and
    is trained again from its start; a log of another configuration under the same name is ignored.
    """
    run_dir = Path(out_dir) / cfg.name
    try:
        log = json.loads((run_dir / "log.json").read_text())
    except (OSError, ValueError):
        return None
    if log.get("config") != _jsonable(asdict(cfg)) or len(log.get("losses", ())) != cfg.steps:
        return None
    if not all((run_dir / "ckpt" / checkpoint_name(step)).is_file() for step in cfg.checkpoint_steps()):
        return None
    log["losses"] = [float("nan") if x is None else x for x in log["losses"]]  # null was a NaN loss
    return log


def _jsonable(obj):
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    return obj if isinstance(obj, (int, float, str, bool, type(None), list)) else str(obj)
