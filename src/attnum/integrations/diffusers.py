"""diffusers: route a model's attention processors through any SDPA-signature attention.

    from attnum.integrations.diffusers import set_processors
    set_processors(unet, "flash:fa2:bf16")          # or rec.sdpa inside attnum.integrations.shadow

``AttnumProcessor`` runs diffusers' own ``AttnProcessor2_0`` (so projections, norms, residuals and
mask preparation stay diffusers' code) with its ``F.scaled_dot_product_attention`` call redirected to
``attention`` through a private TorchFunctionMode; the processor knows its layer name, which it
passes on as the call site when ``attention`` is a shadow recorder's ``sdpa``.
"""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from attnum.kernels.registry import require


class _Redirect(TorchFunctionMode):
    def __init__(self, sdpa, site: str | None) -> None:
        super().__init__()
        self.sdpa, self.site = sdpa, site

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            from attnum.integrations.shadow import ShadowRecorder, bind_sdpa

            bound = bind_sdpa(args, kwargs)
            owner = getattr(self.sdpa, "__self__", None)
            if isinstance(owner, ShadowRecorder):
                return self.sdpa(**bound, site=self.site)
            return self.sdpa(**bound)
        return func(*args, **kwargs)


class AttnumProcessor:
    """A diffusers attention processor whose SDPA call is ``attention`` (a callable or any name
    :mod:`attnum.kernels.registry` resolves)."""

    def __init__(self, attention: Any, *, name: str | None = None) -> None:
        from diffusers.models.attention_processor import AttnProcessor2_0

        self.inner = AttnProcessor2_0()
        self.sdpa = require(attention).fn
        self.name = name

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, temb=None,
                 *args, **kwargs):
        with _Redirect(self.sdpa, self.name):
            return self.inner(attn, hidden_states, encoder_hidden_states, attention_mask, temb, *args, **kwargs)


def set_processors(model, attention: Any) -> int:
    """Give every attention layer of ``model`` an ``AttnumProcessor``; returns how many."""
    names = list(model.attn_processors)
    model.set_attn_processor({n: AttnumProcessor(attention, name=n.removesuffix(".processor")) for n in names})
    return len(names)
