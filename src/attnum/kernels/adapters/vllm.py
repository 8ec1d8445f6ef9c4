"""vLLM (vllm-project/vllm): every kernel attnum runs from it, one section per upstream file.

Triton kernels (``vllm/v1/attention/ops``), from the installed ``vllm`` or the pinned wheel (``attnum kernels
fetch vllm``; :mod:`attnum.kernels.wheels.source`); on CPU through Triton's interpreter (GPU arithmetic:
:mod:`attnum.kernels.triton.faithful`), with CUDA natively:

- ``vllm-unified`` -- ``triton_unified_attention.unified_attention``: variable-length prefill and decode over a
  paged cache (pages (n, P, G, d), ``block_table``, ``seqused_k``, ``cu_seqlens_q``); the queries are the last
  positions of each sequence (bottom-right causal). ``num_splits`` > 1 takes its 3D path
  (``num_par_softmax_segments`` segments, then ``reduce_segments``). As SDPA: q (B, H, N, d) become B sequences
  of N queries over S keys, the contiguous K/V cut into pages of 16. It returns no LSE. Its block table is
  widened as vLLM's own is (:func:`vllm_block_table`): the kernel reads it a tile past a sequence's pages.
  Declared and passed through every entry point: ``softcap``, ``window_size`` (the kernel reads
  ``1 + window_size[0]``: causal ``p - W < j <= p``, non-causal ``|p - j| < W``) and ``sinks``.
- ``vllm-triton-merge`` -- ``triton_merge_attn_states.merge_attn_states``: two-state merge, LSE head-major
  (H, T), natural log.
- ``vllm-triton-decode`` -- ``triton_decode_attention.decode_attention_fwd``: one query per sequence over a
  paged cache (``req_to_token`` = the block table, ``page_size``), ``num_kv_splits`` splits, and an LSE output
  (declared: softcap, its ``logit_cap``; 0.33 has no window -- 0.34 adds ``sliding_window``);
  ``vllm-mla-decode``: the same entry with ``is_mla=True`` (the grouped kernel for H / G > 1; MLA: a latent
  cache whose first dv dims are the values, declared ``attnum_mla``; the mla-latent-decode probe).
- ``vllm-prefix-prefill`` -- ``prefix_prefill.context_attention_fwd``: chunked prefill over a cached prefix:
  each sequence's first ``L - N`` tokens (its context) are read from the paged cache in vLLM's older layout --
  K ``[num_blocks, G, d / x, block_size, x]``, V ``[num_blocks, G, d, block_size]``, x = 16 bytes / element
  size -- through ``b_loc`` (the block table); its last N tokens (the new chunk) come as dense ``k``/``v``
  tokens beside the queries (``b_start_loc``: cumulative query lengths, ``b_seq_len``: L). The queries are the
  last N positions (bottom-right causal; ``is_causal=False`` makes the chunk bidirectional, the context stays
  visible). Its context loop runs in 32-token tiles (``TRITON_BLOCK_SIZE``), the chunk in 128 x 64; it divides
  by ``l + 1e-10`` (a row with no key would come out 0, a finite sentinel) and returns no LSE. It takes a
  ``sliding_window`` and ``sinks`` (declared: window, sinks; a non-causal window is bounded on the left only). Its ``tl.dot``
  takes Triton's default ``input_precision`` (TF32 on sm80+ for fp32; IEEE only on Turing). Entry points:
  SDPA (S - N context tokens, paged here in blocks of 16, then the last N dense; S >= N) and decode (the
  protocol's cache, contiguous or a page pool (n, P, G, d), relaid into vLLM's layout whole -- every page, NaN
  pages included -- with the protocol's block table, widened as vLLM's own is (:func:`vllm_block_table`: its
  context loop reads the table unmasked a 32-token tile at a time, and says so); L >= N per sequence).

CUDA kernel of the installed package:

- ``vllm-merge`` -- ``merge_attn_states`` (prefix/suffix merge of chunked prefill) as a merge target. vLLM
  writes into a preallocated output and keeps the LSE head-major: outputs (tokens, heads, dim), LSE
  (heads, tokens) float32, natural log; the adapter transposes to the protocol's (tokens, heads). The CUDA
  kernel maps +-inf LSEs to -inf (it accepts FA2's +inf empty rows); the Triton one gave NaN for two empty
  states before vllm#39148. Not an attention kernel: SDPA calls are unsupported.
"""

