"""attnum fingerprint on the built-in serving kernels, held to their source: asked for 3 splits, the KV tile
the fingerprint reads off SGLang's and vLLM's Triton decode kernels is the ``BLOCK`` their launcher sets
(read from the fetched wheel's file, not written here), walked forward, and the split ranges are each
kernel's own cut (SGLang's with the ``_MIN_BLOCK_KV`` read from its file). The kernel runs through its
decode entry point under the faithful Triton model, in a kernel server, as a user's
``attnum fingerprint sglang-decode --num-splits 3`` does, and is reproduced bit for bit."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import _paths
import pytest
from _wheel_helpers import fetched_or_skip

from attnum.kernels.wheels import source as wheels


def _source_block(package: str, module: str, function: str) -> int:
    """The ``BLOCK = N`` a launcher function sets first (the CUDA value; the HIP one follows it), read from
    the file the kernel runs from: the installed package's, else the fetched wheel's."""
    text = _source_path(package, module).read_text()
    body = text[text.index(f"def {function}("):]
    return int(re.search(r"^\s+BLOCK = (\d+)", body, re.M).group(1))


def _source_min_block_kv(path: Path) -> int:
    return int(re.search(r"^_MIN_BLOCK_KV = (\d+)", path.read_text(), re.M).group(1))


def _source_path(package: str, module: str) -> Path:
    if wheels.installed(package):
        return Path(importlib.util.find_spec(module).origin)
    return wheels.source_dir(package) / (module.replace(".", "/") + ".py")


@pytest.mark.slow  # about 20 s of interpreted Triton each: left out of pytest -m "not slow" (README)
@pytest.mark.parametrize("target,package,module", [
    ("sglang-decode", "sglang", "sglang.srt.layers.attention.triton_ops.decode_attention"),
    ("vllm-triton-decode", "vllm", "vllm.v1.attention.ops.triton_decode_attention"),
])
def test_decode_kernel_fingerprint_holds_to_its_source(target, package, module):
    """Asked for 3 splits, each kernel is explained bit for bit: the tile is the source's BLOCK, the
    splits are its own cut (SGLang: ceil(ceil(S / n) / MIN_BLOCK_KV) * MIN_BLOCK_KV keys with the
    source's MIN_BLOCK_KV; vLLM: ceil(S / n)), merged online, with the element-wise tl.sum arithmetic."""
    fetched_or_skip(package)
    from _sweep_helpers import cli_env

    block = _source_block(package, module, "_decode_att_m_fwd")
    path = _source_path(package, module)
    run = subprocess.run([sys.executable, "-m", "attnum", "fingerprint", target, "--dtype", "fp32", "--num-splits",
                          "3", "--lengths", "160,300", "--heads", "2", "--head-dim", "16", "--json"],
                         capture_output=True, text=True, timeout=_paths.HANG_S, env=cli_env())
    assert run.returncode == 0, run.stderr[-2000:]
    doc = json.loads(run.stdout)
    assert doc["entry"] == "decode" and doc["numerics"].startswith("triton-interp:nvidia-sm90"), doc
    assert doc["kv_block"] == block and doc["kv_order"] == "forward", doc
    for S in (160, 300):
        if package == "sglang":
            a = _source_min_block_kv(path)
            per = math.ceil(math.ceil(S / 3) / a) * a
        else:
            per = math.ceil(S / 3)
        want = [[j0, min(j0 + per, S)] for j0 in range(0, S, per)]
        assert doc["split_bounds"][str(S)] == want, (S, doc["split_bounds"], want)
    assert doc["merge"] == "online" and doc["policy"] == "tl-sum-decode:fp32,fp-fusion", doc
    assert doc["bit_exact_fraction"] == 1.0 and doc["unexplained"] is None, doc


@pytest.mark.slow  # interpreted Triton at the default shape: 1.5 to 3 minutes
@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs the triton extra")
def test_the_triton_tutorial_with_a_hidden_block_n_is_recovered(tmp_path):
    """The tutorial-style kernel (examples/triton_tutorial/fused_attention.py, one query row through
    tutorial_decode.py) with a BLOCK_N drawn at random and set in a wrapper file the fingerprinter never
    reads, under the faithful model on sm90 (fp16, the tutorial as written): Triton's flash arithmetic with
    O as tl.dot's accumulator, the hidden tile, bit-exact on fresh inputs. At the default shape (lengths 512
    and 1280 here: multiples of the kernel's blocks): with fewer and shorter rows FA2's exp of the scaled
    scores can agree with the tutorial's exp2 on every fp16 output of every call (both are then listed, the
    tile arithmetic undetermined)."""
    import os
    import random

    from _paths import EXAMPLES
    from _sweep_helpers import cli_env

    block_n = random.Random(int(os.environ.get("ATTNUM_FINGERPRINT_SEED", "20261203"))).choice((16, 32, 64, 128))
    (tmp_path / "hidden.py").write_text(
        f"import sys\nsys.path.insert(0, {str(EXAMPLES / 'triton_tutorial')!r})\n"
        f"import fused_attention\nfused_attention.BLOCK_N = {block_n}\nfrom tutorial_decode import sdpa  # noqa: F401\n")
    run = subprocess.run([sys.executable, "-m", "attnum", "fingerprint", f"triton-interpret:{tmp_path / 'hidden.py'}:sdpa",
                          "--dtype", "fp16", "--lengths", "512,1280", "--json"],
                         capture_output=True, text=True, timeout=_paths.HANG_S, env=cli_env())
    assert run.returncode == 0, run.stderr[-2000:]
    doc = json.loads(run.stdout)
    assert doc["numerics"].startswith("triton-interp:nvidia-sm90"), doc
    assert doc["kv_block"] == block_n and doc["policy"].startswith("tl-dot-flash:fp16,mma=sm90"), doc
    assert "sm90" in doc["architectures"]["indistinguishable"], doc["architectures"]
    assert doc["bit_exact_fraction"] == 1.0 and doc["unexplained"] is None, doc
