"""The training loop under torchrun: two CPU processes (gloo) end with identical weights."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import _paths
import pytest
import torch
from safetensors.torch import load_file


def test_two_ranks_agree_on_weights(tmp_path):
    if not torch.distributed.is_available():
        pytest.skip("torch.distributed is not available in this torch build")
    torchrun = shutil.which("torchrun")
    cmd = [torchrun] if torchrun else [sys.executable, "-m", "torch.distributed.run"]
    cmd += ["--standalone", "--nproc_per_node", "2", "-m", "attnum.studies.training.ddp",
            "--steps", "4", "--ckpt-every", "2", "--out", str(tmp_path)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=_paths.HANG_S, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r0 = load_file(str(tmp_path / "ddp" / "rank_0.safetensors"))
    r1 = load_file(str(tmp_path / "ddp" / "rank_1.safetensors"))
    assert r0.keys() == r1.keys() and len(r0) > 0
    assert all(torch.equal(r0[k], r1[k]) for k in r0)
    init = load_file(str(tmp_path / "ddp" / "ckpt" / "step_000000.safetensors"))
    assert any(not torch.equal(init[k], r0[k]) for k in r0)  # it trained
