"""``mma=ARCH`` in policies, the Triton model's ``--arch``: policy parsing, flash against a plain loop of
:func:`attnum.numerics.mma.dense.matmul` per tile (bit for bit), the self-test's tensor-core cases, the CLI."""

import json
import math
import os
import subprocess
import sys

import _paths
import pytest
import torch

from attnum.errors import AttnumInputError
from attnum.numerics.policy import parse_policy


def test_policy_parses_mma_and_its_aliases():
    p = parse_policy("fa2:bf16,mma=sm90")
    assert p.mma == "sm90" and p.matmul_mode == "mma" and p.name == "fa2:bf16,mma=sm90"
    assert p.carrier == torch.float32 and p.describe()["mma"] == "sm90"
    assert parse_policy("fa2:bf16,mma=hopper").mma == "sm90"
    assert parse_policy("fa2:e4m3fn,mma=ada").mma == "sm89"
    assert parse_policy("fa2:bf16,mma=none").mma is None
    assert parse_policy("fa2:bf16").mma is None and "mma" not in parse_policy("fa2:bf16").describe()


@pytest.mark.parametrize("spec,word", [("fa2:bf16,mma=sm99", "mma"), ("fa2:bf16,mma=7", "mma"),
                                       ("fa2:fp64,mma=sm90", "inputs"),
                                       # an operand type the architecture has no instruction for (issue 42)
                                       ("fa2:bf16,mma=sm70", "sm70"), ("fa2:e4m3fn,mma=ampere", "sm80"),
                                       ("fa2:fp32,mma=turing", "tf32")])
def test_bad_mma_is_one_input_error_naming_it(spec, word):
    with pytest.raises(AttnumInputError, match=word) as err:
        parse_policy(spec)
    assert len(str(err.value).splitlines()) == 1


def _reference_fa2(q, k, v, *, dt, arch, block_k, chain=True):
    """FlashAttention-2's forward (fa2 policy: fp32 statistics, P in ``dt``, O the P V MMA's accumulator)
    as a plain loop, every matmul one call of mma.matmul on the tile. ``chain=False``: each tile's P V
    from a zero accumulator, then added to O in fp32 (``mma_chain=off``)."""
    from attnum.numerics.mma import dense as mma

    d = q.shape[-1]
    scale = 1.0 / math.sqrt(d)
    q8, k8, v8 = q.to(dt), k.to(dt), v.to(dt)
    B, H, N, _ = q.shape
    m = torch.full((B, H, N, 1), -math.inf)
    l = torch.zeros(B, H, N, 1)
    acc = torch.zeros(B, H, N, v.shape[-1])
    for j0 in range(0, k.shape[-2], block_k):
        s = mma.matmul(q8, k8[:, :, j0:j0 + block_k].transpose(-1, -2), arch=arch) * scale
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        p = torch.exp(s - m_new)
        alpha = torch.exp(m - m_new)
        l = alpha * l + p.sum(-1, keepdim=True)
        if chain:
            acc = mma.matmul(p.to(dt), v8[:, :, j0:j0 + block_k], acc * alpha, arch=arch)
        else:
            acc = acc * alpha + mma.matmul(p.to(dt), v8[:, :, j0:j0 + block_k], arch=arch)
        m = m_new
    return acc * (1.0 / l)


@pytest.mark.parametrize("fmt,dt,arch", [("bf16", torch.bfloat16, "sm90"), ("fp16", torch.float16, "sm80"),
                                         ("e4m3fn", torch.float8_e4m3fn, "sm90")])
@pytest.mark.parametrize("jit", ["1", "0"])
def test_flash_with_mma_is_a_loop_of_mma_matmul_bit_for_bit(fmt, dt, arch, jit, monkeypatch):
    from attnum.attention.flash import flash_attention
    from attnum.numerics.formats import get_format
    from attnum.numerics.rounding import round_to

    monkeypatch.setenv("ATTNUM_JIT", jit)
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 32, 16, generator=g, dtype=torch.float64) for _ in range(3))
    q, k, v = (t.to(dt).double() for t in (q, k, v))  # on the grid: the preamble does not round
    got = flash_attention(q, k, v, policy=f"fa2:{fmt},mma={arch}", block_q=32, block_k=16)
    out = get_format(fmt) if get_format(fmt).fits_in(get_format("fp32")) else get_format("fp32")
    want = round_to(_reference_fa2(q, k, v, dt=dt, arch=arch, block_k=16), out)
    assert torch.equal(got.float(), want.float())
    # and the exact-chunk model gives other bits somewhere in the unrounded accumulator's image
    plain = flash_attention(q, k, v, policy=f"fa2:{fmt}", block_q=32, block_k=16)
    assert plain.shape == got.shape


