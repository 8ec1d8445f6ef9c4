"""SageAttention 1.0.6's Triton path (``sage1-triton``) audited on CPU against attnum's ``sage1`` emulation.

The wheel (20 kB, pure Python) is fetched once into ~/.cache/attnum (``attnum kernels fetch sageattention``);
a failed download skips, saying why. The kernel runs in a child process (TRITON_INTERPRET=1 must precede
triton's import) on a few small cases: tests/_sage_triton_check.py."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import _paths
import pytest
import torch
from _wheel_helpers import fetched_or_skip

from attnum.audit import emulated
from attnum.errors import AttnumInputError
from attnum.numerics.formats import get_format

HERE = _paths.TESTS  # the helper scripts


@pytest.fixture(scope="module")
def fetched():
    fetched_or_skip("sageattention")


def run_check(numerics: str) -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join([str(HERE.parent / "src"), str(HERE), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, str(HERE / "_sage_triton_check.py"), numerics], capture_output=True,
                         text=True, timeout=_paths.HANG_S, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.splitlines()[-1])


@pytest.mark.parametrize("numerics", ["faithful", "raw"])
def test_sage1_triton_equals_its_emulation_except_past_a_ragged_key_tile_and_the_k_scale_over_read(fetched, numerics):
    got = run_check(numerics)
    assert got["declared"] == {"causal_alignment": "top_left", "empty_rows": "zeros", "emulation": "sage1"}
    for dt in ("fp16", "bf16"):
        rows = got[dt]
        for label in ("N=S=128", "GQA H=4 G=2 scale=0.3"):  # within 2 ulps of sage1
            # equal to sage1; "note" where sage1 itself misses the dtype's rule (docs/audit.md, "declared arithmetic")
            assert rows[label][0] == "pass" or (rows[label][0] == "note" and "only against the declared arithmetic"
                                                in rows[label][4]), (dt, label, rows[label])
        # N = S = 130, causal: the diagonal stage walks the last query block's 64-key steps whatever kv_len is, and
        # its k_scale load is unmasked (attn_qk_int8_per_block_causal.py): with S mod 128 in 1..64 the step past
        # the last key block reads K_scale one element past its end, caught by the address check on every run
        status, *_, note = rows["N=S=130 causal"]
        assert status == "out of bounds" and "past the end of K_scale by 1 element" in note, (dt, rows["N=S=130 causal"])
        # S = 97: the non-causal kernel scores the 31 keys past S (loaded as 0) as 0: far from sage1 ...
        status, ratio, *_ = rows["N=16 S=97"]
        assert status == "fail" and ratio > 10, rows["N=16 S=97"]
        # ... and what those phantom keys predict (in float64, relative to its max |O|): up to the kernel's
        # own roundings -- P to fp16 and the fp16 accumulator (a relative eps/2 each), the output (half an
        # ulp; raw truncates bf16 stores: a whole one) -- 4 ulps at the output's scale at most
        tol = 4 * get_format(dt).eps / 2
        resid = rows["S=97 vs phantom keys"]
        assert resid <= tol and resid < rows["N=16 S=97"][2] / 10, (resid, tol, rows["N=16 S=97"])
    # the INT8 kernel misses fp16's bounds (the dtype's rule) on a plain case: why it is judged against sage1
    assert got["fp16"]["N=S=128 fp16 bounds"][0] == "fail"


def test_emulation_judge_rule():
    fmt = get_format("fp16")
    e = torch.linspace(-0.75, 0.75, 64, dtype=torch.float64).reshape(1, 1, 8, 8)  # max |e| in [0.5, 1)
    ulp1 = 2.0 ** -11  # fp16 ulp at [0.5, 1)
    ok = emulated.judge(e + ulp1, e, e, fmt=fmt, ulps=2, emulation="sage1")
    assert ok.status == "pass" and ok.bound == 2 * ulp1 and ok.ratio == 0.5
    bad = emulated.judge(e + 3 * ulp1, e, e, fmt=fmt, ulps=2, emulation="sage1")
    assert bad.status == "fail" and bad.ratio == 1.5
    nan = e.clone()
    nan[0, 0, 0, 0] = math.nan
    assert emulated.judge(nan, e, e, fmt=fmt, ulps=2, emulation="sage1").status == "fail"
    assert emulated.judge(e, nan, e, fmt=fmt, ulps=2, emulation="sage1").status == "fail"
    assert emulated.judge(nan, nan, e, fmt=fmt, ulps=2, emulation="sage1").status == "pass"  # NaN where it is NaN


def test_emulation_flag_is_checked(tmp_path):
    from attnum.audit.config import AuditConfig

    assert AuditConfig(target="torch-sdpa", emulation="sage1").emulation == "sage1"
    assert AuditConfig(target="torch-sdpa", emulation="none").emulation == ""  # turns a declared one off
    with pytest.raises(AttnumInputError, match="emulation='sage9' is not allowed"):
        AuditConfig(target="torch-sdpa", emulation="sage9")
    run = subprocess.run([sys.executable, "-m", "attnum", "audit", "torch-sdpa", "--emulation", "sage9"],
                         capture_output=True, text=True, timeout=_paths.HANG_S, cwd=tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "emulation" in run.stderr


def test_the_emulation_judges_a_plain_callable():
    """An emulation-declared callable equal to the emulation passes every case of a probe; one that is
    not (the fp16 flash emulation) fails, though it would pass the dtype's bounds."""
    from attnum.audit.config import AuditConfig
    from attnum.audit.runner import run_audit
    from attnum.kernels.reference import family

    sage = family("flash", "sage1:fp16")
    sage.attnum_emulation = "sage1"
    fa2 = family("flash", "fa2:fp16")
    cfg = AuditConfig(dtypes="fp16", probes="exp-overflow", isolate=False)
    same = run_audit(cfg, target=sage).results[0]  # pass, or note where sage1 itself misses fp16's rule
    assert same.passed and same.status in ("pass", "note") and "declared arithmetic sage1" in same.note, same.note
    row = run_audit(AuditConfig(dtypes="fp16", probes="exp-overflow", isolate=False, emulation="sage1"),
                    target=fa2).results[0]
    assert row.status == "fail", row.note
    assert run_audit(cfg, target=fa2).results[0].status == "pass"
