"""The kernel server (issue 19): user code only computes; the parent owns every judgement.

Attacks from inside the user's process (forged frames on the channel, a pickle that would run code
in the parent, monkeypatched verdict code) and every way a diverge attention can die, hang or tamper
with the training. Also the wire format's refusals, which are what makes a forged frame harmless.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import _paths
import pytest
import torch
import torch.nn.functional as F
from _forgery import PATCH_AUDIT, PATCH_SPEC, ZEROS, forge
from _sweep_helpers import cli

from attnum.sandbox.server import KernelServer, TargetGone
from attnum.sandbox.wire import HEAD, Malformed, decode, encode

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the process tree is read from /proc")]


# ---- the wire: what the parent accepts from the child ------------------------------------------------

def _split(frame: bytes) -> tuple[bytes, bytes]:
    n_head, n_payload = HEAD.unpack_from(frame)
    return frame[HEAD.size:HEAD.size + n_head], frame[HEAD.size + n_head:]


def test_values_round_trip_bit_for_bit():
    g = torch.Generator().manual_seed(3)
    msg = {"a": [torch.randn(2, 3, dtype=d) for d in (torch.float64, torch.float32, torch.bfloat16, torch.float16)],
           "empty": torch.empty(0, 4), "ints": torch.arange(5), "t": (1, 2.5, float("nan"), None, True),
           "flags": torch.tensor([True, False]), "gen": g}
    out = decode(*_split(encode(msg)))
    for x, y in zip(msg["a"], out["a"], strict=True):
        assert x.dtype == y.dtype and torch.equal(x.view(torch.uint8), y.view(torch.uint8))
    assert out["empty"].shape == (0, 4) and torch.equal(out["ints"], msg["ints"])
    assert out["t"][:2] == (1, 2.5) and out["t"][2] != out["t"][2] and out["t"][3:] == (None, True)
    assert torch.equal(out["gen"].get_state(), g.get_state())


@pytest.mark.parametrize("head, payload, why", [
    (b'{"r": {"$t": ["complex64", [2], "cpu"]}}', b"x" * 16, "tensor marker"),
    (b'{"r": {"$t": ["float32", [4], "cpu"]}}', b"x" * 8, "shorter"),
    (b'{"r": {"$t": ["float32", [1], "cpu"]}}', b"x" * 8, "payload of 8 bytes"),
    (b'{"r": {"$t": ["float32", [-1], "cpu"]}}', b"", "tensor marker"),
    (b'{"r": {"$t": ["float32", [1099511627776], "cpu"]}}', b"", "tensor marker"),
    (b'{"r": {"$eval": "os.system"}}', b"", "unknown marker"),
    (b'{"r": NaN}', b"", "not JSON"),
    (b"\x80\x04K\x01.", b"", "not JSON"),
    (b"[1, 2]", b"", "not an object"),
    (b'{"r": ' + b"[" * 5000 + b"]" * 5000 + b"}", b"", "RecursionError|too deep"),
])
def test_malformed_frames_are_refused(head, payload, why):
    with pytest.raises(Malformed, match=why):
        decode(head, payload)


def test_a_reply_to_another_call_or_of_another_kind_is_a_crash(tmp_path):
    (tmp_path / "k.py").write_text(
        "import os, json, struct\nimport torch.nn.functional as F\n"
        "def attention(q, k, v, **kw):\n"
        "    head = json.dumps({'op': 'ok', 'id': 99, 'result': None}).encode()\n"
        "    for fd in range(3, 64):\n"
        "        try:\n            os.write(fd, struct.pack('!IQ', len(head), 0) + head)\n"
        "        except OSError:\n            pass\n"
        "    return F.scaled_dot_product_attention(q, k, v, **kw)\n")
    q = torch.randn(1, 1, 4, 8, requires_grad=True)
    with KernelServer("attention", f"{tmp_path / 'k.py'}:attention", timeout=30) as s:
        s.start()
        from attnum.sandbox.remote import RemoteTarget

        with pytest.raises(TargetGone, match="crashed: answered call 1"):
            RemoteTarget(s)(q, q, q)


def test_remote_forward_and_backward_equal_the_same_function_here(tmp_path):
    from attnum.sandbox.remote import RemoteTarget

    (tmp_path / "k.py").write_text("import torch.nn.functional as F\n"
                                   "def attention(q, k, v, **kw):\n    return F.scaled_dot_product_attention(q, k, v, **kw)\n")
    xs = [torch.randn(2, 2, 5, 8, dtype=torch.float32, requires_grad=True) for _ in range(3)]
    w = torch.randn(2, 2, 5, 8)
    with KernelServer("attention", f"{tmp_path / 'k.py'}:attention", timeout=30) as s:
        s.start()
        o = RemoteTarget(s)(*xs, is_causal=True)
        (o * w).sum().backward()
    remote = [x.grad.clone() for x in xs]
    for x in xs:
        x.grad = None
    o_here = F.scaled_dot_product_attention(*xs, is_causal=True)
    (o_here * w).sum().backward()
    assert torch.equal(o.detach(), o_here.detach())
    assert all(torch.equal(a, x.grad) for a, x in zip(remote, xs, strict=True))


# ---- audit and spec-audit: forged frames and patched verdicts ----------------------------------------

def test_audit_forged_frames_and_patched_verdicts_are_the_wrong_kernel_they_are(tmp_path, capsys):
    """A kernel returning zeros that forges frames (one a pickle that would create PWNED in the
    parent) and replaces attnum's verdict code in its own process: it fails, and nothing ran here."""
    (tmp_path / "k.py").write_text("import torch\n" + PATCH_AUDIT + forge(str(tmp_path / "PWNED"))
                                   + "def attention(q, k, v, **kw):\n    forge_frames()\n" + ZEROS)
    code = cli("audit", f"{tmp_path / 'k.py'}:attention", "--dtype", "bf16", "--probes", "scale-argument", "--json")
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and not doc["passed"] and doc["probes"][0]["verdict"] in ("crashed", "fail"), doc["probes"]
    assert not (tmp_path / "PWNED").exists()
    (tmp_path / "z.py").write_text("import torch\n" + PATCH_AUDIT + "def attention(q, k, v, **kw):\n" + ZEROS)
    code = cli("audit", f"{tmp_path / 'z.py'}:attention", "--dtype", "bf16", "--probes", "scale-argument", "--json")
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and doc["probes"][0]["verdict"] == "fail", doc["probes"]