from __future__ import annotations

import functools
import importlib
import math

import torch

from attnum.kernels import serving_layout as lay
from attnum.kernels.protocol import sdpa_kernel, serving_kernel
from attnum.kernels.serving import ServingTarget
from attnum.kernels.wheels import signature as sig
from attnum.kernels.wheels import source as wheels

PACKAGE = "vllm"
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_OPS = "vllm.v1.attention.ops."
PAGE = 16


# -- triton_unified_attention.py, triton_merge_attn_states.py, triton_decode_attention.py ------------------



def _mod(name: str):
    """The kernel file ``<name>.py`` of the vLLM version this process runs (vllm/attention/ops up to 0.13.0,
    vllm/v1/attention/ops since 0.14.0)."""
    return wheels.load(PACKAGE, wheels.module_named(PACKAGE, name) or _OPS + name)


# How each entry point is called, checked against a version's signature before it runs (attnum.kernels.wheels.
# signature): the leading arguments are passed by position, so a version that renamed or moved one is refused.
UNIFIED_CALL = sig.Call(leaf="triton_unified_attention", function="unified_attention", positional=(
    "q", "k", "v", "out", "cu_seqlens_q", "max_seqlen_q", "seqused_k", "max_seqlen_k", "softmax_scale", "causal",
    "window_size", "block_table", "softcap", "q_descale", "k_descale", "v_descale"), keywords=(
    "seq_threshold_3D", "num_par_softmax_segments", "softmax_segm_output", "softmax_segm_max", "softmax_segm_expsum"))
MERGE_CALL = sig.Call(leaf="triton_merge_attn_states", function="merge_attn_states", positional=(
    "output", "prefix_output", "prefix_lse", "suffix_output", "suffix_lse", "output_lse"))
DECODE_CALL = sig.Call(leaf="triton_decode_attention", function="decode_attention_fwd", positional=(
    "q", "k_buffer", "v_buffer", "o", "lse", "req_to_token", "b_seq_len", "attn_logits", "num_kv_splits", "sm_scale"),
    keywords=("page_size",), optional=("is_mla",))  # is_mla since 0.21.0 (the MHA call leaves it out before)
MLA_CALL = sig.Call(leaf="triton_decode_attention", function="decode_attention_fwd",
                    positional=DECODE_CALL.positional, keywords=("page_size", "is_mla"))
PREFIX_CALL = sig.Call(leaf="prefix_prefill", function="context_attention_fwd", positional=(
    "q", "k", "v", "o", "kv_cache_dtype", "k_cache", "v_cache", "b_loc", "b_start_loc", "b_seq_len", "max_seq_len",
    "max_input_len", "k_scale", "v_scale"), keywords=("sm_scale",), optional=("causal",))  # causal since 0.21.0


def _checker(call: sig.Call):
    return lambda version: sig.problem(PACKAGE, version, call)


def _call(fn, *args, **kw):
    """``fn(*args, **kw)``: an ``assert`` in vLLM's host code is its refusal of the call (``unsupported``: up to
    0.22.0 ``unified_attention`` asserts "Only causal attention is supported"), and the one construct of older
    files Triton's interpreter cannot run is said as such (0.13.0's ``prefix_prefill`` loads one block number,
    a scalar, and indexes it as ``bn[None, :]``, which compiled Triton broadcasts and the interpreter's numpy
    refuses; later releases load a vector there)."""
    import traceback

    try:
        return fn(*args, **kw)
    except AssertionError as exc:
        last = traceback.extract_tb(exc.__traceback__)[-1]
        if last.name != fn.__name__:  # raised deeper (a kernel's device assert): not a refusal of the call
            raise
        raise NotImplementedError(f"vllm {fn.__name__} refuses this call: {exc}") from exc
    except Exception as exc:
        if "too many indices for tensor of rank 0" not in str(exc):
            raise
        raise NotImplementedError(f"vllm {fn.__name__} of this release indexes a loaded scalar as a vector "
                                  "(bn[None, :]), which Triton's interpreter cannot run; run it with CUDA") from exc


TABLE_TOKENS = 128  # vLLM's BlockTable rows are a multiple of 128 tokens wide (``get_block_table_width``)


