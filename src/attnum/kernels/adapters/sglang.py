"""``sglang-decode`` / ``sglang-merge``: SGLang's Triton attention (``sglang.srt.layers.attention.triton_ops``).

- ``decode_attention_fwd``: one query per sequence over a token pool (``kv_indptr``/``kv_indices``,
  page size 1; a paged cache becomes token indices through the block table), split-KV in two stages
  with ``num_kv_splits`` splits, natural-log merge; it returns no LSE (``return_lse`` is unsupported).
  Declared: softcap (its ``logit_cap``) and sinks.
- ``merge_state_triton``: the two-state merge of ``(o, lse)`` pairs, natural log, +inf read as -inf.
- ``extend_attention_fwd`` (as SDPA): the N new tokens of each sequence attend to its S - N cached
  prefix tokens (a token pool) and, causally, to one another: bottom-right alignment; S >= N only. Its
  tiles are the non-CUDA branch's (64 x 64 here; sm90 would take 128 x 64): only the order of sums differs.
  Declared: softcap (``logit_cap``), window (``sliding_window_size`` = W - 1; 0 turns it off, so W = 1 is
  refused; without ``is_causal`` the right side is unbounded) and sinks.
- ``context_attention_fwd`` (as SDPA): plain prefill, no cache: B sequences of N tokens packed as tokens
  (``b_start_loc``, ``b_seq_len``); N = S only (each query's keys are its own sequence), causal or not;
  no scale argument (it takes 1 / sqrt(d)): another scale is unsupported. Tiles 64 x 64 (non-CUDA branch;
  sm90 takes 128 x 128).

From the installed ``sglang`` or a pinned wheel (``attnum kernels fetch sglang[@VERSION]``, default 0.5.3;
``sglang-merge@0.5.23`` runs 0.5.23's files, moved to ``sglang/kernels/ops/attention``; attnum.kernels.wheels.source),
each call checked against the version's signature (the ``*_CALL`` tables).
On CPU through Triton's interpreter (GPU arithmetic: attnum.kernels.triton.faithful), with CUDA natively.
"""

from __future__ import annotations

import math

import torch

from attnum.kernels import serving_layout as lay
from attnum.kernels.protocol import serving_kernel
from attnum.kernels.serving import ServingTarget
from attnum.kernels.wheels import signature as sig
from attnum.kernels.wheels import source as wheels

PACKAGE = "sglang"
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_OPS = "sglang.srt.layers.attention.triton_ops."

# How each entry point is called (attnum.kernels.wheels.signature). SGLang 0.5.10 inserted the required
# ``k_scale, v_scale`` (floats multiplied into sm_scale / the output: 1.0 for a bf16 / fp16 / fp32 cache) after
# ``sm_scale`` in decode and after ``max_len_extend`` in extend, so sm_scale is passed by name.
_UNIT_SCALES = {"k_scale": 1.0, "v_scale": 1.0}
DECODE_CALL = sig.Call(leaf="decode_attention", function="decode_attention_fwd", positional=(
    "q", "k_buffer", "v_buffer", "o", "kv_indptr", "kv_indices", "attn_logits", "attn_lse", "num_kv_splits",
    "max_kv_splits", "sm_scale"), fills=_UNIT_SCALES)
MERGE_CALL = sig.Call(leaf="merge_state", function="merge_state_triton", positional=(
    "prefix_output", "prefix_lse", "suffix_output", "suffix_lse", "output", "output_lse"))
EXTEND_CALL = sig.Call(leaf="extend_attention", function="extend_attention_fwd", positional=(
    "q_extend", "k_extend", "v_extend", "o_extend", "k_buffer", "v_buffer", "qo_indptr", "kv_indptr", "kv_indices",
    "custom_mask", "is_causal", "mask_indptr", "max_len_extend"), keywords=("sm_scale",), fills=_UNIT_SCALES)
CONTEXT_CALL = sig.Call(leaf="prefill_attention", function="context_attention_fwd", positional=(
    "q", "k", "v", "o", "b_start_loc", "b_seq_len", "max_input_len"), keywords=("is_causal",))


def _mod(name: str):
    """The kernel file ``<name>.py`` of the SGLang version this process runs
    (sglang/srt/layers/attention/triton_ops up to 0.5.15, sglang/kernels/ops/attention since 0.5.16)."""
    return wheels.load(PACKAGE, wheels.module_named(PACKAGE, name) or _OPS + name)


def _checker(call: sig.Call):
    return lambda version: sig.problem(PACKAGE, version, call)


def _sinks(sinks, q, kernel: str):
    """(H,) float32 on q's device, one logit per query head (its ``sinks``), or None."""
    if sinks is None:
        return None
    sk = sinks.to(device=q.device, dtype=torch.float32).contiguous()
    if sk.shape != (q.shape[1],):
        raise NotImplementedError(f"{kernel}: sinks of shape {tuple(sk.shape)}, not ({q.shape[1]},)")
    return sk