def test_spec_audit_forged_frames_and_a_patched_run_case_fail(tmp_path, capsys):
    (tmp_path / "s.py").write_text("import torch\n" + PATCH_SPEC + forge(str(tmp_path / "PWNED"))
                                   + "def sampler(p, q, d, generator=None):\n    forge_frames()\n"
                                   "    return torch.zeros(p.shape[0], p.shape[1], dtype=torch.long)\n")
    code = cli("spec-audit", f"{tmp_path / 's.py'}:sampler", "--cases", "dirichlet", "--samples", "2000", "--json")
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and doc["verdict"] == "fail" and not (tmp_path / "PWNED").exists(), doc


def test_the_child_cannot_write_into_the_auditors_stdout_through_proc(tmp_path):
    """/proc/PPID/fd/1 is closed to the child (the parent is not dumpable while a server runs). Root
    holds CAP_SYS_PTRACE, which opens any process's fds: the audit runs without it, as a user would."""
    import os
    import shutil
    import subprocess

    from _sweep_helpers import cli_env

    (tmp_path / "k.py").write_text("import os, torch\ndef attention(q, k, v, **kw):\n    try:\n"
                                   "        open(f'/proc/{os.getppid()}/fd/1', 'w').write('FORGED')\n"
                                   "    except OSError:\n        pass\n" + ZEROS)
    drop = ["setpriv", "--bounding-set=-sys_ptrace", "--inh-caps=-sys_ptrace"] \
        if os.geteuid() == 0 and shutil.which("setpriv") else []
    p = subprocess.run([*drop, sys.executable, "-m", "attnum", "audit", f"{tmp_path / 'k.py'}:attention", "--dtype",
                        "bf16", "--probes", "scale-argument", "--json"], capture_output=True, text=True,
                       env=cli_env(), timeout=_paths.HANG_S)
    assert p.returncode == 1 and "FORGED" not in p.stdout and not json.loads(p.stdout)["passed"], p.stdout[-300:]