def vllm_block_table(table: torch.Tensor, page: int) -> torch.Tensor:
    """``table`` (B, m) as vLLM hands it to its kernels: rows widened with zeros to a multiple of 128
    tokens (``vllm/v1/worker/block_table.py``, ``get_block_table_width``: ``token_alignment=128``; vLLM
    zero-fills its tables). ``kernel_unified_attention`` and ``prefix_prefill._fwd_kernel`` load the table
    unmasked a whole KV tile at a time (32 tokens), so a sequence whose last tile runs past its last page
    reads the entries after it ("the tile never steps past this batch's block-table row; the block-table
    load stays unmasked", prefix_prefill.py); vLLM's padding keeps those inside the table (and the K/V
    loads they address are masked)."""
    align = TABLE_TOKENS // math.gcd(TABLE_TOKENS, page)
    width = -(-table.shape[1] // align) * align
    return torch.nn.functional.pad(table.to(torch.int32), (0, width - table.shape[1])).contiguous()


def _features(q, causal: bool, softcap, window_size, sinks, kernel: str) -> dict:
    """The protocol's score features (attnum.kernels.conventions) as ``unified_attention`` takes them:
    ``softcap`` a float (0 = off), ``window_size`` vLLM's ``(W - 1, 0)`` (its kernel reads only the left side:
    ``SLIDING_WINDOW = 1 + window_size[0]``; causal: keys ``p - W < j <= p``, not causal: ``|p - j| < W``),
    ``sinks`` (H,) float32 on the device."""
    w = lay.window_extent(window_size, causal, kernel, non_causal="symmetric")
    sk = None
    if sinks is not None:
        sk = sinks.to(device=q.device, dtype=torch.float32).contiguous()
        if sk.shape != (q.shape[1],):
            raise NotImplementedError(f"{kernel}: sinks of shape {tuple(sk.shape)}, not ({q.shape[1]},)")
    return {"softcap": lay.softcap_value(softcap, kernel), "window": (w - 1, 0) if w else (-1, -1), "sinks": sk}


def _unified(q_tok, k_pages, v_pages, out_tok, *, cu_q, used_k, max_q, scale, causal, table, num_splits,
             softcap=0.0, window=(-1, -1), sinks=None, fp8=False):
    T, H, d = q_tok.shape
    table = vllm_block_table(table, k_pages.shape[1])
    fn = _mod("triton_unified_attention").unified_attention
    descales, kw = (None, None, None), {}
    if fp8:  # the FP8 serving path (below): Q and the pages quantised, the descales as the backend passes them
        q_tok, k_pages, v_pages, descales, kw = _fp8_call(q_tok, k_pages, v_pages, len(used_k))
    if num_splits > 1:
        hp = 1 << (d - 1).bit_length()
        f32 = dict(dtype=torch.float32, device=q_tok.device)
        kw.update(seq_threshold_3D=1 << 30, num_par_softmax_segments=num_splits,
                  softmax_segm_output=torch.empty(T, H, num_splits, hp, **f32),
                  softmax_segm_max=torch.empty(T, H, num_splits, **f32),
                  softmax_segm_expsum=torch.empty(T, H, num_splits, **f32))
    _call(fn, q_tok, k_pages, v_pages, out_tok, cu_q, max_q, used_k, max(int(used_k.max()), 1), scale, causal, window,
          table, softcap, *descales, **sig.feature_keywords(fn, "vllm unified_attention", sinks=(sinks, None)),
          **kw)
    return out_tok


def _check_unified(q, v):
    if v.shape[-1] != q.shape[-1]:
        raise NotImplementedError("vllm unified_attention: head dim of V == head dim of Q only")


def unified_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
                 softcap=None, window_size=None, sinks=None, fp8=False):
    """Prefill: B sequences of N queries, the last N of S positions. ``fp8``: the FP8 serving path (``_fp8_call``)."""
    lay.refuse_sdpa_extras("vllm unified_attention", query, key, attn_mask, enable_gqa)
    feats = _features(query, bool(is_causal), softcap, window_size, sinks, "vllm unified_attention")
    B, H, N, d = query.shape
    S = key.shape[2]
    if 0 in (N, S):
        raise NotImplementedError("vllm unified_attention: N, S >= 1")
    _check_unified(query, value)
    kp, vp, table = lay.pages_of(key, value, [S] * B, PAGE)
    dev = query.device
    cu_q = torch.arange(0, (B + 1) * N, N, dtype=torch.int32, device=dev)
    used = torch.full((B,), S, dtype=torch.int32, device=dev)
    out = torch.empty(B * N, H, d, dtype=query.dtype, device=dev)
    sc = 1.0 / math.sqrt(d) if scale is None else float(scale)
    _unified(lay.tokens(query), kp, vp, out, cu_q=cu_q, used_k=used, max_q=N, scale=sc, causal=bool(is_causal),
             table=table, num_splits=1, fp8=fp8, **feats)
    return lay.untokens(out, B, N)


