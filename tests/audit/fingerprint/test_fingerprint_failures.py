"""attnum fingerprint on targets and arguments that misbehave (issue 42's fingerprint attacks).

Each test failed before its fix: a kernel returning its bf16 values upcast (was "no candidate explains
it"), outputs of other dtypes (a KeyError), a data-dependent kernel (was "bit-exact 1.0"), --timeout 0 and
-5 (accepted), --heads 10^6 (an internal MemoryError), a target raising on the fitting inputs and a --matmul
callable raising (internal errors, the document lost), vllm-mla-decode (NotImplementedError as an internal
error). Each now gives a correct result or one line with the right exit code."""

from __future__ import annotations

import json
import subprocess
import sys

import _paths
import pytest
import torch

from attnum.attention.flash import flash_attention
from attnum.audit.fingerprint import fingerprint
from attnum.errors import AttnumInputError

LENGTHS, HEADS, D = (64, 160), 4, 16
SMALL = ["--lengths", "64,160", "--heads", "4", "--head-dim", "16"]


def _cli(args, tmp_path, timeout=_paths.HANG_S):
    from _sweep_helpers import cli_env

    return subprocess.run([sys.executable, "-m", "attnum", *args], capture_output=True, text=True, timeout=timeout,
                          env=cli_env(), cwd=tmp_path)


def test_a_kernel_returning_its_bf16_values_upcast_is_explained_and_its_dtype_named():
    def upcast(q, k, v, attn_mask=None, is_causal=False, scale=None):
        return flash_attention(q, k, v, policy="fa2:bf16", block_k=32).to(q.dtype).float()

    doc = fingerprint(upcast, dtype="bf16", lengths=LENGTHS, heads=HEADS, d=D)
    assert doc["output_dtype"] == "float32" and doc["kv_block"] == 32, doc
    assert doc["bit_exact_fraction"] == 1.0 and doc["unexplained"] is None, doc


@pytest.mark.parametrize("what", ["int16", "bool", "float8", "complex", "meta"])
def test_outputs_that_are_not_float_values_are_one_line(what):
    def odd(q, k, v, attn_mask=None, is_causal=False, scale=None):
        out = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float())
        return {"int16": lambda: out.to(torch.int16), "bool": lambda: out > 0,
                "float8": lambda: out.to(torch.float8_e4m3fn), "complex": lambda: out.to(torch.complex64),
                "meta": lambda: torch.empty(out.shape, device="meta")}[what]()

    with pytest.raises(AttnumInputError, match="target output") as err:
        fingerprint(odd, dtype="bf16", lengths=LENGTHS, heads=HEADS, d=D)
    assert len(str(err.value).splitlines()) == 1 and "float16, bfloat16, float32 or float64" in str(err.value)


@pytest.mark.parametrize("threshold", [24.0, 60.0])
def test_a_data_dependent_kernel_is_not_reported_bit_exact(threshold):
    """fp32 scores while max|q| <= threshold, bf16 above. At 24 the fitting inputs (one call with queries
    four times larger) may already cross it: no single arithmetic explains them. At 60 only the fresh check's
    sixteen times larger queries do: the reproduction is then not called exact there. Before, the fresh
    check drew one magnitude family: "determined, bit-exact 1.0"."""
    def switching(q, k, v, attn_mask=None, is_causal=False, scale=None):
        policy = "fa2:bf16" if float(q.float().abs().max()) <= threshold else "fa2:bf16,scores=bf16"
        return flash_attention(q, k, v, policy=policy, block_k=32).to(q.dtype)

    doc = fingerprint(switching, dtype="bf16", lengths=LENGTHS, heads=8, d=D)
    assert doc["bit_exact_fraction"] != 1.0 and doc["unexplained"], doc
    if doc["policy"] is not None:
        bad = [r["inputs"] for r in doc["fresh_checks"] if r["bit_exact_fraction"] < 1.0]
        assert bad and doc["unexplained"].startswith("the replay differs on fresh inputs"), doc


