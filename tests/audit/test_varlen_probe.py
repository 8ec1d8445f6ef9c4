"""The varlen-ragged probe (variable-length prefill: ragged lengths, zero-length sequences, rows with no
key, the last tile at the end of the packed tensors). A correct varlen kernel passes every case; each
planted bug fails in the cases that reach it, for its reason; a target without a varlen entry point, or
one that takes a single cu_seqlens, is not judged where it cannot run. Planted kernels wrap attnum's own
reference target; the real ones are in tests/kernels/adapters/test_fla.py and tests/kernels/adapters/test_real_kernels.py."""

from __future__ import annotations

import math
import sys
import textwrap

import _paths
import pytest
import torch
from _wheel_helpers import fetched_or_skip

from attnum.attention.masks import causal_bool
from attnum.audit.config import AuditConfig
from attnum.audit.probes import varlen_ragged
from attnum.audit.runner import run_audit
from attnum.kernels import serving
from attnum.kernels.serving_layout import varlen_spans

REF = serving.reference("fa2")
pytestmark = pytest.mark.usefixtures("one_thread")  # many tiny ops: one torch thread is ~10x faster when loaded


def _attend(q, k, v, *, is_causal, scale=None, alignment="bottom_right"):
    """One sequence in float64 (q (N, H, d), k, v (S, G, d)) -> (N, H, d) in q's dtype; no key: zeros."""
    N, S = q.shape[0], k.shape[0]
    H, G = q.shape[1], k.shape[1]
    if N == 0 or S == 0:
        return q.new_zeros(N, H, v.shape[-1])
    kk, vv = (x.double().repeat_interleave(H // G, dim=1) for x in (k, v))
    s = torch.einsum("nhd,shd->hns", q.double(), kk) * (scale or 1 / math.sqrt(q.shape[-1]))
    if is_causal:
        s = s.masked_fill(~causal_bool(N, S, alignment), -math.inf)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)  # a row with no key: zeros
    return torch.einsum("hns,shd->nhd", p, vv).to(q.dtype)


def _planted(name: str, bug: str | None = None, **declared):
    def varlen(q, k, v, *, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, is_causal=False,
               scale=None):
        if bug is None:
            return REF.varlen(q, k, v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, is_causal=is_causal,
                              scale=scale)
        if bug == "one-cu":
            if not torch.equal(cu_seqlens_q, cu_seqlens_k):
                raise NotImplementedError("one cu_seqlens for queries and keys")
            return REF.varlen(q, k, v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, is_causal=is_causal)
        out = q.new_empty(q.shape[0], q.shape[1], v.shape[-1])
        out.fill_(math.nan)  # torch.empty's garbage, made visible
        spans = varlen_spans(cu_seqlens_q, cu_seqlens_k)
        if bug == "keys-by-q":  # the keys' offsets read from cu_seqlens_q
            spans = varlen_spans(cu_seqlens_q, cu_seqlens_q)
        for b, (q0, q1, k0, k1) in enumerate(spans):
            if bug == "skip-empty" and k1 == k0:
                continue  # rows of a sequence with no key are never written
            if bug == "limits":  # issue 42's kernel: the packed keys past 128 dropped, the sequences past the 6th zeroed
                if b >= 6 or k0 >= 128:
                    out[q0:q1] = 0.0
                    continue
                k1 = min(k1, 128)
            if bug == "tile-overrun":  # the last 16-key tile's V is loaded without a bound (scores masked)
                pad = -(-(k1 - k0) // 16) * 16
                kk = k.as_strided((k0 + pad, *k.shape[1:]), k.stride(), k.storage_offset())[k0:]
                vv = v.as_strided((k0 + pad, *v.shape[1:]), v.stride(), v.storage_offset())[k0:]
                o = _attend(q[q0:q1], kk[:k1 - k0], vv[:k1 - k0], is_causal=is_causal)
                if q1 > q0 and pad > k1 - k0:
                    o = o + 0.0 * vv[k1 - k0:].double().sum((0, 1)).to(o.dtype)  # p = 0 times the loaded V
                out[q0:q1] = o
                continue
            out[q0:q1] = _attend(q[q0:q1], k[k0:k1], v[k0:k1], is_causal=is_causal,
                                 alignment="top_left" if bug == "top-left" else "bottom_right")
        return out

    return serving.ServingTarget(name, varlen=varlen, **declared)


def _row(fn, dtype="bf16"):
    return run_audit(AuditConfig(dtypes=dtype, probes="varlen-ragged"), fn).results[0]


def _bad(r):
    return {c.label.split(":")[0] for c in r.cases if c.verdict.status != "pass"}


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
def test_a_correct_varlen_kernel_passes_every_sequence(dtype):
    r = _row(_planted("ok"), dtype)
    assert r.status == "pass", r.note
    judged = sum(1 for _, ql, _, _ in varlen_ragged.CASES for n in ql if n)
    judged += len(varlen_ragged.SCALED)  # one case per call: its worst sequence
    lens, poisoned = varlen_ragged.POISONED  # K then V, causal and not; the poisoned sequence is not judged
    judged += 4 * sum(1 for b, n in enumerate(lens) if n and b != poisoned)
    assert len(r.cases) == judged and all(c.verdict.status == "pass" for c in r.cases)


def test_top_left_causal_fails_only_where_queries_are_fewer_than_keys():
    r = _row(_planted("top-left", "top-left"))
    assert r.status == "fail"
    assert _bad(r) == {"queries the last of their keys"}, _bad(r)


def test_keys_found_by_the_query_offsets_fail_where_the_lengths_differ():
    r = _row(_planted("keys-by-q", "keys-by-q"))
    assert r.status == "fail"
    assert _bad(r) == {"queries the last of their keys", "a sequence with no keys"}, _bad(r)


def test_rows_with_no_key_left_unwritten_fail():
    r = _row(_planted("skip-empty", "skip-empty"))
    assert r.status == "fail"
    bad = {c.label.rpartition(" seq ")[2] for c in r.cases if c.verdict.status != "pass"}
    assert bad == {"0 (N=3, S=0)"}, bad  # the one sequence with no key


def test_rows_with_no_key_are_judged_by_the_declared_convention():
    r = _row(_planted("skip-empty-any", "skip-empty", empty_rows={"varlen": "any"}))
    assert r.status == "pass", [(c.label, c.verdict.note) for c in r.cases if c.verdict.status != "pass"]
    # declared NaN: the S = 0 rows (left NaN) agree; the causal rows with no key (written as zeros) do not
    r = _row(_planted("skip-empty-nan", "skip-empty", empty_rows={"varlen": "nan"}))
    bad = [c for c in r.cases if c.verdict.status != "pass"]
    assert [c.label.rpartition(" seq ")[2] for c in bad] == ["1 (N=4, S=2)"]
    assert "declared NaN" in bad[0].verdict.note, bad[0].verdict.note


def test_a_tile_that_loads_past_the_last_key_fails_on_the_nan_behind_the_tensors():
    r = _row(_planted("overrun", "tile-overrun"))
    assert r.status == "fail"
    bad = [c for c in r.cases if c.verdict.status != "pass"]
    assert bad and all("NaN" in c.verdict.note for c in bad), [(c.label, c.verdict.note) for c in bad]
    # exactly the sequences with queries whose last 16-key tile reaches past the packed tensors' end read
    # the NaN behind them (the others load their neighbours' finite keys at p = 0: no error)
    want = set()
    for label, ql, kl, _ in varlen_ragged.CASES:
        k0 = 0
        for b, (n, L) in enumerate(zip(ql, kl, strict=True)):
            if n and k0 + -(-L // 16) * 16 > sum(kl):
                want.add((label, b))
            k0 += L
    small = {label for label, *_ in varlen_ragged.CASES}
    assert want and {(c.label.split(":")[0], int(c.label.rpartition(" seq ")[2].split()[0])) for c in bad
                     if c.label.split(":")[0] in small} == want
    # the batches at the kernel's limits end with a sequence whose last tile passes the packed end, and so does
    # the poisoned batch's last sequence (130 keys); the NaN in sequence 1's V also reaches sequence 0 through
    # its tile, the NaN in its K does not (a tile's K past its sequence is never loaded here)
    big = {c.label.split(":")[0] for c in bad if c.label.split(":")[0] not in small}
    assert big == {label for label, *_ in varlen_ragged.SCALED} | {
        f"NaN in {w} of sequence 1{c}" for w in ("K", "V") for c in ("", " causal")}, big
    seqs = {(c.label.split(":")[0][7], int(c.label.rpartition(" seq ")[2].split()[0])) for c in bad
            if c.label.startswith("NaN in")}
    assert seqs == {("K", 4), ("V", 0), ("V", 4)}, seqs


def test_a_kernel_that_stops_at_128_keys_or_6_sequences_fails():
    """Issue 42: a varlen kernel that drops the packed keys past 128 and zeroes the sequences past the 6th
    passed while the probe packed at most 122 tokens in at most 6 sequences; the batches at the kernel's
    limits (70 sequences, 408 and 449 packed tokens) catch it."""
    r = _row(_planted("limits", "limits"))
    assert r.status == "fail", r.note
    assert {label for label, *_ in varlen_ragged.SCALED} <= _bad(r), _bad(r)


def test_one_sequence_nan_must_not_reach_another():
    """A kernel whose tile runs past its sequence into the next one's keys (P = 0 there) turns the next
    sequence's NaN V into NaN rows: only the NaN-in-V cases fail, and not in the poisoned sequence's rows."""
    r = _row(_planted("overrun", "tile-overrun"))
    poisoned = [c for c in r.cases if c.label.startswith("NaN in")]
    assert poisoned and all((c.verdict.status == "fail") == c.label.startswith("NaN in V") for c in poisoned
                            if " seq 0 " in c.label), [(c.label, c.verdict.status) for c in poisoned]
    assert not any(" seq 1 " in c.label for c in poisoned)  # the poisoned sequence's own rows are not judged


def test_one_cu_seqlens_kernels_are_unsupported_where_lengths_differ_and_judged_elsewhere():
    r = _row(_planted("one-cu", "one-cu"))
    un = {c.label.split(":")[0] for c in r.cases if c.verdict.status == "unsupported"}
    assert un == {"queries the last of their keys", "a sequence with no keys"}
    assert all(c.verdict.status in ("pass", "unsupported") for c in r.cases)


def test_a_target_without_a_varlen_entry_point_is_not_asked():
    r = _row(serving.ServingTarget("dec", decode=REF.decode))
    assert r.status == "unsupported" and "varlen" in r.note


def test_a_plain_class_adapter_declares_varlen_and_runs_in_a_kernel_server(tmp_path):
    """As a user writes it: a file with a class whose static method is the varlen entry point (no attnum
    import), audited through the CLI (the kernel server runs it in a child process)."""
    import subprocess

    (tmp_path / "vl.py").write_text(textwrap.dedent("""
        import math, torch

        class Varlen:
            @staticmethod
            def varlen(q, k, v, *, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None,
                       is_causal=False, scale=None):
                out = torch.zeros(q.shape[0], q.shape[1], v.shape[-1], dtype=q.dtype)
                cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
                for b in range(len(cq) - 1):
                    qs, ks = q[cq[b]:cq[b + 1]].double(), k[ck[b]:ck[b + 1]].double()
                    vs = v[ck[b]:ck[b + 1]].double()
                    N, S = qs.shape[0], ks.shape[0]
                    if N == 0 or S == 0:
                        continue
                    r = q.shape[1] // k.shape[1]
                    s = torch.einsum("nhd,shd->hns", qs, ks.repeat_interleave(r, 1)) / math.sqrt(q.shape[-1])
                    if is_causal:
                        i = torch.arange(N)[:, None]; j = torch.arange(S)[None, :]
                        s = s.masked_fill(j > i + (S - N), -math.inf)
                    p = torch.softmax(s, -1).nan_to_num(0.0)  # a row with no key: zeros
                    o = torch.einsum("hns,shd->nhd", p, vs.repeat_interleave(r, 1))
                    out[cq[b]:cq[b + 1]] = o.to(q.dtype)
                return out
    """))
    from _sweep_helpers import CLI, cli_env

    p = subprocess.run([sys.executable, "-c", CLI, "audit", f"{tmp_path / 'vl.py'}:Varlen", "--probes",
                        "varlen-ragged", "--dtype", "fp16"], capture_output=True, text=True, env=cli_env(),
                       timeout=_paths.HANG_S)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "varlen-ragged" in p.stdout and "pass" in p.stdout, p.stdout


REAL = {"fla-parallel-attn": "fla", "sglang-context": "sglang", "vllm-unified": "vllm"}


@pytest.mark.slow  # interpreted Triton, 10-40 s per kernel: left out of pytest -m "not slow" (README)
@pytest.mark.parametrize("target", sorted(REAL))
def test_real_varlen_kernels_under_the_gpu_model(target):
    """The varlen entry point of each real kernel under the faithful model: fp16 and bf16 pass every
    sequence they take (fla and SGLang take one cu_seqlens: the unequal cases are unsupported; fla is
    causal only), except
    vLLM's rows with no key (N > S, outside its contract: NaN); fp32 fails everywhere on TF32 dots."""


    fetched_or_skip(REAL[target])
    report = run_audit(AuditConfig(target=target, dtypes="fp16,bf16,fp32", probes="varlen-ragged"))
    assert report.available, report.reason
    rows = {r.dtype: r for r in report.results}
    unequal = {"queries the last of their keys", "a sequence with no keys"}
    for dt in ("fp16", "bf16"):
        cases = rows[dt].cases
        if target == "vllm-unified":
            bad = [c for c in cases if c.verdict.status != "pass"]
            assert [c.label.rpartition(" seq ")[2] for c in bad] == ["1 (N=4, S=2)"], [c.label for c in bad]
            assert "NaN" in bad[0].verdict.note
        else:
            not_causal = {"ragged", "long and short", "NaN in K of sequence 1", "NaN in V of sequence 1"}
            refused = unequal | (not_causal if target == "fla-parallel-attn" else set())  # fla: causal only
            assert {c.label.split(":")[0] for c in cases if c.verdict.status == "unsupported"} == refused
            assert all(c.verdict.status in ("pass", "unsupported") for c in cases), rows[dt].note
            assert sum(c.verdict.status == "pass" for c in cases) >= 7  # the sequences with queries it takes
    fp32 = [c for c in rows["fp32"].cases if c.verdict.status == "fail"]
    assert fp32 and min(c.verdict.ratio for c in fp32) > 100  # TF32: ~1e-3 relative against an fp32 bound