def unified_decode(q, k_cache, v_cache, *, cache_seqlens, block_table=None, num_splits=1, max_seqlen=None, is_causal=True,
           scale=None, return_lse=False, out=None, lse_out=None, softcap=None, window_size=None, sinks=None, fp8=False):
    """attnum's decode protocol -> ``unified_attention`` (N queries per sequence, pages as they come)."""
    if return_lse:
        raise NotImplementedError("vllm unified_attention returns no LSE")
    feats = _features(q, bool(is_causal), softcap, window_size, sinks, "vllm unified_attention")
    _check_unified(q, v_cache)
    B, H, N, d = q.shape
    lens = lay.lengths(cache_seqlens)
    if block_table is None:
        k_cache, v_cache, block_table = lay.pages_of(k_cache, v_cache, lens, PAGE)
    dev = q.device
    cu_q = torch.arange(0, (B + 1) * N, N, dtype=torch.int32, device=dev)
    used = torch.tensor(lens, dtype=torch.int32, device=dev)
    buf = lay.token_out(out, q)
    sc = 1.0 / math.sqrt(d) if scale is None else float(scale)
    _unified(lay.tokens(q), k_cache.contiguous(), v_cache.contiguous(), buf, cu_q=cu_q, used_k=used, max_q=N, scale=sc,
             causal=bool(is_causal), table=block_table.to(torch.int32).contiguous(), num_splits=num_splits, fp8=fp8,
             **feats)
    return lay.written(out, buf, B, N)


def unified_varlen(q, k, v, *, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, is_causal=False,
           scale=None, softcap=None, window_size=None, sinks=None, fp8=False):
    """attnum's varlen protocol -> ``unified_attention``: ``cu_seqlens_q`` as given, each sequence's packed keys
    cut into pages of 16 (``seqused_k`` = its key count), its queries the last of its keys (bottom-right)."""
    _check_unified(q, v)
    feats = _features(q, bool(is_causal), softcap, window_size, sinks, "vllm unified_attention")
    spans = lay.varlen_spans(cu_seqlens_q, cu_seqlens_k)
    kc, vc, lens = lay.padded_cache(k, v, spans)
    kp, vp, table = lay.pages_of(kc, vc, lens, PAGE)
    dev = q.device
    out = torch.empty(q.shape[0], q.shape[1], v.shape[-1], dtype=q.dtype, device=dev)
    sc = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    _unified(q.contiguous(), kp, vp, out, cu_q=cu_seqlens_q.to(device=dev, dtype=torch.int32),
             used_k=torch.tensor(lens, dtype=torch.int32, device=dev),
             max_q=max([1] + [q1 - q0 for q0, q1, _, _ in spans]), scale=sc, causal=bool(is_causal), table=table,
             num_splits=1, fp8=fp8, **feats)
    return out


# -- the FP8 serving path: kv_cache_dtype="fp8" on the Triton backend ------------------------------------

FP8 = "e4m3fn"  # current_platform.fp8_dtype() on CUDA
FP8_SCALES = {"q": 1.0, "k": 0.7, "v": 1.6}
"""The per-tensor scales ``vllm-unified-fp8kv`` declares: ``q_scale`` 1.0 (vLLM's when the checkpoint has none,
and the only one its backend took before 0.22.0), ``k_scale`` / ``v_scale`` as a calibrated checkpoint's: not 1
(a scale the kernel drops or misapplies shows) and not powers of two (their fp32 products round), with room for
the probes' inputs (|K| up to 314, |V| up to 717 before the cache clamps)."""


def _fp8(x: torch.Tensor, scale: float) -> torch.Tensor:
    """x quantised as vLLM's writer stores it (x / scale clamped to +-448, rounded once), as float8_e4m3fn."""
    from attnum.attention.lowbit.qformats import per_tensor_fp8

    return per_tensor_fp8(x, FP8, scale).to(torch.float8_e4m3fn)