def decode(q, k_cache, v_cache, *, cache_seqlens, block_table=None, num_splits=1, max_seqlen=None, is_causal=True,
           scale=None, return_lse=False, out=None, lse_out=None, softcap=None, sinks=None):
    """attnum's decode protocol -> ``decode_attention_fwd`` (N = 1; bottom-right causal is implicit); ``softcap``
    is its ``logit_cap`` (``cap * tanh(s / cap)``, tanh as ``2 sigmoid(2x) - 1``), ``sinks`` its stage-2 sinks."""
    B, H, N, d = q.shape
    if N != 1:
        raise NotImplementedError("sglang decode_attention_fwd: one query per sequence")
    if return_lse:
        raise NotImplementedError("sglang decode_attention_fwd returns no LSE")
    lens = lay.lengths(cache_seqlens)
    k, v, indptr, indices = lay.token_pool(k_cache, v_cache, lens, block_table)
    dv = v.shape[-1]
    o = out[:, :, 0, :] if out is not None else torch.empty(B, H, dv, dtype=q.dtype, device=q.device)
    logits = torch.empty(B, H, num_splits, dv, dtype=torch.float32, device=q.device)
    lse = torch.empty(B, H, num_splits, dtype=torch.float32, device=q.device)
    splits = torch.full((B,), num_splits, dtype=torch.int32, device=q.device)
    sm_scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    fn = _mod("decode_attention").decode_attention_fwd
    who = "sglang decode_attention_fwd"
    fn(q[:, :, 0].contiguous(), k, v, o, indptr, indices, logits, lse, splits, num_splits, sm_scale,
       **sig.keywords(fn, DECODE_CALL),
       **sig.feature_keywords(fn, who, logit_cap=(lay.softcap_value(softcap, who), 0.0), sinks=(_sinks(sinks, q, who), None)))
    return out if out is not None else o.unsqueeze(2)


def merge_state(o_a, lse_a, o_b, lse_b, out=None, lse_out=None):
    """``merge_state_triton(prefix_o, prefix_lse, suffix_o, suffix_lse, output, output_lse)``."""
    o, lse = _mod("merge_state").merge_state_triton(o_a.contiguous(), lse_a.contiguous(), o_b.contiguous(),
                                                    lse_b.contiguous(), out, lse_out)
    return o, lse


def extend(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
           softcap=None, window_size=None, sinks=None):
    """SDPA -> ``extend_attention_fwd``: prefix = the first S - N keys, extend = the last N. ``softcap``: its
    ``logit_cap``; ``window_size``: its ``sliding_window_size`` = W - 1 (key j visible from position p when
    ``p <= j + W - 1``; without ``is_causal`` the right side is unbounded); ``sinks``: its ``sinks``."""
    lay.refuse_sdpa_extras("sglang extend_attention_fwd", query, key, attn_mask, enable_gqa)
    who = "sglang extend_attention_fwd"
    W = lay.window_extent(window_size, bool(is_causal), who, non_causal="left")
    if W == 1:  # its sliding_window_size = W - 1 = 0 means "no window"
        raise NotImplementedError(f"{who}: a window of one key (sliding_window_size 0 turns the window off)")
    feats = dict(logit_cap=lay.softcap_value(softcap, who), sliding_window_size=W - 1 if W else -1,
                 sinks=_sinks(sinks, query, who))
    B, H, N, d = query.shape
    S = key.shape[2]
    if not 1 <= N <= S:
        raise NotImplementedError("sglang extend_attention_fwd: the N queries are the last N of S keys (S >= N >= 1)")
    prefix = S - N

    k_buf, v_buf, indptr, indices = lay.token_pool(key, value, [prefix] * B)
    q_ext, k_ext, v_ext = lay.tokens(query), lay.tokens(key[:, :, prefix:]), lay.tokens(value[:, :, prefix:])
    o = torch.empty(B * N, H, value.shape[-1], dtype=query.dtype, device=query.device)
    qo = torch.arange(0, (B + 1) * N, N, dtype=torch.int32, device=query.device)
    sm_scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    fn = _mod("extend_attention").extend_attention_fwd
    fn(q_ext, k_ext, v_ext, o, k_buf, v_buf, qo, indptr, indices, None, bool(is_causal), None, N, sm_scale=sm_scale,
       **sig.keywords(fn, EXTEND_CALL),
       **sig.feature_keywords(fn, who, **{k: (v, {"logit_cap": 0.0, "sliding_window_size": -1, "sinks": None}[k])
                                          for k, v in feats.items()}))
    return lay.untokens(o, B, N)