@pytest.mark.parametrize("fmt,dt,arch", [("bf16", torch.bfloat16, "sm80"), ("fp16", torch.float16, "sm90")])
@pytest.mark.parametrize("jit", ["1", "0"])
def test_mma_chain_off_is_each_tile_from_zero_then_added_bit_for_bit(fmt, dt, arch, jit, monkeypatch):
    """``mma_chain=off``: the tile's P V product from a zero accumulator, added to O in fp32: the plain
    loop's bits, and on a swamping column not the chained ones: e at key 0, +M and -M in one later
    tile (P = 1 everywhere) survives only when the tile's product is formed apart (an exact 0 added)."""
    from attnum.attention.flash import flash_attention
    from attnum.numerics.rounding import round_to

    monkeypatch.setenv("ATTNUM_JIT", jit)
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 2, 32, 16, generator=g, dtype=torch.float64).to(dt).double() for _ in range(3))
    got = flash_attention(q, k, v, policy=f"fa2:{fmt},mma={arch},mma_chain=off", block_q=32, block_k=16)
    want = round_to(_reference_fa2(q, k, v, dt=dt, arch=arch, block_k=16, chain=False), fmt)
    assert torch.equal(got.float(), want.float())
    z = torch.zeros(1, 1, 1, 16, dtype=dt)
    kz = torch.zeros(1, 1, 64, 16, dtype=dt)
    vs = torch.zeros(1, 1, 64, 16, dtype=torch.float64)
    vs[0, 0, 0, 0], vs[0, 0, 32, 0], vs[0, 0, 33, 0] = 2.0 ** -11, 2.0 ** 15, -2.0 ** 15  # e, +M, -M
    vs = vs.to(dt)
    apart = flash_attention(z, kz, vs, policy=f"fa2:{fmt},mma={arch},mma_chain=off", block_k=16)
    chained = flash_attention(z, kz, vs, policy=f"fa2:{fmt},mma={arch}", block_k=16)
    assert float(apart[0, 0, 0, 0]) == float(round_to(torch.tensor(2.0 ** -11 / 64), fmt))  # e / S, exactly
    assert float(chained[0, 0, 0, 0]) == 0.0  # e met M in the MMA's truncating adder


@pytest.mark.parametrize("jit", ["1", "0"])
def test_acc_update_once_rounds_the_fp32_update_once(jit, monkeypatch):
    """``acc_update=once`` with ``acc=bf16``: O kept in bf16, each update O alpha + P V formed in fp32 and
    rounded to bf16 once (a plain loop); the three-rounding ``acc=bf16`` gives other bits; fa1 refuses it."""
    from attnum.attention.flash import flash_attention
    from attnum.numerics.rounding import round_to

    monkeypatch.setenv("ATTNUM_JIT", jit)
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 2, 8, 16, generator=g, dtype=torch.float64).to(torch.bfloat16).double() for _ in range(3))
    v = v + 3.0  # an accumulator far from 0: its bf16 rounding shows
    S, bk = 96, 32
    k = torch.randn(1, 2, S, 16, generator=g, dtype=torch.float64).to(torch.bfloat16).double()
    v = (torch.randn(1, 2, S, 16, generator=g, dtype=torch.float64) + 3.0).to(torch.bfloat16).double()
    got = flash_attention(q, k, v, policy="fa2:bf16,acc=bf16,acc_update=once", block_k=bk)
    f32 = torch.float32
    qf, kf, vf = q.to(f32), k.to(f32), v.to(f32)
    m = torch.full((1, 2, 8, 1), -math.inf)
    l = torch.zeros(1, 2, 8, 1)
    acc = torch.zeros(1, 2, 8, 16)
    for j0 in range(0, S, bk):
        s = (qf @ kf[:, :, j0:j0 + bk].transpose(-1, -2)) * 0.25
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        p = torch.exp(s - m_new)
        alpha = torch.exp(m - m_new)
        l = alpha * l + p.sum(-1, keepdim=True)
        pv = round_to(p, "bf16").to(f32) @ vf[:, :, j0:j0 + bk]
        acc = round_to(acc * alpha + pv, "bf16").to(f32)  # fp32 ops, then one rounding to bf16
        m = m_new
    want = round_to(acc * round_to(1.0 / l, "fp32").to(f32), "bf16")
    assert torch.equal(got.float(), want.float())
    three = flash_attention(q, k, v, policy="fa2:bf16,acc=bf16", block_k=bk)
    assert not torch.equal(three, got)
    with pytest.raises(AttnumInputError, match="acc_update"):
        flash_attention(q, k, v, policy="fa2:bf16,acc_update=once", variant="fa1")