@pytest.mark.parametrize("value", ["0", "-5"])
def test_timeout_is_validated_as_the_audit_validates_it(value, capsys):
    from attnum.cli import main

    assert main(["fingerprint", "flash:fa2:bf16", "--timeout", value, *SMALL]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "timeout=" in err[0] and "> 0" in err[0], err


def test_a_million_heads_is_refused_before_any_allocation(capsys):
    from attnum.cli import main

    # a budget any machine running the tests has (a --memory above what it has is refused on its own)
    assert main(["fingerprint", "flash:fa2:bf16", "--heads", "1000000", "--no-isolate", "--memory", "128M"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--heads=1000000" in err[0] and "memory budget" in err[0], err


def test_a_budget_refusal_and_a_skipped_replay_are_reported(monkeypatch):
    """A replay over the budget is not run: the candidate is skipped with a line, never allocated."""
    from attnum.audit.fingerprint import budget as mem
    from attnum.audit.fingerprint.probes import Call
    from attnum.audit.fingerprint.search import Candidate, Replays, Skipped
    from attnum.kernels.triton.sum_decode import SumDecode

    b = mem.Budget(64 * 2 ** 20)
    S = 4096
    q, k, v = torch.zeros(1, 16, 1, 64), torch.zeros(1, 16, S, 64), torch.zeros(1, 16, S, 64)
    call = Call(q, k, torch.zeros(1, 16, 1, 64), None, v, "fp32")
    ones = tuple((j, j + 1) for j in range(S))  # every key a split, each padded to a 512-key tile
    cand = Candidate({S: ones}, 512, "forward", "online", SumDecode("fp32"))
    assert mem.replay_bytes(cand.policy, ones, 512, S=S, heads=16, d=64) > 2 ** 30
    with pytest.raises(Skipped):
        Replays(b).run(cand, call)
    assert len(b.skipped) == 1 and "memory budget" in b.skipped[0] and "S=4096" in b.skipped[0]
    with pytest.raises(AttnumInputError, match="memory"):
        fingerprint(lambda q, k, v, **kw: q, dtype="bf16", lengths=(4096,), heads=64, d=64, memory="64M")


@pytest.mark.parametrize("exc", ["RuntimeError", "ValueError", "AssertionError", "MemoryError"])
@pytest.mark.parametrize("isolate", [True, False])
def test_a_target_that_raises_on_the_fitting_inputs_is_the_targets_failure(exc, isolate, tmp_path):
    (tmp_path / "t.py").write_text(
        "import torch, torch.nn.functional as F\n"
        "def attention(q, k, v, **kw):\n"
        f"    if bool(q.any()):\n        raise {exc}('the fitting inputs')\n"
        "    return F.scaled_dot_product_attention(q, k, v, **kw)\n")
    run = _cli(["fingerprint", f"{tmp_path / 't.py'}:attention", *SMALL, *([] if isolate else ["--no-isolate"])],
               tmp_path)
    lines = [ln for ln in run.stderr.strip().splitlines() if "attnum" in ln]
    assert run.returncode == 1, run.stderr[-2000:]
    assert "internal error" not in run.stderr and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert lines[-1].startswith("attnum fingerprint: the target crashed: " + exc) and "S=" in lines[-1], lines


def test_a_matmul_callable_that_raises_keeps_the_document(tmp_path):
    """One that raises on its trial tile is refused before any work (one line, exit 2: nothing to lose); one
    that raises on a later tile is reported in the document, which is kept (exit 1)."""
    (tmp_path / "mm.py").write_text(
        "import itertools\n_calls = itertools.count()\n"
        "def always(a, b, c):\n    raise RuntimeError('no tensor core here')\n"
        "def mm(a, b, c):\n    if next(_calls):  # the trial call passes, the crafted tiles after it raise\n"
        "        raise RuntimeError('no tensor core here')\n    return a.float() @ b.float() + c\n")
    early = _cli(["fingerprint", "flash:fa2:bf16", *SMALL, "--matmul", f"{tmp_path / 'mm.py'}:always", "--json",
                  "--no-isolate"], tmp_path)
    lines = early.stderr.strip().splitlines()
    assert early.returncode == 2 and early.stdout == "" and len(lines) == 1, early.stderr[-2000:]
    assert lines[0].startswith("attnum: error: --matmul") and "raised RuntimeError: no tensor core here" in lines[0]
    run = _cli(["fingerprint", "flash:fa2:bf16", *SMALL, "--matmul", f"{tmp_path / 'mm.py'}:mm", "--json",
                "--no-isolate"], tmp_path)
    assert run.returncode == 1, run.stderr[-2000:]
    doc = json.loads(run.stdout)
    assert doc["kv_block"] is not None and "raised RuntimeError: no tensor core here" in doc["mma"], doc["mma"]
    err = run.stderr.strip().splitlines()
    assert "internal error" not in run.stderr and err[-1].startswith("attnum fingerprint: --matmul"), err


@pytest.mark.slow  # interpreted Triton
def test_vllm_mla_decode_is_one_line(tmp_path):
    from _wheel_helpers import fetched_or_skip

    fetched_or_skip("vllm")
    run = _cli(["fingerprint", "vllm-mla-decode", *SMALL], tmp_path)
    assert run.returncode == 2, run.stderr[-2000:]
    lines = run.stderr.strip().splitlines()
    assert "internal error" not in run.stderr and "NotImplementedError" in lines[-1], lines
    assert lines[-1].startswith("attnum: error:") or "not allowed" in lines[-1], lines


CAP = 4 * 2 ** 30


def _capped(args, tmp_path, timeout=_paths.HANG_S):
    """``attnum ARGS`` in a child whose address space is capped at 4 GiB (resource.setrlimit): what it keeps
    resident cannot exceed it, and an allocation past it is a MemoryError there."""
    from _sweep_helpers import cli_env

    code = ("import resource, sys\n"
            f"resource.setrlimit(resource.RLIMIT_AS, ({CAP}, {CAP}))\n"
            "from attnum.cli import main\n"
            f"sys.exit(main({list(args)!r}))\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          env=cli_env(), cwd=tmp_path)


def test_thirty_thousand_keys_under_a_4_gib_cap_is_one_line_not_an_internal_error(tmp_path):
    run = _capped(["fingerprint", "flash:fa2:bf16", "--lengths", "30000", "--no-isolate"], tmp_path)
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and "internal error" not in run.stderr and "Traceback" not in run.stderr, lines[-3:]
    assert "--lengths=30000" in lines[-1] and "memory budget" in lines[-1], lines[-1]


@pytest.mark.slow  # a default-shape fingerprint of a tensor-core target: about a minute
def test_a_default_shape_tensor_core_fingerprint_fits_4_gib(tmp_path):
    """Issue 41: the search once replayed degenerate structures (512-key tiles of 1-key splits) into 18 GB;
    under a 4 GiB cap it ended in an internal MemoryError. Now it is taken within the cap, and says its peak."""
    run = _capped(["fingerprint", "flash:fa2:bf16,mma=sm80", "--dtype", "bf16", "--no-isolate", "--json"], tmp_path)
    assert run.returncode == 0 and "internal error" not in run.stderr, run.stderr[-2000:]
    doc = json.loads(run.stdout)
    assert doc["policy"] == "fa2:bf16,mma=sm80" and doc["bit_exact_fraction"] == 1.0, doc
    assert 0 < doc["peak_rss_mib"] < CAP / 2 ** 20 and doc["memory_budget_mib"] < CAP / 2 ** 20, doc