def context_varlen(qs, ks, vs, *, is_causal=True):
    """``context_attention_fwd`` on B sequences of their own lengths, packed as tokens: qs[b] (1, H, L_b, d),
    ks[b], vs[b] (1, G, L_b, d); ``b_start_loc`` = cumulative L_b, ``b_seq_len`` = L_b. Returns the
    outputs (1, H, L_b, d), one per sequence."""
    def tokens(x):  # (1, G, L, d) -> (L, G, d)
        return x[0].permute(1, 0, 2)

    lens = [q.shape[2] for q in qs]
    q, k, v = (torch.cat([tokens(x) for x in xs]).contiguous() for xs in (qs, ks, vs))
    o = torch.empty(q.shape[0], q.shape[1], vs[0].shape[-1], dtype=q.dtype, device=q.device)
    start = torch.tensor([0, *lens[:-1]], device=q.device).cumsum(0).to(torch.int32)
    seq = torch.tensor(lens, dtype=torch.int32, device=q.device)
    _mod("prefill_attention").context_attention_fwd(q, k, v, o, start, seq, max(lens), is_causal=bool(is_causal))
    return [o[s:s + L].permute(1, 0, 2).unsqueeze(0) for s, L in zip(start.tolist(), lens, strict=True)]


def context(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """SDPA -> ``context_attention_fwd``: B sequences of N = S tokens, packed (:func:`context_varlen`)."""
    lay.refuse_sdpa_extras("sglang context_attention_fwd", query, key, attn_mask, enable_gqa)
    B, H, N, d = query.shape
    S = key.shape[2]
    if N != S or N == 0:
        raise NotImplementedError("sglang context_attention_fwd: queries and keys are one sequence (N = S >= 1)")
    if value.shape[-1] != d:
        raise NotImplementedError("sglang context_attention_fwd: head dim of V == head dim of Q only")
    if scale is not None and not math.isclose(float(scale), 1.0 / d ** 0.5, rel_tol=1e-12):
        raise NotImplementedError("sglang context_attention_fwd: no scale argument (it takes 1 / sqrt(d))")
    outs = context_varlen(query.split(1), key.split(1), value.split(1), is_causal=is_causal)
    return torch.cat(outs)


def context_packed(q, k, v, *, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, is_causal=False,
                   scale=None):
    """attnum's varlen protocol -> ``context_attention_fwd`` on the packed tokens as they come: ``b_start_loc``
    = cu_seqlens[:-1], ``b_seq_len`` its differences (zero-length sequences included). One set of lengths
    for queries and keys, 1 / sqrt(d) as the scale, dv = d: other calls are unsupported."""
    if not torch.equal(cu_seqlens_q.cpu(), cu_seqlens_k.cpu()):
        raise NotImplementedError("sglang context_attention_fwd: one set of lengths (queries and keys equal)")
    d = q.shape[-1]
    if v.shape[-1] != d:
        raise NotImplementedError("sglang context_attention_fwd: head dim of V == head dim of Q only")
    if scale is not None and not math.isclose(float(scale), 1.0 / d ** 0.5, rel_tol=1e-12):
        raise NotImplementedError("sglang context_attention_fwd: no scale argument (it takes 1 / sqrt(d))")
    cu = cu_seqlens_q.to(device=q.device, dtype=torch.int32)
    seq = cu[1:] - cu[:-1]
    o = torch.empty(q.shape[0], q.shape[1], d, dtype=q.dtype, device=q.device)
    _mod("prefill_attention").context_attention_fwd(q.contiguous(), k.contiguous(), v.contiguous(), o,
                                                    cu[:-1].contiguous(), seq.contiguous(),
                                                    max(1, int(seq.max())), is_causal=bool(is_causal))
    return o


DECODE = ServingTarget("sglang-decode", decode=decode, lse_base="e", single_query_only=True, accepts_out=True,
                       split_rule="fixed-splits", features=("softcap", "sinks"))
MERGE = ServingTarget("sglang-merge", merge_state=merge_state, lse_base="e", accepts_out=True)
EXTEND = ServingTarget("sglang-extend", sdpa=extend, causal_alignment="bottom_right",
                       features=("softcap", "window", "sinks"))
CONTEXT = ServingTarget("sglang-context", sdpa=context, varlen=context_packed, causal_alignment="bottom_right")


KERNELS = (
    serving_kernel(DECODE, "SGLang decode_attention_fwd (Triton; single query, token pool)", package=PACKAGE,
                   dtypes=DTYPES, check=_checker(DECODE_CALL)),
    serving_kernel(MERGE, "SGLang merge_state_triton (Triton)", package=PACKAGE, dtypes=DTYPES,
                   check=_checker(MERGE_CALL)),
    serving_kernel(EXTEND, "SGLang extend_attention_fwd (Triton; prefill over a prefix, as SDPA)", package=PACKAGE,
                   dtypes=DTYPES, check=_checker(EXTEND_CALL)),
    serving_kernel(CONTEXT, "SGLang context_attention_fwd (Triton; prefill, N = S, as SDPA)", package=PACKAGE,
                   dtypes=DTYPES, check=_checker(CONTEXT_CALL)),
)