def _reference_fa2_backward(q, k, v, do, lse, o, *, dt, arch, block_k):
    """FlashAttention-2's backward (fa2 policy: fp32 statistics and accumulators, P and dS in ``dt``) as a
    plain loop over KV tiles, every product one call of mma.matmul. Returns dq, dk, dv in float32."""
    from attnum.numerics.mma import dense as mma

    scale = 1.0 / math.sqrt(q.shape[-1])
    q8, k8, v8, do8 = q.to(dt), k.to(dt), v.to(dt), do.to(dt)
    D = (do.float() * o.float()).sum(-1, keepdim=True)
    dq = torch.zeros(q.shape, dtype=torch.float32)
    dks, dvs = [], []
    for j0 in range(0, k.shape[-2], block_k):
        kj, vj = k8[:, :, j0:j0 + block_k], v8[:, :, j0:j0 + block_k]
        s = mma.matmul(q8, kj.transpose(-1, -2), arch=arch) * scale
        p = torch.exp(s - lse.float()[..., None])
        dvs.append(mma.matmul(p.to(dt).transpose(-1, -2), do8, arch=arch))
        dp = mma.matmul(do8, vj.transpose(-1, -2), arch=arch)
        ds = (p * (dp - D)).to(dt)
        dq = dq + mma.matmul(ds, kj, arch=arch)
        dks.append(mma.matmul(ds.transpose(-1, -2), q8, arch=arch))
    return dq * scale, torch.cat(dks, -2) * scale, torch.cat(dvs, -2)


@pytest.mark.parametrize("fmt,dt,arch", [("bf16", torch.bfloat16, "sm90"), ("fp16", torch.float16, "sm80")])
@pytest.mark.parametrize("jit", ["1", "0"])
def test_backward_with_mma_is_a_loop_of_mma_matmul_bit_for_bit(fmt, dt, arch, jit, monkeypatch):
    """flash_backward under ``mma=ARCH`` (one query block, three KV tiles) against FA2's Algorithm 2 written
    as a loop of mma.matmul calls: dq, dk, dv bit for bit; and the exact-chunk model differs in some bit."""
    from attnum.attention.flash_backward import flash_backward
    from attnum.attention.golden import golden_attention
    from attnum.numerics.formats import get_format
    from attnum.numerics.rounding import round_to

    monkeypatch.setenv("ATTNUM_JIT", jit)
    g = torch.Generator().manual_seed(5)
    q, k, v, do = (torch.randn(1, 2, 32 if i != 1 and i != 2 else 48, 16, generator=g, dtype=torch.float64)
                   for i in range(4))
    q, k, v, do = (t.to(dt).double() for t in (q, k, v, do))  # on the grid: the preamble does not round
    scale = 1.0 / math.sqrt(16)
    s = (q @ k.transpose(-1, -2)) * scale
    lse = torch.logsumexp(s, -1).float().double()  # an fp32 LSE, as the forward keeps it
    o = golden_attention(q, k, v).to(dt).double()
    # gradients kept in fp32 (out=fp32): a bf16 / fp16 output rounding would hide what the products did
    got = flash_backward(q, k, v, o, lse, do, scale=scale, Bc=16, policy=f"fa2:{fmt},out=fp32,mma={arch}")
    want = _reference_fa2_backward(q, k, v, do, lse, o, dt=dt, arch=arch, block_k=16)
    for name, a, b in zip(("dq", "dk", "dv"), got, want, strict=True):
        assert torch.equal(a.float(), round_to(b.double(), get_format("fp32")).float()), name
    plain = flash_backward(q, k, v, o, lse, do, scale=scale, Bc=16, policy=f"fa2:{fmt},out=fp32")
    assert any(not torch.equal(a, b) for a, b in zip(got, plain, strict=True))  # the model did something


