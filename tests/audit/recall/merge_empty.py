"""A two-state merge as a user writes one (no attnum import). ``broken`` is the textbook merge of
FlashInfer's Triton ``merge_state`` (flashinfer-ai/flashinfer#4051, open) and vLLM's Triton
``merge_attn_states`` before vLLM 0.26: with both LSEs -inf, lse - max = -inf - (-inf) = NaN. ``fixed``
returns (0, -inf) for two empty states, as vLLM 0.26 does."""

import torch


def _merge(o_a, lse_a, o_b, lse_b, guard):
    m = torch.maximum(lse_a, lse_b)
    if guard:
        m_safe = torch.where(torch.isinf(m) & (m < 0), torch.zeros_like(m), m)
    else:
        m_safe = m
    e_a, e_b = torch.exp(lse_a - m_safe), torch.exp(lse_b - m_safe)
    d = e_a + e_b
    d_safe = torch.where(d == 0, torch.ones_like(d), d) if guard else d
    o = o_a.float() * (e_a / d_safe)[..., None] + o_b.float() * (e_b / d_safe)[..., None]
    lse = m_safe + torch.log(d)
    return o.to(o_a.dtype), lse


class broken:  # noqa: N801 - the audit names it broken / fixed
    lse_base = "e"

    @staticmethod
    def merge_state(o_a, lse_a, o_b, lse_b):
        return _merge(o_a, lse_a, o_b, lse_b, guard=False)


class fixed(broken):  # noqa: N801
    @staticmethod
    def merge_state(o_a, lse_a, o_b, lse_b):
        return _merge(o_a, lse_a, o_b, lse_b, guard=True)
