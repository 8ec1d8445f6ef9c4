"""A Gemma-2 softcap kernel as a user writes one (no attnum import): ``broken`` computes tanh as
(e^x - e^-x) / (e^x + e^-x) in float32, as vLLM's Triton ``apply_softcap`` did until vLLM 0.31
(vllm-project/vllm#56578): past |s / cap| ~ 88.7 both exponentials overflow, inf / inf = NaN. ``fixed`` is
the form vLLM 0.31 took, 1 - 2 / (e^2x + 1). Both declare the feature as a plain class attribute."""

import math

import torch


def _attention(q, k, v, is_causal, scale, softcap, tanh):
    H = q.shape[1]
    kf = k.float().repeat_interleave(H // k.shape[1], 1)
    vf = v.float().repeat_interleave(H // v.shape[1], 1)
    s = (q.float() @ kf.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if softcap:
        s = softcap * tanh(s / softcap)
    if is_causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), -math.inf)
    return (torch.softmax(s, dim=-1) @ vf).to(q.dtype)


def _exp_tanh(x):
    p1, p2 = torch.exp(x), torch.exp(-x)
    return (p1 - p2) / (p1 + p2)


def _one_exp_tanh(x):
    return 1.0 - 2.0 / (torch.exp(2.0 * x) + 1.0)


class broken:  # noqa: N801 - the audit names it broken / fixed
    attnum_softcap = True

    @staticmethod
    def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, softcap=None):
        if attn_mask is not None:
            raise NotImplementedError("no attn_mask")
        return _attention(q, k, v, is_causal, scale, softcap, _exp_tanh)


class fixed(broken):  # noqa: N801
    @staticmethod
    def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, softcap=None):
        if attn_mask is not None:
            raise NotImplementedError("no attn_mask")
        return _attention(q, k, v, is_causal, scale, softcap, _one_exp_tanh)
