"""How the faithful Triton model carries a kernel's values through the interpreter: the bit patterns of
bf16 and FP8 tensors (numpy has neither type), the torch dtype of each Triton scalar type, and a dot's
input precision. Used by :mod:`attnum.kernels.triton.faithful` when it patches the interpreter."""

from __future__ import annotations

import numpy as np
import torch

from attnum.kernels.triton import model


def _formats():
    import triton.language as tl

    return {tl.bfloat16: "bf16", tl.float16: "fp16", tl.float32: "fp32", tl.float64: "fp64",
            tl.float8e4nv: "e4m3fn", tl.float8e5: "e5m2"}


_BITS = {"bf16": (np.uint16, np.int16, torch.bfloat16), "e4m3fn": (np.uint8, np.uint8, torch.float8_e4m3fn),
         "e5m2": (np.uint8, np.uint8, torch.float8_e5m2)}


class _Codec:
    """numpy storage of the interpreter <-> torch values."""

    def __init__(self) -> None:
        import triton.language as tl

        self.tl = tl
        self.fmt = _formats()

    def of(self, dtype) -> str | None:
        """attnum's format name of a Triton scalar dtype (None for ints, pointers)."""
        dt = getattr(dtype, "scalar", dtype)
        f = self.fmt.get(dt)
        if f is None and getattr(dt, "is_floating", lambda: False)():
            raise NotImplementedError(f"Triton dtype {dt} is not modelled by attnum's faithful interpreter")
        return f

    def decode(self, handle, carrier=torch.float64) -> torch.Tensor:
        data = np.ascontiguousarray(handle.data)
        f = self.of(handle.dtype)
        if f in _BITS:
            _, view, tdt = _BITS[f]
            return torch.from_numpy(data.view(view)).view(tdt).to(carrier)
        return torch.from_numpy(data.copy()).to(carrier)

    def encode(self, values: torch.Tensor, fmt: str) -> np.ndarray:
        """Values already on ``fmt``'s grid -> the interpreter's storage for ``fmt``."""
        if fmt in _BITS:
            store, view, tdt = _BITS[fmt]
            return values.to(tdt).view(torch.int16 if view is np.int16 else torch.uint8).numpy().view(store)
        return values.to({"fp16": torch.float16, "fp32": torch.float32, "fp64": torch.float64}[fmt]).numpy()


def _precision(p) -> str:
    text = str(getattr(p, "name", p)).split(".")[-1].lower()
    if text not in model.PRECISIONS:
        raise NotImplementedError(f"tl.dot input_precision={text!r} is not modelled (only {model.PRECISIONS})")
    return text


_TORCH = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "e4m3fn": torch.float8_e4m3fn,
          "e5m2": torch.float8_e5m2}


def _retype(ty, scalar):
    """``ty`` (a Triton scalar or block type) with element type ``scalar``."""
    import triton.language as tl

    return tl.block_type(scalar, list(ty.shape)) if isinstance(ty, tl.block_type) else scalar
