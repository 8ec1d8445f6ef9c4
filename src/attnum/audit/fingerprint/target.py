"""The target as the fingerprint calls it: every call counted, timed and checked.

Shape alphabet: B = 1 batch, H heads, N = 1 query, S keys, d head dim.

:class:`CountedTarget` calls the target (its SDPA entry point, or a serving target's decode), hands it
copies of the inputs, checks its output (shape, a float dtype it names, the same at every call) and turns
an exception of the target into :class:`TargetFailed` (the target's failure, exit 1, never attnum's) or,
for NotImplementedError, :class:`TargetRefused` (it cannot run these inputs: one line, exit 2).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from attnum.errors import AttnumInputError, bad_value

OUTPUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


class TargetRefused(AttnumInputError):
    """The target raised NotImplementedError: it cannot run these inputs (one line, exit 2)."""


class TargetFailed(Exception):  # noqa: N818 - the target's failure, reported as such (exit 1)
    """The target raised on a call (``what``: its exception, named; ``where``: which call)."""

    def __init__(self, what: str, where: str) -> None:
        super().__init__(f"{what} ({where})")
        self.what, self.where = what, where


@dataclass
class CountedTarget:
    """The target as the fingerprint calls it, on (1, H, 1, d) queries, every call counted and timed.

    ``entry``: ``"sdpa"`` calls fn(q, k, v, is_causal=False); ``"decode"`` calls a serving target's decode
    entry point (attnum.kernels.serving): fn.decode(q, k_cache, v_cache, cache_seqlens=[S]) with the
    cache (1, H, S, d) and the kernel's own split choice (``num_splits`` left out). ``"auto"`` (the
    default) is sdpa, or decode when the first SDPA call says the target has no SDPA entry point
    (NotImplementedError) and it has a decode one. ``num_splits``: passed to decode (the split count a
    serving framework would ask for); None leaves it out. The target gets copies of the inputs (the probes
    reuse theirs, and the replays read them).

    The output must be a (1, H, 1, dv) tensor of one float dtype at every call (:data:`OUTPUT_DTYPES`,
    recorded as ``out_dtype``: a kernel may return its 16-bit values upcast); anything else is one line
    (AttnumInputError). An exception of the target is :class:`TargetFailed`; NotImplementedError (the
    target cannot run these inputs) is one line naming it."""

    fn: object
    entry: str = "auto"
    num_splits: int | None = None
    calls: int = 0
    seconds: float = 0.0
    out_dtype: torch.dtype | None = None
    shapes: list = field(default_factory=list)

    def _name(self) -> str:
        return str(getattr(self.fn, "__name__", None) or getattr(self.fn, "name", None) or type(self.fn).__name__)

    def _call(self, q, k, v):
        q, k, v = q.clone(), k.clone(), v.clone()  # a target may write into its inputs: never into ours
        if self.entry == "decode":
            lens = torch.full((q.shape[0],), k.shape[-2], dtype=torch.int32)
            splits = {} if self.num_splits is None else {"num_splits": self.num_splits}
            return self.fn.decode(q, k, v, cache_seqlens=lens, **splits)
        try:
            out = self.fn(q, k, v, is_causal=False)
        except NotImplementedError as exc:
            if self.entry == "auto" and not self.calls and not callable(getattr(self.fn, "decode", None)):
                # a serving target without SDPA (a merge): attnum.kernels.serving.ServingTarget says so
                if getattr(self.fn, "_sdpa", ...) is None or "no SDPA entry point" in str(exc):
                    raise bad_value("target", self._name(), "an attention kernel with an SDPA or a decode entry "
                                    f"point (this one has neither: {exc})") from None
                raise
            if self.entry != "auto" or self.calls or not callable(getattr(self.fn, "decode", None)):
                raise
            self.entry = "decode"
            return self._call(q, k, v)
        if self.entry == "auto":
            self.entry = "sdpa"
        return out

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        from attnum.sandbox.server import TargetGone

        where = f"call {self.calls + 1}, S={k.shape[-2]}" + (f", through its {self.entry} entry point"
                                                             if self.entry == "decode" else "")
        t0 = time.perf_counter()
        try:
            out = self._call(q, k, v)
        except (AttnumInputError, TargetGone):
            raise
        except NotImplementedError as exc:
            raise TargetRefused(str(bad_value("target", self._name(), "a kernel that runs the fingerprint's inputs "
                                              f"(its {where} raised NotImplementedError: {str(exc)[:300]})"))) from None
        except Exception as exc:  # noqa: BLE001 - whatever the target raises is the target's failure
            name = type(exc).__name__
            if name == "AttnumInputError":  # attnum's own kernel refusing its arguments, in the kernel server
                raise AttnumInputError(str(exc)) from None
            raise TargetFailed(f"{name}: {str(exc)[:300]}", where) from None
        if isinstance(out, tuple):  # a decode entry point asked for no LSE may still return (o, lse)
            out = out[0]
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        want = tuple(q.shape[:-1]) + (v.shape[-1],)
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != want:
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise bad_value("target output", got, f"a tensor of shape {want}")
        if out.dtype not in OUTPUT_DTYPES or out.device.type == "meta" or out.is_sparse:
            what = f"{out.dtype} on {out.device.type}" + (" (sparse)" if out.is_sparse else "")
            raise bad_value("target output", what, "a dense float tensor of dtype float16, bfloat16, float32 "
                                                   "or float64 holding values (the fingerprint compares its bits)")
        if self.out_dtype is None:
            self.out_dtype = out.dtype
        elif out.dtype != self.out_dtype:
            raise bad_value("target output", str(out.dtype), f"{self.out_dtype} at every call (its first call's "
                                                            "dtype)")
        return out.detach().to("cpu")


