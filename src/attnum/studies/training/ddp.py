"""Run a workload under torchrun (DDP): gloo on CPU, nccl on GPU.

    torchrun --nproc_per_node 2 -m attnum.studies.training.ddp --workload digits --steps 20 --out runs/ddp

Every rank builds the same model (same init seed), trains on its slice of the same global batch
(``data.shard``), and at the end writes its own weights to ``OUT/<name>/rank_<r>.safetensors``, so
that agreement between ranks can be checked; rank 0 also writes the usual checkpoints and log.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.distributed as dist

from attnum.studies.training.checkpoints import save_checkpoint
from attnum.studies.training.diverge import workload_config
from attnum.studies.training.loop import RunConfig, train
from attnum.workloads.workloads import WORKLOADS


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m attnum.studies.training.ddp")
    p.add_argument("--workload", choices=WORKLOADS, default="digits")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--ckpt-every", type=int, default=10)
    p.add_argument("--attention", default="eager")
    p.add_argument("--precision", default="fp32")
    p.add_argument("--name", default="ddp")
    p.add_argument("--out", type=Path, default=Path("runs/ddp"))
    args = p.parse_args(argv)
    cuda = torch.cuda.is_available()
    backend = "nccl" if cuda else "gloo"
    dist.init_process_group(backend=backend)
    rank = dist.get_rank()
    device = "cpu"
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    try:
        cfg = RunConfig(name=args.name, workload=workload_config(args.workload), steps=args.steps,
                        ckpt_every=args.ckpt_every, attention=args.attention, precision=args.precision,
                        device=device)
        result = train(cfg, args.out)
        # Each rank's own live weights, so agreement between ranks can be checked.
        save_checkpoint(result.final_state, args.out / args.name / f"rank_{rank}.safetensors")
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