def _fp8_call(q_tok, k_pages, v_pages, num_seqs: int):
    """What ``TritonAttentionImpl.forward`` hands ``unified_attention`` with ``kv_cache_dtype="fp8"`` on CUDA:
    the queries quantised by the attention layer (``QuantFP8``, static per tensor, at ``layer._q_scale``), the
    pages written by ``triton_reshape_and_cache_flash`` at ``k_scale`` / ``v_scale``, the descales
    ``layer._k_scale.expand(num_seqs, G)`` (and ``_v_scale``), ``kv_quant_mode`` FP8_PER_TENSOR (where the release
    takes it; before, the kernel read FP8 from the cache's dtype), and ``q_descale``: ``layer._q_scale`` from
    0.22.0 (vllm#42080: the kernel takes a ``q_scale``), None before, when the backend asserted q_scale == 1.
    Returns (q, k, v, (q_descale, k_descale, v_descale), keywords)."""
    import importlib
    import inspect

    mod = _mod("triton_unified_attention")
    dev, G = q_tok.device, k_pages.shape[2]
    one = {r: torch.tensor(s, dtype=torch.float32, device=dev) for r, s in FP8_SCALES.items()}  # layer._q_scale...
    kernel = mod.kernel_unified_attention
    takes_q = "q_scale" in inspect.signature(getattr(kernel, "fn", kernel)).parameters
    if not takes_q and FP8_SCALES["q"] != 1.0:
        raise NotImplementedError("vllm unified_attention of this release takes no q scale (FP8 queries at 1.0 only)")
    kw = {}
    if sig.takes(mod.unified_attention, "kv_quant_mode"):
        kw["kv_quant_mode"] = importlib.import_module("vllm.v1.kv_cache_interface").KVQuantMode.FP8_PER_TENSOR
    descales = (one["q"] if takes_q else None, one["k"].expand(num_seqs, G), one["v"].expand(num_seqs, G))
    return (_fp8(q_tok, FP8_SCALES["q"]), _fp8(k_pages, FP8_SCALES["k"]), _fp8(v_pages, FP8_SCALES["v"]), descales,
            kw)


def triton_merge_state(o_a, lse_a, o_b, lse_b, out=None, lse_out=None):
    """``merge_attn_states(output, prefix_o, prefix_lse (H, T), suffix_o, suffix_lse, output_lse)``. The LSEs
    pass as contiguous (H, T) tensors: up to 0.26.0 the kernel indexes them as ``head * T + token`` whatever
    their strides (0.27.0 reads the strides). The output LSE is computed into a contiguous (H, T) copy of
    ``lse_out`` and copied back, so a row the kernel does not write keeps what ``lse_out`` held."""
    out = torch.empty_like(o_a) if out is None else out
    lse_out = torch.empty_like(lse_a) if lse_out is None else lse_out
    lse_ht = lse_out.T.contiguous()
    _call(_mod("triton_merge_attn_states").merge_attn_states, out, o_a.contiguous(), lse_a.T.contiguous(),
          o_b.contiguous(), lse_b.T.contiguous(), lse_ht)
    lse_out.copy_(lse_ht.T)
    return out, lse_out


