"""attnum's bundled byte-level LM (:class:`attnum.workloads.models.ByteLM`) served one request at a time.

Shapes: T tokens, D model width, H heads, d = D / H, V = 256 bytes.

Everything but attention runs in float32 torch on the one request (B = 1), so it cannot depend on the
batch; attention goes through attnum's core under a policy: the prompt in one causal pass
(:func:`attnum.attention.flash.flash_attention`), each new token as a decode step
(:func:`attnum.attention.serving.decode.decode_attention`) whose split plan the caller gives -- the plan a
kernel would have chosen for the whole batch the request sits in.
"""

from __future__ import annotations

import torch

from attnum.attention.flash import flash_attention
from attnum.attention.serving.decode import decode_attention
from attnum.workloads.models import ByteLM, set_attention


class ServedLM:
    """One request's prefill and decode steps with a KV cache (float32, (1, H, T_max, d) per layer)."""

    def __init__(self, model: ByteLM, policy, t_max: int):
        self.model, self.policy = model.eval(), policy
        blk = model.blocks[0]
        self.H = blk.attn.n_heads
        self.D = model.emb.embedding_dim
        self.t_max = t_max
        self.cache = [(torch.zeros(1, self.H, t_max, self.D // self.H), torch.zeros(1, self.H, t_max, self.D // self.H))
                      for _ in model.blocks]
        self.length = 0

    def _qkv(self, blk, x_BTD):
        B, T, D = x_BTD.shape
        return blk.attn.qkv(blk.ln1(x_BTD)).view(B, T, 3, self.H, D // self.H).permute(2, 0, 3, 1, 4)

    def _block(self, blk, x_BTD, o_BHTd):
        B, T, D = x_BTD.shape
        x_BTD = x_BTD + blk.attn.proj(o_BHTd.transpose(1, 2).reshape(B, T, D))
        return x_BTD + blk.mlp(blk.ln2(x_BTD))

    @torch.no_grad()
    def prefill(self, tokens_T: torch.Tensor) -> torch.Tensor:
        """Logits (T, V) of the prompt; fills the cache."""
        T = tokens_T.numel()
        x = self.model.emb(tokens_T[None]) + self.model.pos[:T]
        for blk, (kc, vc) in zip(self.model.blocks, self.cache):
            q, k, v = self._qkv(blk, x)
            kc[:, :, :T], vc[:, :, :T] = k, v
            o = flash_attention(q, k, v, is_causal=True, policy=self.policy, block_k=128)
            x = self._block(blk, x, o)
        self.length = T
        return self.model.head(self.model.ln_f(x))[0]

    @torch.no_grad()
    def step(self, token: int, plan) -> torch.Tensor:
        """Logits (V,) after appending ``token`` at the next position, attention under ``plan`` (a
        one-sequence :class:`attnum.attention.serving.split_rules.SplitPlan` for length + 1 keys)."""
        t = self.length
        x = self.model.emb(torch.tensor([[token]])) + self.model.pos[t:t + 1]
        for blk, (kc, vc) in zip(self.model.blocks, self.cache):
            q, k, v = self._qkv(blk, x)
            kc[:, :, t:t + 1], vc[:, :, t:t + 1] = k, v
            o = decode_attention(q, kc[:, :, :t + 1], vc[:, :, :t + 1], policy=self.policy, split_rule=plan)
            x = self._block(blk, x, o)
        self.length = t + 1
        return self.model.head(self.model.ln_f(x))[0, 0]


@torch.no_grad()
def training_logits(model: ByteLM, tokens_T: torch.Tensor, policy) -> torch.Tensor:
    """The training-side pass: the whole sequence at once, attention one causal pass under ``policy``
    (the model's own forward with its attention routed through attnum) -> logits (T, V)."""
    def attn(q, k, v, is_causal=False, **_):
        return flash_attention(q, k, v, is_causal=is_causal, policy=policy, block_k=128)

    set_attention(model, attn)
    try:
        return model.eval()(tokens_T[None])[0]
    finally:
        set_attention(model, torch.nn.functional.scaled_dot_product_attention)
