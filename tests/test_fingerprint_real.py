"""attnum fingerprint on the built-in serving kernels, held to their source: the KV tile the fingerprint
reads off SGLang's and vLLM's Triton decode kernels is the ``BLOCK`` their launcher sets (read from the fetched wheel's
file, not written here), walked forward, in the one split the adapter asks for. The kernel runs through
its decode entry point under the faithful Triton model, in a kernel server, as a user's
``attnum fingerprint sglang-decode`` does."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _wheel_helpers import fetched_or_skip

from attnum.kernels import wheels

pytestmark = pytest.mark.timeout(600)


def _source_block(package: str, module: str, function: str) -> int:
    """The ``BLOCK = N`` a launcher function sets first (the CUDA value; the HIP one follows it), read from
    the file the kernel runs from: the installed package's, else the fetched wheel's."""
    if wheels.installed(package):
        path = Path(importlib.util.find_spec(module).origin)
    else:
        path = wheels.source_dir(package) / (module.replace(".", "/") + ".py")
    text = path.read_text()
    body = text[text.index(f"def {function}("):]
    return int(re.search(r"^\s+BLOCK = (\d+)", body, re.M).group(1))


@pytest.mark.slow  # about 90 s of interpreted Triton each: left out of pytest -m "not slow" (README)
@pytest.mark.parametrize("target,package,module", [
    ("sglang-decode", "sglang", "sglang.srt.layers.attention.triton_ops.decode_attention"),
    ("vllm-triton-decode", "vllm", "vllm.v1.attention.ops.triton_decode_attention"),
])
def test_decode_kernel_fingerprint_holds_to_its_source_block(target, package, module):
    fetched_or_skip(package)
    from _sweep_helpers import cli_env

    block = _source_block(package, module, "_decode_att_m_fwd")
    run = subprocess.run([sys.executable, "-m", "attnum", "fingerprint", target, "--dtype", "fp32",
                          "--lengths", "160,300", "--heads", "2", "--head-dim", "16", "--json"],
                         capture_output=True, text=True, timeout=540, env=cli_env())
    assert run.returncode == 0, run.stderr[-2000:]
    doc = json.loads(run.stdout)
    assert doc["entry"] == "decode" and doc["numerics"].startswith("triton-interp:nvidia-sm90"), doc
    for S in ("160", "300"):
        # explained (a replay matched) or not (the closest structure, reported as no match): the tile is the source's
        found = ({"kv_block": doc["kv_block"], "order": doc["kv_order"], "span": None if doc["splits"][S] == 1 else 0}
                 if doc["kv_block"] is not None else doc["closest_structure"][S])
        assert (found["kv_block"], found["order"], found["span"]) == (block, "forward", None), (S, found, block)