def triton_decode(q, k_cache, v_cache, *, cache_seqlens, block_table=None, num_splits=1, max_seqlen=None,
                  is_causal=True, scale=None, return_lse=False, out=None, lse_out=None, mla=False, softcap=None):
    """attnum's decode protocol -> ``decode_attention_fwd`` (N = 1); ``mla``: its MLA path (below); ``softcap``:
    its ``logit_cap`` (``cap * tanh(s / cap)`` on the scaled score, tanh as ``2 sigmoid(2x) - 1``)."""
    B, H, N, d = q.shape
    if N != 1:
        raise NotImplementedError("vllm decode_attention_fwd: one query per sequence")
    lens = lay.lengths(cache_seqlens)
    if block_table is None:
        k_cache, v_cache, block_table = lay.pages_of(k_cache, v_cache, lens, PAGE)
    dv, dev = v_cache.shape[-1], q.device
    o = out[:, :, 0, :] if out is not None else torch.empty(B, H, dv, dtype=q.dtype, device=dev)
    lse = lse_out[:, :, 0] if lse_out is not None else torch.empty(B, H, dtype=torch.float32, device=dev)
    logits = torch.empty(B, H, num_splits, dv + 1, dtype=torch.float32, device=dev)
    sc = 1.0 / math.sqrt(d) if scale is None else float(scale)
    args = (q[:, :, 0].contiguous(), k_cache.contiguous(), v_cache.contiguous(), o, lse,
            block_table.to(torch.int32).contiguous(), torch.tensor(lens, dtype=torch.int32, device=dev), logits,
            num_splits, sc)
    # is_mla as vLLM's Triton MLA backend passes it: decode_attention_fwd itself picks the grouped kernel
    # for H / G > 1 (every real MLA call: one latent head) and the MHA kernel for H == G
    fn = _mod("triton_decode_attention").decode_attention_fwd
    if mla and not sig.takes(fn, "is_mla"):
        raise NotImplementedError("this vLLM's decode_attention_fwd has no is_mla (its MLA path came in 0.21.0)")
    who = "vllm decode_attention_fwd"
    _call(fn, *args, page_size=k_cache.shape[1], **({"is_mla": mla} if sig.takes(fn, "is_mla") else {}),
          **sig.feature_keywords(fn, who, logit_cap=(lay.softcap_value(softcap, who), 0.0)))
    o4 = out if out is not None else o.unsqueeze(2)
    return (o4, lse_out if lse_out is not None else lse.unsqueeze(2)) if return_lse else o4


UNIFIED = ServingTarget("vllm-unified", sdpa=unified_sdpa, decode=unified_decode, varlen=unified_varlen, lse_base="e",
                        causal_alignment="bottom_right", accepts_out=True, split_rule="power-of-two",
                        features=("softcap", "window", "sinks"))
UNIFIED_FP8 = ServingTarget(
    "vllm-unified-fp8kv", sdpa=functools.partial(unified_sdpa, fp8=True),
    decode=functools.partial(unified_decode, fp8=True), varlen=functools.partial(unified_varlen, fp8=True),
    lse_base="e", causal_alignment="bottom_right", accepts_out=True, split_rule="power-of-two",
    features=("softcap", "window", "sinks"), kv_cache_dtype=FP8, k_scale=FP8_SCALES["k"], v_scale=FP8_SCALES["v"],
    q_scale=FP8_SCALES["q"])
"""``unified_attention`` as vLLM's Triton backend runs it with ``kv_cache_dtype="fp8"`` on CUDA (``_fp8_call``): FP8
queries and an FP8 paged cache at per-tensor scales, both GEMMs on FP8 operands, the output in the queries' dtype.
Its FP8 dots need an architecture whose FP8 MMA attnum models for this shape (``--arch sm89``: BLOCK_M = 16 makes
Triton emit ``mma.sync``, which on sm90 is not in MMA-Sim's validated set)."""
MERGE = ServingTarget("vllm-triton-merge", merge_state=triton_merge_state, lse_base="e", accepts_out=True)
TRITON_DECODE = ServingTarget("vllm-triton-decode", decode=triton_decode, lse_base="e", single_query_only=True,
                              accepts_out=True, split_rule="fixed-splits", features=("softcap",))


def mla_decode(q, k_cache, v_cache, **kw):
    """vLLM's MLA decode (``decode_attention_fwd(..., is_mla=True)``, as its Triton MLA backend calls it;
    the grouped kernel whenever H / G > 1): k_cache holds the latent and rope dims (d = dv + r), v_cache the latent (dv), one KV head in
    a real model; the kernel splits the score into a BLOCK_DMODEL and a BLOCK_DPE dot product (512 + 64
    for d = 576, 256 + 32 for d = 288, else next powers of two of dv and d - dv) and, with ``is_mla``, takes
    V from the loaded latent, never from v_cache: a v_cache that is not k_cache[..., :dv] is refused."""
    dv = v_cache.shape[-1]
    latent = k_cache[..., :dv].contiguous()
    ints = {2: torch.int16, 4: torch.int32, 1: torch.int8}[latent.element_size()]  # bits: a NaN pad is equal
    if v_cache.shape != latent.shape or v_cache.dtype != latent.dtype or \
            not torch.equal(v_cache.contiguous().view(ints), latent.view(ints)):
        raise NotImplementedError("vLLM's MLA decode reads the values from the latent (v = k[..., :dv]; its "
                                  "kernel never loads V with is_mla): a separate V cache is not supported")
    return triton_decode(q, k_cache, v_cache, mla=True, **kw)


