"""In-model comparison (the paper's Stage 1b): run two attentions on every real attention call.

    with attnum.shadow(candidate="flash:fa2:bf16", reference="golden", model=model) as rec:
        loss = model(batch).loss
        loss.backward()
        rec.next_step()
    rec.records  # one dict per intercepted call

A ``torch.overrides.TorchFunctionMode`` intercepts every Python-level
``F.scaled_dot_product_attention`` call (transformers' sdpa path, diffusers' ``AttnProcessor2_0``,
nanoGPT-style code) -- no monkey-patching. Candidate and reference see the identical q, k, v and
mask; ``propagate`` says whose output the model continues with (the paper does not say which it
used). The other one runs under ``no_grad``.

``nn.MultiheadAttention`` calls ``F.multi_head_attention_forward``, whose inner SDPA call a mode
cannot see; that call is intercepted instead and re-expressed as projections + SDPA
(``attnum.integrations.mha``). HF ``AttentionInterface`` and diffusers processors can also route
through ``rec.sdpa`` explicitly (``attnum.integrations``).

Call sites: with ``model=`` every record names the innermost module (``model.layers.3.self_attn``)
via global module forward hooks; ``layer`` is that module's ``layer_idx`` when it has one (HF),
else the first integer in its path; ``step`` is ``rec.step`` (advance with ``rec.next_step()``).

``store``: an object with ``add_records(list[dict])`` (called once on exit), or a path to which the
records are written as JSON lines.

Shapes: q (B, H, N, d), k (B, G, S, d), v (B, G, S, dv).
"""

from __future__ import annotations

import functools
import json
import re
import sys
import types
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from attnum.errors import AttnumInputError
from attnum.kernels.registry import require
from attnum.numerics.metrics import deviation

PROPAGATE = ("candidate", "reference")
_SDPA_PARAMS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
_SDPA_DEFAULTS = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None, "enable_gqa": False}
_INT = re.compile(r"(?:^|\.)(\d+)(?:\.|$)")


@dataclass(frozen=True, kw_only=True)
class ShadowConfig:
    """candidate/reference: an SDPA-signature callable or any name :mod:`attnum.kernels.registry`
    resolves (``torch-sdpa``, ``flash:fa2:bf16``, ``baseline:fp32``, ``golden``, ``eager``, ``module:function``)."""

    candidate: Any = "torch-sdpa"
    reference: Any = "golden"
    propagate: str = "candidate"

    def __post_init__(self) -> None:
        if self.propagate not in PROPAGATE:
            raise AttnumInputError(f"propagate={self.propagate!r} is not allowed; expected one of {PROPAGATE}")
        require(self.candidate, param="candidate")
        require(self.reference, param="reference")


def bind_sdpa(args: tuple, kwargs: dict | None) -> dict:
    """SDPA's positional/keyword arguments as one dict with every parameter present."""
    bound = dict(_SDPA_DEFAULTS)
    bound.update(zip(_SDPA_PARAMS, args))
    bound.update(kwargs or {})
    return bound


