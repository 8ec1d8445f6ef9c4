"""Run by tests/kernels/adapters/test_fla_nsa.py in a child process with TRITON_INTERPRET=1: fla's NSA top-k selection
(``parallel_nsa_topk`` over mean-pooled keys, fla-core 0.6.0) under the faithful model, against the selection
computed in float64 from its definition (arXiv 2502.11089 Eq. 8-11 as fla implements it: per query, the
complete compressed blocks' softmax probabilities summed over the query heads of one KV head; blocks 0,
IC - 1 and IC (the query's own) forced; the top S of the visible blocks IC and below), and NSA's compression
branch (``parallel_nsa_compression``: attention over the means of the complete blocks of keys and values)
against its float64 golden. Prints one JSON line: for bf16, the rows whose selected set differs from float64's where the S-th and (S+1)-th importances are
more than TIE apart (a near tie may go either way), duplicates, and the largest error of the selected branch
run on the kernel's own selection against golden attention over the blocks it selected."""

import json
import math

import torch

from attnum.kernels.triton import interp as triton_interp

triton_interp.enable()

from attnum import golden_attention  # noqa: E402
from attnum.audit.probes.block_select import causal_keep, select_mask  # noqa: E402
from attnum.kernels.adapters import fla  # noqa: E402

T, GQ, D, BS, COUNT = 128, 16, 64, 16, 4
TIE = 1e-2  # importance units (a forced block counts GQ)


def golden_selection(q, k_cmp):
    """(T, S) sets in float64: q (T, GQ, D), k_cmp (TC, D) the exact block means."""
    scale = 1.0 / math.sqrt(D)
    s = torch.einsum("tgd,cd->tgc", q, k_cmp) * scale  # (T, GQ, TC)
    out, gaps = [], []
    for t in range(T):
        nc, ic = (t + 1) // BS, t // BS
        lse = torch.logsumexp(s[t, :, :nc], dim=-1) if nc else torch.zeros(GQ, dtype=torch.float64)
        imp = torch.exp(s[t, :, :ic] - lse[:, None]).sum(0) if ic else torch.zeros(0, dtype=torch.float64)
        imp = torch.cat([imp, torch.zeros(1, dtype=torch.float64)])  # block IC
        for c in {0, ic - 1, ic} - {-1}:
            imp[c] = float(GQ)
        order = torch.argsort(imp, descending=True, stable=True)
        take = min(COUNT, ic + 1)
        out.append(set(order[:take].tolist()))
        gaps.append(float(imp[order[take - 1]] - imp[order[take]]) if take < ic + 1 else math.inf)
    return out, gaps


def main():
    mod = fla.nsa_load()
    pooling = __import__("sys").modules["fla.ops.utils.pooling"]
    run = triton_interp.under(lambda *a, **kw: mod.parallel_nsa_topk(*a, **kw), "faithful")
    sdpa = triton_interp.under(fla.nsa_sdpa, "faithful")
    cmp = triton_interp.under(lambda *a, **kw: __import__("sys").modules["fla.ops.nsa.compression"]
                              .parallel_nsa_compression(*a, **kw), "faithful")
    got = {}
    for dt in (torch.bfloat16,):
        g = torch.Generator().manual_seed(1)
        q = torch.randn(1, T, GQ, D, generator=g).to(dt)
        k = (torch.randn(1, T, 1, D, generator=g) + torch.randn(1, T // BS, 1, D, generator=g).repeat_interleave(
            BS, 1)).to(dt)  # blocks with distinct means: importances spread out
        v = torch.randn(1, T, 1, D, generator=g).to(dt)
        k_cmp = pooling.mean_pooling(k, BS, None)
        idx = run(q, k_cmp, TK=T, lse=None, block_counts=COUNT, block_size=BS, scale=1.0 / math.sqrt(D))
        sets, gaps = golden_selection(q[0].double(), k[0, :, 0].double().view(T // BS, BS, D).mean(1))
        rows = idx[0, :, 0].long()
        dup = sum(len([x for x in r.tolist() if x >= 0]) != len({x for x in r.tolist() if x >= 0}) for r in rows)
        wrong = [t for t in range(T) if {x for x in rows[t].tolist() if x >= 0} != sets[t] and gaps[t] > TIE]
        near = sum(gap <= TIE for gap in gaps)
        # the selected branch on the kernel's own selection, against golden over those blocks
        qs, ks, vs = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (1, GQ, T, D), (1, 1, T, D)
        sel = rows.view(1, 1, T, -1)
        o = sdpa(qs, ks, vs, is_causal=True, enable_gqa=True, block_indices=sel, block_size=BS)
        keep = select_mask(sel, T, BS, causal_keep(T, T, "bottom_right"))
        ref = golden_attention(qs, ks.expand(1, GQ, T, D), vs.expand(1, GQ, T, D), attn_mask=keep)
        # the compression branch: attention over the complete blocks' means (float64 golden), a query with
        # no complete block 0; bound: the scores' error from the rounded q * scale and block means, then
        # the rounded means of V, P and the output (module docstring)
        o_cmp, _ = cmp(q, k_cmp, pooling.mean_pooling(v, BS, None), TK=T, block_size=BS, scale=1.0 / math.sqrt(D))
        kbar = k[0, :, 0].double().view(T // BS, BS, D).mean(1)
        vbar = v[0, :, 0].double().view(T // BS, BS, D).mean(1)
        qd = q[0].double()  # (T, GQ, D)
        s = torch.einsum("tgd,cd->tgc", qd, kbar) / math.sqrt(D)
        size = torch.einsum("tgd,cd->tgc", qd.abs(), kbar.abs()) / math.sqrt(D)
        nc = (torch.arange(T) + 1) // BS
        vis = torch.arange(T // BS)[None, :] < nc[:, None]  # (T, TC)
        p = torch.softmax(s.masked_fill(~vis[:, None, :], -math.inf), dim=-1).nan_to_num(0.0)
        gold = torch.einsum("tgc,cd->tgd", p, vbar)
        u, vmax = 2.0 ** -8, float(vbar.abs().max())
        bound = 2 * float((2 * u * size * vis[:, None, :]).amax()) * vmax + 3 * u * vmax
        got_cmp = {"cmp_err": float((o_cmp[0].double() - gold).abs().max()), "cmp_bound": bound,
                   "cmp_empty_rows_zero": bool((o_cmp[0, :BS - 1] == 0).all())}
        got[str(dt).split(".")[-1]] = {**got_cmp, "wrong": wrong, "duplicates": dup, "near_ties": near,
                                       "branch_err": float((o.double() - ref).abs().max()),
                                       "finite": bool(torch.isfinite(o).all()), "vmax": float(v.abs().max())}
    print(json.dumps(got))


main()