MLA_DECODE = ServingTarget("vllm-mla-decode", decode=mla_decode, lse_base="e", single_query_only=True,
                           accepts_out=True, split_rule="fixed-splits", features=("mla", "softcap"))


# -- prefix_prefill.py ----------------------------------------------------------------------------------



def vllm_cache_layout(k_pool, v_pool):
    """(n, P, G, d) pages -> K (n, G, d / x, P, x), V (n, G, d, P), x = 16 // element size (vLLM's)."""
    n, P, G, d = k_pool.shape
    x = 16 // k_pool.element_size()
    if d % x:
        raise NotImplementedError(f"vllm prefix_prefill: head dim {d} is not a multiple of x = {x}")
    k = k_pool.reshape(n, P, G, d // x, x).permute(0, 2, 3, 1, 4).contiguous()
    return k, v_pool.permute(0, 2, 3, 1).contiguous()


def _chunk(pool, table, lens, N):
    """The last N tokens of each sequence, (B N, G, d), read through the block table."""
    P = pool.shape[1]
    rows = [pool[table[b][j // P], j % P] for b, L in enumerate(lens) for j in range(L - N, L)]
    return torch.stack(rows).contiguous()


def _prefix_run(q_tok, k_pool, v_pool, table, lens, N, *, scale, causal, out_tok, window_size=None, sinks=None):
    """The kernel on B sequences of N queries; ``lens`` = L per sequence (L >= N). ``window_size``: its
    ``sliding_window`` W (keys ``p - W < j``; without ``causal`` the right side is unbounded), ``sinks`` (H,)."""
    dev, d = q_tok.device, q_tok.shape[-1]
    W = lay.window_extent(window_size, bool(causal), "vllm prefix_prefill", non_causal="left")
    if sinks is not None:
        sinks = sinks.to(device=dev, dtype=torch.float32).contiguous()
    if any(L < N for L in lens) or N == 0:
        raise NotImplementedError("vllm prefix_prefill: the N >= 1 queries are the last N of each sequence's L keys")
    tab = table.tolist()
    k_tok, v_tok = _chunk(k_pool, tab, lens, N), _chunk(v_pool, tab, lens, N)
    k_cache, v_cache = vllm_cache_layout(k_pool, v_pool)
    one = torch.ones((), dtype=torch.float32, device=dev)
    B = len(lens)
    fn = _mod("prefix_prefill").context_attention_fwd
    if not sig.takes(fn, "causal") and not causal:
        raise NotImplementedError("this vLLM's context_attention_fwd has no causal argument (causal only; it came "
                                  "in 0.21.0)")
    _call(fn, q_tok, k_tok, v_tok, out_tok, "auto", k_cache, v_cache, vllm_block_table(table, k_pool.shape[1]),
          torch.arange(0, (B + 1) * N, N, dtype=torch.int32, device=dev),
          torch.tensor(lens, dtype=torch.int32, device=dev), max(lens), N, one, one,
          sm_scale=1.0 / math.sqrt(d) if scale is None else float(scale),
          **sig.keywords(fn, PREFIX_CALL, causal=bool(causal)),
          **sig.feature_keywords(fn, "vllm context_attention_fwd", sliding_window=(W or None, None), sinks=(sinks, None)))
    return out_tok


def _check_prefix(q, k, v):
    if k.shape[-1] != q.shape[-1] or v.shape[-1] != q.shape[-1]:
        raise NotImplementedError("vllm prefix_prefill: head dims of Q, K, V equal only")


def prefix_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
                window_size=None, sinks=None):
    """Prefill: B sequences of N queries, the last N of S positions; the first S - N are cached context."""
    lay.refuse_sdpa_extras("vllm prefix_prefill", query, key, attn_mask, enable_gqa)
    B, H, N, _ = query.shape
    _check_prefix(query, key, value)
    S = key.shape[2]
    kp, vp, table = lay.pages_of(key, value, [S] * B, PAGE)
    out = torch.empty(B * N, H, query.shape[-1], dtype=query.dtype, device=query.device)
    _prefix_run(lay.tokens(query), kp, vp, table, [S] * B, N, scale=scale, causal=is_causal, out_tok=out,
                window_size=window_size, sinks=sinks)
    return lay.untokens(out, B, N).contiguous()


def prefix_decode(q, k_cache, v_cache, *, cache_seqlens, block_table=None, num_splits=1, max_seqlen=None, is_causal=True,
           scale=None, return_lse=False, out=None, lse_out=None, window_size=None, sinks=None):
    """attnum's decode protocol -> ``context_attention_fwd`` (N queries = the last N of each sequence)."""
    if return_lse:
        raise NotImplementedError("vllm prefix_prefill returns no LSE")
    _check_prefix(q, k_cache, v_cache)
    B, H, N, d = q.shape
    lens = lay.lengths(cache_seqlens)
    if block_table is None:
        k_cache, v_cache, block_table = lay.pages_of(k_cache, v_cache, lens, PAGE)
    buf = lay.token_out(out, q)
    _prefix_run(lay.tokens(q), k_cache, v_cache, block_table, lens, N, scale=scale, causal=is_causal, out_tok=buf,
                window_size=window_size, sinks=sinks)
    return lay.written(out, buf, B, N)


PREFIX_PREFILL = ServingTarget("vllm-prefix-prefill", sdpa=prefix_sdpa, decode=prefix_decode, lse_base="e",
                               causal_alignment="bottom_right", empty_rows="zeros", accepts_out=True,
                               split_rule="fixed-size", features=("window", "sinks"))
"""``empty_rows="zeros"``: what ``acc / (l + 1e-10)`` gives a row with no key (acc = l = 0); no case the
adapter accepts has one (L >= N gives every query its own key)."""


# -- merge_attn_states (CUDA, the installed package) ---------------------------------------------------

_CUDA_MERGE_MODULES = ("vllm.v1.attention.ops.merge_attn_states", "vllm.attention.ops.merge_attn_states")


def _cuda_merge_kernel():
    for name in _CUDA_MERGE_MODULES:  # the module moved between vLLM versions
        try:
            return importlib.import_module(name).merge_attn_states
        except ImportError:
            continue
    raise NotImplementedError(f"vllm is installed but none of {_CUDA_MERGE_MODULES} provides merge_attn_states")


def cuda_merge_state(o_a, lse_a, o_b, lse_b):
    fn = _cuda_merge_kernel()
    out = torch.empty_like(o_a)
    out_lse = torch.empty_like(lse_a.float().T.contiguous())
    fn(out, o_a.contiguous(), lse_a.float().T.contiguous(), o_b.contiguous(), lse_b.float().T.contiguous(),
       out_lse)
    return out, out_lse.T


CUDA_MERGE = ServingTarget("vllm-merge", merge_state=cuda_merge_state, lse_base="e")


KERNELS = (
    sdpa_kernel("vllm-merge", CUDA_MERGE, package=PACKAGE, devices=("cuda",), dtypes=DTYPES,
                doc="``vllm-merge``: vLLM's ``merge_attn_states`` (prefix/suffix merge of chunked prefill) as a merge "
                    "target."),
    serving_kernel(UNIFIED, "vLLM unified_attention (Triton; prefill as SDPA, paged decode)", package=PACKAGE,
                   dtypes=DTYPES, check=_checker(UNIFIED_CALL)),
    serving_kernel(UNIFIED_FP8, "vLLM unified_attention on the FP8 serving path (Triton; FP8 queries and paged KV "
                                "cache at per-tensor scales, as kv_cache_dtype='fp8')", package=PACKAGE,
                   dtypes=DTYPES, check=_checker(UNIFIED_CALL)),
    serving_kernel(MERGE, "vLLM merge_attn_states (Triton)", package=PACKAGE, dtypes=DTYPES,
                   check=_checker(MERGE_CALL)),
    serving_kernel(TRITON_DECODE, "vLLM triton_decode_attention (Triton; single query, paged, LSE)", package=PACKAGE,
                   dtypes=DTYPES, check=_checker(DECODE_CALL)),
    serving_kernel(MLA_DECODE, "vLLM triton_decode_attention, MLA path (Triton; latent cache, d = dv + rope, single "
                               "query, paged, LSE)", package=PACKAGE, dtypes=DTYPES, check=_checker(MLA_CALL)),
    serving_kernel(PREFIX_PREFILL, "vLLM prefix_prefill context_attention_fwd (Triton; prefill over a paged prefix, as "
                                   "SDPA and decode)", package=PACKAGE, dtypes=DTYPES, check=_checker(PREFIX_CALL)),
)
