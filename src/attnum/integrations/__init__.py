"""Route real models' attention through attnum: HF transformers, diffusers, nn.MultiheadAttention.

- ``hf``: ``register(name, attention)`` adds an AttentionInterface function *and* an
  AttentionMaskInterface mask under the same name (registering only the function silently drops
  the mask);
- ``diffusers``: ``AttnumProcessor`` / ``set_processors(model, attention)``;
- ``mha``: ``nn.MultiheadAttention``'s ``F.multi_head_attention_forward`` re-expressed as
  projections + an SDPA-signature call (used by ``attnum.integrations.shadow``, whose mode cannot see the inner call).
"""
