"""Nothing forged, round 4 (issue 32): lies a target can tell, caches it can poison, runs that ask for the
whole machine, and the API's edge inputs. Each test is one numbered case of the issue (the replay script,
scripts/replay_attacks.py, runs the same ones end to end from the CLI)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import _paths
import pytest
import torch

from attnum.audit.config import AuditConfig
from attnum.audit.runner import run_audit
from attnum.kernels.serving import ServingTarget, reference

pytestmark = [pytest.mark.usefixtures("one_thread")]
REF = reference("fa2")


def _rows(report) -> dict:
    return {(r.name, r.dtype): r for r in report.results}


# ---- 1. accepts_out: the poison check reads the buffer ------------------------------------------------

def _fresh_decode(q, k, v, *, cache_seqlens, out=None, lse_out=None, return_lse=False, **kw):
    """Declares accepts_out, never touches ``out`` and returns a fresh (correct) tensor."""
    return REF.decode(q, k, v, cache_seqlens=cache_seqlens, return_lse=return_lse, **kw)


def test_1_a_target_that_leaves_the_out_buffer_poisoned_is_unwritten_though_it_returns_a_fresh_tensor():
    row = _rows(run_audit(AuditConfig(dtypes="fp32", probes="empty-sequence", isolate=False),
                          target=ServingTarget("fresh", decode=_fresh_decode, accepts_out=True)))
    row = row[("empty-sequence", "fp32")]
    assert row.status == "unwritten" and "never written" in row.note, (row.status, row.note)


def test_1_through_the_kernel_server_a_class_adapter_that_ignores_out_is_unwritten(tmp_path):
    (tmp_path / "fresh.py").write_text(textwrap.dedent('''
        from attnum.kernels.serving import reference
        REF = reference("fa2")
        class Fresh:
            accepts_out = True
            @staticmethod
            def decode(q, k, v, *, cache_seqlens, out=None, lse_out=None, return_lse=False, **kw):
                return REF.decode(q, k, v, cache_seqlens=cache_seqlens, return_lse=return_lse, **kw)
        '''))
    report = run_audit(AuditConfig(target=f"{tmp_path / 'fresh.py'}:Fresh", dtypes="fp32", probes="empty-sequence"))
    row = _rows(report)[("empty-sequence", "fp32")]
    assert report.isolated and row.status == "unwritten", (row.status, row.note)


def test_1_a_target_that_writes_the_buffer_but_returns_something_else_fails():
    def liar(q, k, v, *, cache_seqlens, out=None, lse_out=None, return_lse=False, **kw):
        o = REF.decode(q, k, v, cache_seqlens=cache_seqlens, **kw)
        out.copy_(o)
        return o + 1.0  # what the caller reads from the buffer is not what is returned

    row = _rows(run_audit(AuditConfig(dtypes="fp32", probes="empty-sequence", isolate=False),
                          target=ServingTarget("liar", decode=liar, accepts_out=True)))[("empty-sequence", "fp32")]
    assert row.status == "fail" and "differs from the out= buffer" in row.note, (row.status, row.note)


# ---- 2. attnum_batch_invariant on a class adapter ------------------------------------------------------

BATCH_VARIANT = '''
import torch
from attnum.kernels.serving import reference
REF = reference("fa2")

class Moves:
    attnum_batch_invariant = True

    @staticmethod
    def decode(q, k, v, *, cache_seqlens, **kw):
        o = REF.decode(q, k, v, cache_seqlens=cache_seqlens, **kw)
        if q.shape[0] > 1:  # one ulp up whenever request 0 has neighbours
            o = torch.nextafter(o, torch.full_like(o, float("inf")))
        return o
'''


def test_2_a_class_adapters_batch_invariance_claim_is_read_and_a_one_ulp_move_fails(tmp_path):
    from attnum.kernels.user import load_user_target

    (tmp_path / "moves.py").write_text(BATCH_VARIANT)
    target = load_user_target(f"{tmp_path / 'moves.py'}:Moves")
    assert target.attnum_batch_invariant is True
    row = _rows(run_audit(AuditConfig(dtypes="fp32", probes="decode-batch-invariance", isolate=False),
                          target=target))[("decode-batch-invariance", "fp32")]
    assert row.status == "fail" and "claims attnum_batch_invariant" in row.note, (row.status, row.note)


def test_2_a_decode_functions_claim_still_counts_under_a_target_without_one():
    from attnum.audit.probes.decode_batch_invariance import claims_invariance

    def decode(*a, **kw):
        return None

    decode.attnum_batch_invariant = True
    assert claims_invariance(ServingTarget("f", decode=decode))
    assert not claims_invariance(ServingTarget("g", decode=lambda *a, **kw: None))


def test_2_a_non_boolean_claim_is_one_line():
    from attnum.errors import AttnumInputError

    with pytest.raises(AttnumInputError, match="attnum_batch_invariant"):
        ServingTarget("x", decode=lambda *a, **kw: None, attnum_batch_invariant="yes")


# ---- 3. a declared arithmetic far from float64 never passes silently ------------------------------------

def _e4m3(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    from attnum.attention.flash import flash_attention

    return flash_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale,
                           policy="uniform:e4m3fn").to(q.dtype)


@pytest.mark.parametrize("strict", [False, True])
def test_3_a_kernel_equal_to_a_declared_e4m3_arithmetic_is_not_a_bf16_pass(strict):
    _e4m3.attnum_emulation = "uniform:e4m3fn"
    report = run_audit(AuditConfig(dtypes="bf16", probes="odd-lengths", isolate=False, strict=strict), target=_e4m3)
    row = _rows(report)[("odd-lengths", "bf16")]
    assert row.status == ("fail" if strict else "note"), (row.status, row.note)
    assert "judged against the declared arithmetic uniform:e4m3fn" in row.note
    assert "only against the declared arithmetic" in row.note and "misses the bf16 bound" in row.note
    assert all(c.verdict.status != "pass" for c in row.cases)  # no case of it passes either
    from attnum.audit.report import to_json

    probe = to_json(report)["probes"][0]
    assert probe["verdict"] == row.status and "declared arithmetic" in probe["note"]


def test_3_a_declared_arithmetic_within_the_dtypes_rule_still_passes():
    from attnum.kernels.reference import family

    fa2 = family("flash", "fa2:bf16")
    fa2.attnum_emulation = "fa2:bf16"
    row = _rows(run_audit(AuditConfig(dtypes="bf16", probes="odd-lengths", isolate=False), target=fa2))
    row = row[("odd-lengths", "bf16")]
    assert row.status == "pass" and "judged against the declared arithmetic fa2:bf16" in row.note, row.note


# ---- 4. a policy a path cannot run is an error, never a substitution -----------------------------------

@pytest.mark.parametrize("policy", ["sage1:fp16", "sage3:bf16"])
def test_4_decode_paths_refuse_a_low_bit_policy_instead_of_running_fa2(policy):
    from attnum.attention.serving.decode import decode_attention
    from attnum.attention.serving.paged import paged_decode_attention, to_pages
    from attnum.errors import AttnumInputError

    q, k = torch.randn(1, 2, 1, 64), torch.randn(1, 2, 16, 64)
    with pytest.raises(AttnumInputError, match="policy=.*one-pass prefill"):
        decode_attention(q, k, k, policy=policy)
    kp, table = to_pages(k, 8, cache_seqlens=torch.tensor([16]))
    with pytest.raises(AttnumInputError, match="policy=.*one-pass prefill"):
        paged_decode_attention(q, kp, kp, block_table=table, cache_seqlens=torch.tensor([16]), policy=policy)


def test_4_the_consistency_studies_refuse_a_low_bit_policy_before_they_start():
    from attnum.errors import AttnumInputError
    from attnum.studies.consistency.config import ConsistencyConfig
    from attnum.studies.consistency.tokens import TokensConfig

    with pytest.raises(AttnumInputError, match="sage1:fp16"):
        ConsistencyConfig(policy="sage1:fp16")
    with pytest.raises(AttnumInputError, match="sage1"):
        TokensConfig(policy="sage1")
    ConsistencyConfig(policy="fa4:fp16")  # a policy every path runs stays allowed


def test_4_cli_consistency_policy_sage1_is_one_line(capsys):
    from _sweep_helpers import cli

    assert cli("consistency", "--policy", "sage1:fp16") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "one-pass prefill" in err[0], err


# ---- 7, 8. the wheel cache: pinned sha256, fresh extraction, no links, truncated wheels ------------------

SAGE_WHEEL = "sageattention-1.0.6-py3-none-any.whl"


@pytest.fixture
def real_sage_wheel(tmp_path_factory):
    from _wheel_helpers import pinned_wheel

    return pinned_wheel(tmp_path_factory, "sageattention")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    from attnum.kernels.wheels import cache as wheel_cache
    from attnum.kernels.wheels import source as wheels

    monkeypatch.setenv("ATTNUM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(wheels, "installed", lambda pkg: False)
    monkeypatch.setattr(wheel_cache, "_VERIFIED", {})
    (tmp_path / "cache" / "wheels").mkdir(parents=True)
    return tmp_path / "cache"


def _forged_wheel(path: Path, payload: str) -> None:
    import zipfile

    from attnum.kernels.wheels import source as wheels

    with zipfile.ZipFile(path, "w") as z:
        for f in wheels.wheel("sageattention").paths:
            z.writestr(f, payload)


def test_7_every_pin_names_a_wheel_file_and_a_sha256():
    from attnum.kernels.wheels import source as wheels

    for name, pkg in wheels.packages().items():
        for version, w in pkg.versions.items():
            assert w.name.startswith(f"{pkg.dist.replace('-', '_')}-{version}-") and w.name.endswith(".whl"), w.name
            assert all(len(sha) == 64 and int(sha, 16) >= 0 for sha in (w.sha256, *dict(w.files).values())), name
    assert wheels.PINS == {n: v for n, (v, _, _) in wheels.WHEELS.items()}  # the names of attnum <= 0.1


def test_7_a_forged_wheel_under_the_pinned_name_is_refused_and_never_extracted(cache, capsys):
    from attnum.cli import main
    from attnum.kernels.wheels import source as wheels

    pwned = cache.parent / "PWNED"
    _forged_wheel(cache / "wheels" / SAGE_WHEEL, f"open({str(pwned)!r}, 'w').write('ran')\n")
    assert main(["kernels", "fetch", "sageattention"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sha256" in err[0] and "not the pinned" in err[0] and "rm " in err[0], err
    assert not wheels.source_dir("sageattention").exists()
    assert "neither installed nor fetched" in wheels.missing("sageattention")  # a wheel alone is nothing to run
    with pytest.raises(NotImplementedError, match="attnum kernels fetch sageattention"):
        wheels.load("sageattention", "sageattention.core")
    assert not pwned.exists()


@pytest.mark.network  # the real sageattention wheel, downloaded once per session
def test_7_a_decoy_wheel_beside_the_real_one_is_never_picked(cache, real_sage_wheel):
    import shutil

    from attnum.kernels.wheels import source as wheels

    shutil.copy(real_sage_wheel, cache / "wheels" / SAGE_WHEEL)
    _forged_wheel(cache / "wheels" / "sageattention-1.0.6-zzz.whl", "raise SystemExit('decoy ran')\n")
    dest = wheels.fetch("sageattention", quiet=True)
    assert (dest / "sageattention" / "core.py").read_text().startswith(("\"\"\"", "#", "import", "from", "\n")) \
        and "decoy" not in (dest / "sageattention" / "core.py").read_text()
    assert wheels.missing("sageattention") == ""
    assert not (cache / "wheels" / SAGE_WHEEL).exists()  # extracted, then deleted: the files are what is kept


@pytest.mark.network  # the real sageattention wheel, downloaded once per session
def test_7_an_extracted_file_edited_after_the_fetch_is_refused_before_use(cache, real_sage_wheel):
    import shutil

    from attnum.kernels.wheels import source as wheels

    shutil.copy(real_sage_wheel, cache / "wheels" / SAGE_WHEEL)
    dest = wheels.fetch("sageattention", quiet=True)
    core = dest / "sageattention" / "core.py"
    core.write_text(core.read_text() + "\nraise SystemExit('planted')\n")
    why = wheels.missing("sageattention")
    assert "differs from the pinned" in why and "attnum kernels fetch sageattention" in why, why
    with pytest.raises(Exception, match="differs from the pinned"):
        wheels.load("sageattention", "sageattention.core")
    shutil.copy(real_sage_wheel, cache / "wheels" / SAGE_WHEEL)  # what a fetch would download again
    assert wheels.fetch("sageattention", quiet=True) == dest and wheels.missing("sageattention") == ""
    assert "planted" not in core.read_text()  # re-extracted from the verified wheel


@pytest.mark.network  # the real sageattention wheel, downloaded once per session
def test_8_a_symlink_inside_the_cache_is_never_written_through(cache, real_sage_wheel):
    import shutil

    from attnum.kernels.wheels import source as wheels

    def wheel_back():
        shutil.copy(real_sage_wheel, cache / "wheels" / SAGE_WHEEL)

    wheel_back()
    victim = cache.parent / "victim.txt"
    victim.write_text("keep")
    core = wheels.source_dir("sageattention") / "sageattention" / "core.py"
    core.parent.mkdir(parents=True)
    core.symlink_to(victim)
    dest = wheels.fetch("sageattention", quiet=True)  # a fresh tree renamed over the planted one
    assert victim.read_text() == "keep" and not (dest / "sageattention" / "core.py").is_symlink()
    # a link planted after the fetch is refused at use, never read through
    (dest / "sageattention" / "core.py").unlink()
    (dest / "sageattention" / "core.py").symlink_to(victim)
    assert "symbolic link" in wheels.missing("sageattention")
    # a linked folder in place of the tree is refused at use, and a fetch replaces the link, not its target
    shutil.rmtree(dest)
    (cache / "elsewhere").mkdir()
    dest.symlink_to(cache / "elsewhere")
    assert "symbolic link" in wheels.missing("sageattention")
    wheel_back()
    wheels.fetch("sageattention", quiet=True)
    assert not any((cache / "elsewhere").iterdir()) and not dest.is_symlink() and wheels.missing("sageattention") == ""
    # a linked wheels folder is refused, never written through
    shutil.rmtree(dest)
    shutil.rmtree(cache / "wheels")
    (cache / "wheels").symlink_to(cache / "elsewhere")
    with pytest.raises(Exception, match="symbolic link"):
        wheels.fetch("sageattention", quiet=True)
    assert not any((cache / "elsewhere").iterdir())


@pytest.mark.network  # the real sageattention wheel, downloaded once per session
def test_8_a_truncated_wheel_is_one_line_naming_the_file_and_the_command(cache, capsys, real_sage_wheel):
    from attnum.cli import main

    data = real_sage_wheel.read_bytes()
    (cache / "wheels" / SAGE_WHEEL).write_bytes(data[: len(data) // 2])
    assert main(["kernels", "fetch", "sageattention"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and SAGE_WHEEL in err[0] and "attnum kernels fetch sageattention" in err[0], err
    assert "internal error" not in err[0] and "BadZipFile" not in err[0]


# ---- 5. the LM activation cache is checked before use --------------------------------------------------

@pytest.mark.parametrize("forged", ["small", "zeros"])
def test_5_a_foreign_or_wrong_shaped_lm_cache_file_is_never_used(forged, tmp_path, monkeypatch):
    from attnum.workloads import structured
    from attnum.workloads.inputs import InputSpec

    monkeypatch.setenv("ATTNUM_CACHE", str(tmp_path))
    spec = InputSpec(batch=1, heads=2, kv_heads=2, seq_len=128, kv_len=128, head_dim=64, seed=0, dist="lm")
    path = structured._cache_path(1, 0)
    shape = (1, 2, 128, 64)
    bad = {"small": [torch.zeros(3, 5, dtype=torch.float64)] * 3,
           "zeros": [torch.zeros(shape, dtype=torch.float64)] * 3,
           "nan": [torch.full(shape, float("nan"), dtype=torch.float64)] * 3,
           "not-a-list": {"q": 1}}[forged]
    torch.save(bad, path)
    structured._captured.cache_clear()
    try:
        q, k, v = structured.lm_qkv(spec)
    finally:
        structured._captured.cache_clear()
    assert q.shape == k.shape == v.shape == shape and bool(torch.isfinite(q).all()) and float(q.abs().max()) > 0
    assert structured._checked(torch.load(path, weights_only=True), 1) is not None  # retrained and rewritten


# ---- 6. TRITON_INTERPRET=1 set by the user: the verdict names the interpreter's model ---------------------

def test_6_a_triton_target_named_without_the_prefix_under_triton_interpret_runs_the_faithful_model(tmp_path):
    import json
    import subprocess
    import sys

    from _sweep_helpers import cli_env

    pytest.importorskip("triton")
    kernel = _paths.TESTS / "_interp_triton_attention.py"
    run = subprocess.run([sys.executable, "-m", "attnum", "audit", f"{kernel}:attention_tf32", "--dtype", "bf16",
                          "--probes", "scale-argument", "--json"], capture_output=True, text=True, timeout=_paths.HANG_S,
                         cwd=tmp_path, env={**cli_env(), "TRITON_INTERPRET": "1"})
    assert run.returncode == 0, run.stderr[-2000:]
    doc = json.loads(run.stdout)
    assert doc["numerics"].startswith("triton-interp:nvidia-sm90"), doc["numerics"]
    assert all(p["numerics"] == doc["numerics"] for p in doc["probes"])


def test_6_huge_margins_print_readably():
    from attnum.audit.report import margin

    assert margin(17313619418.68) == "1.7e+12 %"
    assert margin(0.87) == "87%" and margin(float("inf")) == "inf" and margin(float("nan")) == "-"


# ---- 9. every study command checks its memory before it starts -----------------------------------------

@pytest.mark.parametrize("args", [
    ("consistency", "--batch-sizes", "1000000000"), ("consistency", "--mixes", "1000000000"),
    ("consistency", "--length", "1000000000"), ("lowbit-table", "--seq-len", "1000000000"),
    ("lowbit-table", "--rescale", "--seq-lens", "1000000000")])
def test_9_a_study_too_large_for_this_machine_is_refused_in_one_line_before_it_starts(args, capsys):
    from _sweep_helpers import cli

    assert cli(*args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "of memory" in err[0] and "lower" in err[0], err


def test_9_the_default_studies_fit_the_budget_they_are_checked_against(monkeypatch):
    from attnum.studies.consistency.config import ConsistencyConfig
    from attnum.sweep.memory_budget import consistency_bytes, lowbit_bytes

    assert consistency_bytes(ConsistencyConfig()) < 2e9  # what `attnum consistency` runs by default
    assert lowbit_bytes(batch=1, heads=2, seq_len=1024, head_dim=64) < 1e9
    monkeypatch.setenv("ATTNUM_MEMORY_LIMIT_BYTES", "4e9")
    ConsistencyConfig().require_memory()


# ---- 10. sweep points of kind lowbit and consistency are checked before any point runs ----------------

@pytest.mark.parametrize("point, word", [
    ({"kind": "lowbit", "seq_len": 10 ** 9}, "of memory"),
    ({"kind": "lowbit", "batch": 10 ** 6}, "of memory"),
    ({"kind": "lowbit", "scheme": "sage3", "head_dim": 40}, "head_dim"),
    ({"kind": "consistency", "length": 10 ** 9}, "of memory"),
    ({"kind": "consistency", "batch_sizes": [10 ** 9]}, "of memory"),
    ({"kind": "consistency", "policy": "sage1:fp16"}, "one-pass prefill")])
def test_10_impossible_lowbit_and_consistency_points_are_refused_by_the_spec_check(point, word):
    from attnum.errors import AttnumInputError
    from attnum.sweep.spec import spec_from_dict

    with pytest.raises(AttnumInputError, match=word) as err:
        spec_from_dict({"name": "x", "points": [point]})
    assert "impossible" in str(err.value) and len(str(err.value).splitlines()) == 1


def test_10_batch_sizes_in_the_clis_own_syntax_is_accepted_in_a_spec():
    from attnum.sweep.spec import spec_from_dict

    spec = spec_from_dict({"name": "x", "points": [{"kind": "consistency", "batch_sizes": "1,4", "length": 512}]})
    (point,) = spec.groups[0].points
    assert point.batch_sizes == (1, 4)


# ---- 13. --out FILE and empty rules are one line ---------------------------------------------------------

@pytest.mark.parametrize("command", ["consistency", "consistency-tokens"])
@pytest.mark.parametrize("where", ["file", "/dev/null", "/proc/version"])
def test_13_out_that_is_not_a_folder_is_one_line_before_the_study_starts(command, where, tmp_path, capsys):
    from _sweep_helpers import cli

    if where == "file":
        where = tmp_path / "f.json"
        where.write_text("{}")
    elif not Path(where).exists():
        pytest.skip(f"{where} does not exist here")
    assert cli(command, "--out", where) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--out" in err[0] and "a folder" in err[0], err


@pytest.mark.parametrize("rules", ["fa2;;vllm", "fa2;", ";"])
def test_13_an_empty_split_rule_is_refused_not_dropped(rules, capsys):
    from _sweep_helpers import cli

    assert cli("consistency", "--rules", rules) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--rules" in err[0] and "empty" in err[0], err


# ---- 12. low-bit policies on edge inputs: golden's answer or AttnumInputError naming the input ----------

@pytest.mark.parametrize("policy", ["sage1:fp16", "sage2:fp16", "sage2-4b:fp16", "sage3:fp16", "fa4:fp32"])
@pytest.mark.parametrize("empty", ["N", "S"])
def test_12_an_empty_q_or_k_gives_what_golden_gives(policy, empty):
    from attnum.attention.flash import flash_attention
    from attnum.attention.golden import golden_attention

    g = torch.Generator().manual_seed(0)
    N, S = (0, 64) if empty == "N" else (64, 0)
    q = torch.randn(1, 2, N, 64, generator=g, dtype=torch.float64)
    k, v = (torch.randn(1, 2, S, 64, generator=g, dtype=torch.float64) for _ in range(2))
    out, lse = flash_attention(q, k, v, policy=policy, return_lse=True)
    gold = golden_attention(q, k, v)
    assert out.shape == gold.shape and torch.equal(out.double(), gold.double())
    assert lse.shape == (1, 2, N) and bool((lse == float("-inf")).all())


@pytest.mark.parametrize("policy", ["sage2:fp16", "fa4:fp32"])
def test_12_an_input_the_scheme_cannot_compute_is_an_input_error_naming_it(policy, monkeypatch):
    """Whatever breaks inside the emulation on a non-finite input (a bare RuntimeError / IndexError from
    torch's reductions) reaches the caller as AttnumInputError naming the tensor that holds it."""
    from attnum.attention import flash
    from attnum.attention.lowbit import sage
    from attnum.errors import AttnumInputError

    def broken(*a, **kw):
        raise IndexError("index -1 is out of bounds for dimension 0 with size 0")

    monkeypatch.setattr(sage, "sage_attention", broken)
    monkeypatch.setattr(flash, "flash_forward", broken)
    q, k, v = (torch.randn(1, 2, 64, 64) for _ in range(3))
    k[0, 0, 3, 5] = float("inf")
    with pytest.raises(AttnumInputError, match=r"^k holds inf"):
        flash.flash_attention(q, k, v, policy=policy)
    q[0, 1, 2, 3] = float("nan")
    with pytest.raises(AttnumInputError, match=r"^q holds NaN"):
        flash.flash_attention(q, k, v, policy=policy)


# ---- 11. a large reply is received into one preallocated buffer ------------------------------------------

def test_11_a_large_reply_arrives_whole_and_the_frame_buffer_is_allocated_once(tmp_path, monkeypatch):
    """A 256 MiB output comes back bit for bit; the parent reads it with os.readv straight into a buffer of
    the frame's announced size (the old loop grew a bytes object by 1 MiB copies: quadratic, 250 s for
    512 MiB)."""
    import os

    from attnum.sandbox import server as srv
    from attnum.sandbox.remote import RemoteTarget
    from attnum.sandbox.server import KernelServer

    (tmp_path / "big.py").write_text("import torch\ndef attention(q, k, v, **kw):\n"
                                     "    return torch.arange(64 << 20, dtype=torch.float32).reshape(1, 1, -1, 1)\n")
    reads = []
    real = os.readv

    def counting(fd, bufs):
        n = real(fd, bufs)
        reads.append((n, sum(len(b) for b in bufs)))
        return n

    monkeypatch.setattr(srv.os, "readv", counting)
    q = torch.zeros(1, 1, 1, 1)
    with KernelServer("attention", f"{tmp_path / 'big.py'}:attention", timeout=120) as s:
        s.start()
        reads.clear()
        out = RemoteTarget(s)(q, q, q)
    assert out.shape == (1, 1, 64 << 20, 1) and bool((out.flatten() == torch.arange(64 << 20)).all())
    frame = max(asked for _, asked in reads)
    assert frame >= 256 << 20  # the first payload read asks for the whole frame: one buffer, filled in place


# ---- 14. Ctrl-C while a library is being imported is an interruption, never an internal error ----------

def test_14_an_interrupt_that_breaks_an_import_exits_130_interrupted(monkeypatch, capsys):
    """What matplotlib's import does when Ctrl-C lands inside it: the KeyboardInterrupt is swallowed and a
    ValueError (or ImportError) comes out. A SIGINT was seen, so the command was interrupted."""
    import os
    import signal

    import typer

    from attnum import cli as cli_mod

    def build():
        app = typer.Typer()

        @app.command()
        def sweep():
            try:
                os.kill(os.getpid(), signal.SIGINT)  # the user's Ctrl-C, delivered to this process
                time_left = 50
                while time_left:  # the handler runs between bytecodes
                    time_left -= 1
            except KeyboardInterrupt:
                raise ValueError("module 'matplotlib' has no attribute 'rcParams'") from None

        @app.command()
        def other():
            pass

        return app

    monkeypatch.setattr(cli_mod, "build_app", build)
    monkeypatch.setattr(signal, "getsignal", lambda s: signal.default_int_handler)  # as in a terminal
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert cli_mod.main(["sweep"]) == 130
    finally:
        signal.signal(signal.SIGINT, before)
    err = capsys.readouterr().err
    assert err.strip() == "attnum: interrupted" and "internal error" not in err


def test_14_without_an_interrupt_the_same_error_stays_an_internal_error(monkeypatch, capsys, tmp_path):
    import typer

    from attnum import cli as cli_mod

    def build():
        app = typer.Typer()

        @app.command()
        def sweep():
            raise ValueError("a real bug")

        @app.command()
        def other():
            pass

        return app

    monkeypatch.setattr(cli_mod, "build_app", build)
    monkeypatch.setenv("ATTNUM_TRACEBACK_DIR", str(tmp_path))
    assert cli_mod.main(["sweep"]) == 1
    assert "internal error: ValueError: a real bug" in capsys.readouterr().err


def test_14_ctrl_c_during_attnums_own_import_is_one_line_130(tmp_path):
    """SIGINT while ``python -m attnum`` is still importing its CLI.

    Deterministic: an import hook holds the import of ``attnum.cli`` (it says READY, then sleeps), so the
    interrupt lands inside attnum's own import every time, on a fast machine or a loaded one. (A fixed sleep
    before the signal raced: ``attnum runs`` finishes in about 0.35 s, and a late interrupt met an
    interpreter that had already restored the default handler at shutdown.)"""
    import signal
    import subprocess
    import sys

    from _sweep_helpers import cli_env

    hook = (
        "import runpy, sys, time\n"
        "class Hold:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'attnum.cli':\n"
        "            sys.stderr.write('READY\\n'); sys.stderr.flush(); time.sleep(60)\n"
        "        return None\n"
        "sys.meta_path.insert(0, Hold())\n"
        "sys.argv = ['attnum', 'runs', sys.argv[1]]\n"
        "runpy.run_module('attnum', run_name='__main__', alter_sys=True)\n"
    )
    # The child starts as from a terminal, SIGINT at its default: a suite started with SIGINT ignored (``pytest &``
    # in a script) passes that on, the child rightly keeps ignoring it (__main__.py), and the interrupt never lands.
    p = subprocess.Popen([sys.executable, "-c", hook, str(tmp_path)], env=cli_env(), cwd=tmp_path,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert p.stderr.readline() == "READY\n"  # inside `from attnum.cli import main`, after the handler is set
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=_paths.HANG_S)
    assert p.returncode == 130 and err.strip().splitlines() == ["attnum: interrupted"], (p.returncode, err[-500:])


def test_a_target_that_overwrites_its_inputs_cannot_make_the_golden_agree():
    """Attack on this turn's new surfaces (varlen, shape-contract) and the old ones alike: a target that
    zeroes q, k, v in place and returns zeros passed every probe in-process (the references read the
    same tensors afterwards). The harness hands the target copies (storage tails kept)."""
    from attnum.audit.config import AuditConfig
    from attnum.audit.runner import run_audit
    from attnum.kernels.serving import ServingTarget, reference

    def liar(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        q.zero_(), k.zero_(), v.zero_()
        return torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)

    def varlen_liar(q, k, v, **kw):
        q.zero_(), k.zero_(), v.zero_()
        return torch.zeros(q.shape[0], q.shape[1], v.shape[-1], dtype=q.dtype)

    def decode_liar(q, k_cache, v_cache, **kw):
        q.zero_(), k_cache.zero_(), v_cache.zero_()
        return torch.zeros(*q.shape[:-1], v_cache.shape[-1], dtype=q.dtype)

    for fn, probes in ((liar, "odd-lengths,shape-contract"),
                       (ServingTarget("liar", varlen=varlen_liar, decode=decode_liar), "varlen-ragged,page-padding-leak")):
        report = run_audit(AuditConfig(dtypes="bf16", probes=probes, isolate=False), fn)
        assert all(r.status == "fail" for r in report.results), [(r.name, r.status, r.note) for r in report.results]
    ok = run_audit(AuditConfig(dtypes="bf16", probes="varlen-ragged,page-padding-leak", isolate=False),
                   reference("fa2"))
    assert all(r.status == "pass" for r in ok.results), [(r.name, r.note) for r in ok.results]