class ShadowRecorder:
    """Holds the records and the call-site context; ``sdpa`` is the comparing SDPA callable."""

    def __init__(self, cfg: ShadowConfig) -> None:
        self.cfg = cfg
        candidate, reference = require(cfg.candidate, param="candidate"), require(cfg.reference, param="reference")
        self.candidate: Callable = candidate.fn
        self.reference: Callable = reference.fn
        self.labels = {"candidate": candidate.name, "reference": reference.name}
        self.records: list[dict] = []
        self.step = 0
        self._names: dict[int, str] = {}
        self._stack: list[torch.nn.Module] = []
        self._calls_this_step = 0

    def watch(self, model: torch.nn.Module, prefix: str = "") -> None:
        """Name call sites by ``model``'s module paths."""
        for name, module in model.named_modules(prefix=prefix):
            self._names[id(module)] = name or type(module).__name__

    def next_step(self) -> None:
        self.step += 1
        self._calls_this_step = 0

    def _site(self, site: str | None = None) -> tuple[str | None, int | None]:
        """(module path, layer index) of the current call; ``site`` overrides the path."""
        if not self._stack and site is None:
            return None, None
        path = site
        if path is None:
            module = self._stack[-1]
            path = self._names.get(id(module))
            if path is None:  # module outside the watched model: class names from the stack
                path = "/".join(type(m).__name__ for m in self._stack[-3:])
        layer = next((m.layer_idx for m in reversed(self._stack)
                      if isinstance(getattr(m, "layer_idx", None), int)), None)
        if layer is None:
            match = _INT.search(path)
            layer = int(match.group(1)) if match else None
        return path, layer

    def sdpa(self, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
             enable_gqa=False, *, site: str | None = None, kind: str = "sdpa"):
        """Run candidate and reference on the same inputs, record, return the propagated output."""
        kw = {"attn_mask": attn_mask, "dropout_p": dropout_p, "is_causal": is_causal, "scale": scale,
              "enable_gqa": enable_gqa}
        first, second = (self.candidate, self.reference)
        if self.cfg.propagate == "reference":
            first, second = second, first
        out = first(query, key, value, **kw)
        with torch.no_grad():
            other = second(query.detach(), key.detach(), value.detach(), **kw)
        cand, ref = (out, other) if self.cfg.propagate == "candidate" else (other, out)
        path, layer = self._site(site)
        self.records.append({
            "index": len(self.records),
            "step": self.step,
            "call_in_step": self._calls_this_step,
            "module": path,
            "layer": layer,
            "kind": kind,
            "q_shape": list(query.shape), "k_shape": list(key.shape), "dtype": str(query.dtype).replace("torch.", ""),
            "is_causal": bool(is_causal), "has_mask": attn_mask is not None,
            **self.labels,
            "propagate": self.cfg.propagate,
            "metrics": deviation(cand.detach(), ref.detach()),
        })
        self._calls_this_step += 1
        return out


class _ShadowMode(TorchFunctionMode):
    def __init__(self, rec: ShadowRecorder) -> None:
        super().__init__()
        self.rec = rec

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            return self.rec.sdpa(**bind_sdpa(args, kwargs))
        if func is F.multi_head_attention_forward:
            from attnum.integrations.mha import mha_forward_via_sdpa

            return mha_forward_via_sdpa(args, kwargs, functools.partial(self.rec.sdpa, kind="mha"))
        return func(*args, **kwargs)


def _deliver(records: list[dict], store: Any) -> None:
    if store is None:
        return
    if hasattr(store, "add_records"):
        store.add_records(records)
        return
    if isinstance(store, (str, Path)):
        with open(store, "a") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in records)
        return
    raise AttnumInputError(f"store={type(store).__name__} is not allowed; expected an object with "
                           "add_records(list[dict]) or a path for JSON lines")


@contextmanager
def shadow(candidate: Any = "torch-sdpa", reference: Any = "golden", *, propagate: str = "candidate",
           store: Any = None, model: torch.nn.Module | None = None):
    """Compare ``candidate`` with ``reference`` on every attention call inside the block.

    Yields the :class:`ShadowRecorder`; ``rec.records`` has one dict per intercepted call with
    step, call_in_step, module, layer, kind (sdpa | mha), shapes, dtype, masks and
    ``metrics`` (``attnum.numerics.metrics.deviation`` of candidate vs reference).
    """
    rec = ShadowRecorder(ShadowConfig(candidate=candidate, reference=reference, propagate=propagate))
    if model is not None:
        rec.watch(model)

    def pre(module, args):
        rec._stack.append(module)

    def post(module, args, output):
        if rec._stack and rec._stack[-1] is module:
            rec._stack.pop()

    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

    handles = [register_module_forward_pre_hook(pre), register_module_forward_hook(post, always_call=True)]
    try:
        with _ShadowMode(rec):
            yield rec
    finally:
        for h in handles:
            h.remove()
        rec._stack.clear()
    _deliver(rec.records, store)


class _CallableModule(types.ModuleType):
    """``attnum.integrations.shadow`` (exported as ``attnum.shadow``) is both this module and its context manager.

    The package root exports ``shadow`` lazily (so ``import attnum`` does not load torch); once any
    code imports this submodule, Python binds ``attnum.integrations.shadow`` to the module, not the function.
    Calling the module calls :func:`shadow`, so ``with attnum.shadow(...)`` means the same thing
    whichever import ran first."""

    def __call__(self, *args: Any, **kwargs: Any):
        return shadow(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