# ---- diverge: the training stays here ----------------------------------------------------------------

def _attention(tmp_path: Path, call: str) -> str:
    (tmp_path / "att.py").write_text("import os, time, gc, ctypes\nimport torch\nimport torch.nn.functional as F\n"
                                     f"def attention(q, k, v, **kw):\n    {call}\n"
                                     "    return F.scaled_dot_product_attention(q, k, v, **kw)\n")
    return f"{tmp_path / 'att.py'}:attention"


def _run(attention: str, tmp_path: Path, name: str, **kw):
    from attnum.studies.training.diverge import workload_config
    from attnum.studies.training.loop import RunConfig, train

    cfg = RunConfig(name=name, workload=workload_config("digits"), steps=2, ckpt_every=2, attention=attention)
    return train(cfg, tmp_path / "runs", **kw)


def test_diverge_with_a_segfaulting_attention_exits_1_in_one_line(tmp_path, capsys):
    code = cli("diverge", "--steps", "2", "--ckpt-every", "2", "--seeds", "0,1", "--out", tmp_path / "d",
               "--attention", _attention(tmp_path, "ctypes.string_at(0)"))
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("attnum:")]
    assert code == 1 and len(err) == 1 and "crashed: killed by SIGSEGV" in err[0] and "flash-s0" in err[0], err


def test_a_hanging_attention_with_a_setsid_grandchild_is_timed_out_and_killed_whole(tmp_path):
    from attnum.studies.training.loop import AttentionFailed

    # The grandchild writes its pid before it leaves the session and a marker after; the attention waits for
    # the marker before it hangs, so the timeout always meets a grandchild in a session of its own (under
    # load the kill used to land before the grandchild had run at all: nothing to test, a missing file).
    pidfile, escaped = tmp_path / "gc.pid", tmp_path / "gc.escaped"
    call = (f"os.fork() == 0 and (open({str(pidfile)!r}, 'w').write(str(os.getpid())), os.setsid(), "
            f"open({str(escaped)!r}, 'w').close(), time.sleep(600)); "
            f"[time.sleep(0.01) for _ in iter(lambda: os.path.exists({str(escaped)!r}), True)]; time.sleep(600)")
    with pytest.raises(AttentionFailed, match="timed out: no answer within 20 s"):  # 20 s: the fork, under load
        _run(_attention(tmp_path, call), tmp_path, "hang", timeout=20.0)
    assert escaped.exists(), "the grandchild never left its session within the timeout: the test proved nothing"
    pid = int(pidfile.read_text())
    stat = Path(f"/proc/{pid}/stat")
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_an_attention_that_exits_0_fails_the_run(tmp_path):
    from attnum.studies.training.loop import AttentionFailed

    with pytest.raises(AttentionFailed, match="exited: the process exited with code 0"):
        _run(_attention(tmp_path, "os._exit(0)"), tmp_path, "exit")


def test_an_attention_that_tampers_with_the_training_trains_exactly_as_sdpa_here(tmp_path):
    """Zeroing every Parameter it can find and stubbing AdamW.step reaches only its own process: the
    run is bit for bit the run of torch's SDPA in this process (forward and backward through the server)."""
    tamper = ("torch.optim.AdamW.step = lambda self, *a, **k: None\n"
              "    [p.data.zero_() for p in gc.get_objects() if isinstance(p, torch.nn.Parameter)]")
    remote = _run(_attention(tmp_path, tamper), tmp_path, "remote")
    here = _run("torch-sdpa", tmp_path, "here")
    assert remote.losses == here.losses
    assert all(torch.equal(remote.final_state[k], here.final_state[k]) for k in here.final_state)