def test_autograd_through_flash_attention_under_mma_is_close_to_the_exact_model():
    """End to end (previously refused): gradients under mma=sm90 and without it differ by bits, not
    magnitudes, at bf16 inputs (both within a few bf16 ulps of each other)."""
    from attnum.attention.flash import flash_attention

    g = torch.Generator().manual_seed(7)
    xs = [torch.randn(1, 2, 64, 32, generator=g, dtype=torch.float64).bfloat16().double() for _ in range(3)]
    grads = []
    for pol in ("fa2:bf16,mma=sm90", "fa2:bf16"):
        ts = [x.clone().requires_grad_(True) for x in xs]
        flash_attention(*ts, policy=pol, block_k=16).sum().backward()
        grads.append([t.grad for t in ts])
    for a, b in zip(*grads, strict=True):
        assert torch.isfinite(a).all() and (a - b).abs().max() <= 8 * 2.0 ** -8 * b.abs().max()


def _selftest(arch):
    code = ("import json; from attnum.kernels import triton_selftest as s\n"
            f"print(json.dumps([(c.name, c.ok, c.detail) for c in s.run({arch!r})]))")
    env = {"TRITON_INTERPRET": "1", "PATH": "/usr/bin:/bin", **{k: v for k, v in os.environ.items()
                                                                 if k in ("PYTHONPATH", "HOME", "VIRTUAL_ENV")}}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=_paths.HANG_S, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    return {n: (ok, why) for n, ok, why in json.loads(run.stdout.splitlines()[-1])}


@pytest.mark.parametrize("arch", ["sm90", "sm80"])
def test_self_test_tensor_core_cases_pass_and_differ_from_the_old_model(arch):
    pytest.importorskip("triton")
    checks = _selftest(arch)
    assert all(ok for ok, _ in checks.values()), {n: w for n, (ok, w) in checks.items() if not ok}
    tc = [n for n in checks if "tensor-core" in n or "max_num_imprecise_acc" in n]
    assert len(tc) == 3, list(checks)


def test_tensor_core_dot_partial_accumulation_on_hopper_fp8():
    """sm90 e4m3 wgmma: by default (2**30) the whole K stays in the 13-bit accumulator and a long positive
    sum loses; max_num_imprecise_acc=32 promotes after every instruction and stays within fp32 rounding."""
    from attnum.kernels.triton import model

    a = torch.full((64, 4096), 1.0).to(torch.float8_e4m3fn)
    b = torch.full((4096, 8), 1.125).to(torch.float8_e4m3fn)
    zero = torch.zeros(64, 8, dtype=torch.float64)
    f8 = (torch.float8_e4m3fn,) * 2
    exact = 4096 * 1.125
    never = model.dot(a.double(), b.double(), zero, operand_bits=8, arch="sm90", dtypes=f8)
    every = model.dot(a.double(), b.double(), zero, operand_bits=8, arch="sm90", dtypes=f8, max_imprecise=32)
    assert float(every[0, 0]) == exact
    assert float(never[0, 0]) < exact  # truncation toward zero, one-sided
    with pytest.raises(NotImplementedError, match="mma.sync"):
        model.dot(a[:16].double(), b.double(), zero[:16], operand_bits=8, arch="sm90", dtypes=f8)


def test_audit_bad_arch_exits_2_with_one_line(capsys):
    from attnum.cli import main

    assert main(["audit", "torch-sdpa", "--arch", "sm99", "--dtype", "fp32", "--probes", "random"]) == 2
    err = capsys.readouterr().err
    assert "arch" in err and "sm99" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_arch_on_a_target_attnum_does_not_interpret_exits_2_with_one_line(capsys):
    """--arch changes only interpreted Triton kernels: given for torch's own kernel it is refused, not ignored."""
    from attnum.cli import main

    assert main(["audit", "torch-sdpa", "--arch", "sm80", "--dtype", "fp32", "--probes", "odd-lengths"]) == 2
    err = capsys.readouterr().err
    assert "--arch=sm80" in err and "torch-sdpa" in err and len(err.strip().splitlines()) == 1
    assert main(["fingerprint", "torch-sdpa-math", "--arch", "sm80"]) == 2
    assert "--arch=sm80" in capsys.readouterr().err


def test_audit_label_names_the_arch():
    from attnum.audit.config import AuditConfig
    from attnum.kernels.triton import interp as triton_interp

    assert AuditConfig(target="torch-sdpa", arch="hopper").arch == "sm90"
    assert triton_interp.label("faithful", "sm80").startswith("triton-interp:nvidia-sm80")


def test_compare_config_mma_axis_overrides_both_policies_and_keeps_old_keys():
    from attnum.studies.paper.compare import CompareConfig
    from attnum.studies.paper.point import Point

    cfg = CompareConfig(policy="fa2", format="bf16", seq_len=64, mma="hopper")
    flash, base = cfg.policies()
    assert flash.mma == base.mma == "sm90"
    assert CompareConfig(policy="fa2:bf16,mma=sm80", seq_len=64, mma="none").policies()[0].mma is None
    with pytest.raises(AttnumInputError, match="mma"):
        CompareConfig(policy="fa2", seq_len=64, mma="sm99")
    plain = Point(kind="compare", policy="fa2", format="bf16", seq_len=64)
    assert "mma" not in plain.identity() and Point(kind="compare", policy="fa2", format="bf16", seq_len=64,
                                                   mma="sm90").key != plain.key


def test_fa3_fp8_on_hopper_loses_one_sidedly_with_one_v_scale():
    """FA3's FP8 with one V scale (tensor granularity) under sm90: O is the wgmma accumulator over every
    tile, so with positive V the 13-bit truncation pulls O down; exact products and fp32 sums do not."""
    from attnum.attention.golden import golden_attention
    from attnum.attention.lowbit.quant import fp8_attention

    g = torch.Generator().manual_seed(5)
    q = torch.randn(1, 1, 16, 64, generator=g, dtype=torch.float64) * 0.1  # flat softmax: many keys count
    k = torch.randn(1, 1, 2048, 64, generator=g, dtype=torch.float64)
    v = torch.rand(1, 1, 2048, 64, generator=g, dtype=torch.float64) + 1.0
    gold = golden_attention(q, k, v)
    kw = dict(granularity="tensor", incoherent=False, out="fp32")
    hopper = fp8_attention(q, k, v, mma="sm90", **kw).double()
    exact = fp8_attention(q, k, v, **kw).double()
    loss_h, loss_e = ((hopper - gold) / gold).mean().item(), ((exact - gold) / gold).mean().item()
    assert loss_h < 0 and abs(loss_h) > 10 * abs(loss_e), (loss_h, loss_e)


def test_fp8_table_config_takes_mma():
    from attnum.studies.serving.fp8_table import FP8TableConfig

    assert FP8TableConfig(mma="hopper").mma == "sm90" and FP8TableConfig().mma is None
    with pytest.raises(AttnumInputError, match="mma"):
        FP8TableConfig(mma="sm99")


def test_sage2_pv_acc_as_hopper_wgmma_and_the_two_level_fix():
    """sage2 with pv_acc=sm90: one-level accumulation over 2048 positive-V keys in wgmma's FP8 accumulator
    loses one-sidedly, far more than two-level (each 64-key tile from zero, added into fp32)."""
    from attnum.attention.flash import flash_attention
    from attnum.attention.golden import golden_attention
    from attnum.numerics.lowbit import SAGE

    assert parse_policy("sage2:bf16,pv_acc=hopper").lowbit.pv_acc == "sm90"
    with pytest.raises(AttnumInputError, match="pv_acc"):
        parse_policy("sage1:fp16,pv_acc=sm99")
    assert SAGE["sage2"].pv_acc == "fp22"
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 1, 16, 64, generator=g, dtype=torch.float64) * 0.1
    k = torch.randn(1, 1, 2048, 64, generator=g, dtype=torch.float64)
    v = torch.rand(1, 1, 2048, 64, generator=g, dtype=torch.float64)
    gold = golden_attention(q, k, v)

    def bias(spec):
        return ((flash_attention(q, k, v, policy=spec).double() - gold) / gold).mean().item()

    one, two = bias("sage2:bf16,pv_acc=sm90,two_level=false"), bias("sage2:bf16,pv_acc=sm90")
    assert one < 0 and abs(one) > 10 * abs(two), (one, two)


def test_run_compare_applies_the_mma_axis_to_flash_and_baseline():
    from attnum.studies.paper.compare import CompareConfig, run_compare

    r = run_compare(CompareConfig(policy="fa2", format="bf16", seq_len=32, heads=1, head_dim=16, mma="sm80"))
    assert r["policy"]["mma"] == "sm80" and r["baseline_policy"]["mma"] == "sm80"
