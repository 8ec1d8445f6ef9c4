"""The kernel server's wire format: a JSON header and raw tensor bytes, never a pickle.

A frame is ``!IQ`` (the header's length, the payload's length), the header (UTF-8 JSON, at most
:data:`MAX_HEADER` bytes) and the payload (at most :data:`MAX_PAYLOAD` bytes). A value is JSON with
these markers: ``{"$t": [dtype, shape, device]}`` a tensor whose bytes come next in the payload (in the
order the markers appear), ``{"$meta": [dtype, shape, "meta"]}`` a tensor without data, ``{"$f": "nan"}``
a non-finite float, ``{"$tuple": [...]}`` a tuple, ``{"$obj": "TypeName"}`` a value that is
not data (the receiver gets an empty object of a class with that name, which every output check
refuses), ``{"$gen": tensor}`` a ``torch.Generator``'s state.

The parent decodes what the child sends with :func:`decode` and nothing else: a dtype outside
:data:`DTYPES`, a shape that is not a list of non-negative integers, a payload whose length is not
exactly what the shapes say, or anything else malformed raises :class:`Malformed`. So whatever the
user code in the child writes to the channel is, at worst, a wrong value for the call it answers.
"""

from __future__ import annotations

import json
import math
import struct

import torch

HEAD = struct.Struct("!IQ")
MAX_HEADER = 4 << 20  # bytes of JSON
MAX_PAYLOAD = 1 << 30  # bytes of tensor data in one frame (what a reply can make the parent hold)
MAX_DEPTH = 16  # nesting of tuples, lists and dicts in one value
DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
    torch.int8, torch.uint8, torch.bool, torch.float8_e4m3fn, torch.float8_e5m2)}


class Malformed(Exception):
    """Bytes on the channel that are not a frame of this format."""


class WrongOutput(Exception):
    """The target returned something other than what the call expects (a tensor of the expected
    shape, dtype and device): a failure of the case, whatever its values."""


def plain_tensor(x: torch.Tensor) -> torch.Tensor | None:
    """``x`` as a tensor of torch's own class with the values in its storage, or None when it holds none.

    A subclass with ``__torch_function__`` sees every operation on it: the same storage as a plain
    ``torch.Tensor`` (autograd kept) no longer does, so what attnum computes on an output is torch's
    arithmetic, not the subclass's (a target returning one cannot make ``out - golden`` zero). A
    ``__torch_dispatch__`` subclass (its values are whatever its handler says), a sparse, nested or other
    non-strided layout: None, a wrong output."""
    if type(x) is not torch.Tensor:
        with torch._C.DisableTorchFunctionSubclass():
            x = torch.Tensor.as_subclass(x, torch.Tensor)
    if type(x) is not torch.Tensor or x.layout != torch.strided or x.is_nested \
            or torch._C._dispatch_keys(x).has(torch._C.DispatchKey.Python):
        return None
    return x


def _tensor_bytes(t: torch.Tensor) -> bytes:
    t = t.detach().to("cpu").contiguous()
    return t.view(torch.uint8).numpy().tobytes() if t.numel() else b""


def encode(msg: dict) -> bytes:
    """One frame: ``msg`` (a dict of JSON values, tensors, tuples, generators) as header + payload."""
    chunks: list[bytes] = []

    def enc(x, depth=0):
        if depth > MAX_DEPTH:
            return {"$obj": "TooDeep"}
        if isinstance(x, torch.Tensor):
            plain = plain_tensor(x) if x.device.type != "meta" else x
            if plain is None:  # values the sender's torch does not hold: not data (the receiver refuses it)
                return {"$obj": f"Tensor_{type(x).__name__}_{str(x.layout).removeprefix('torch.')}"}
            x = plain
            if str(x.dtype).removeprefix("torch.") not in DTYPES:
                return {"$obj": f"Tensor_{str(x.dtype).removeprefix('torch.')}"}
            if x.device.type == "meta":  # no data: its shape, dtype and device are all there is
                return {"$meta": [str(x.dtype).removeprefix("torch."), list(x.shape), "meta"]}
            chunks.append(_tensor_bytes(x))
            return {"$t": [str(x.dtype).removeprefix("torch."), list(x.shape), x.device.type]}
        if isinstance(x, torch.Generator):
            return {"$gen": enc(x.get_state(), depth + 1)}
        if x is None or isinstance(x, bool | int | str):
            return x
        if isinstance(x, float):
            return x if math.isfinite(x) else {"$f": repr(x)}
        if isinstance(x, tuple):
            return {"$tuple": [enc(v, depth + 1) for v in x]}
        if isinstance(x, list):
            return [enc(v, depth + 1) for v in x]
        if isinstance(x, dict) and all(isinstance(k, str) and not k.startswith("$") for k in x):
            return {k: enc(v, depth + 1) for k, v in x.items()}
        return {"$obj": type(x).__name__}

    head = json.dumps(enc(msg), allow_nan=False).encode()
    payload = b"".join(chunks)
    return HEAD.pack(len(head), len(payload)) + head + payload


def opaque(name: str) -> object:
    """An empty object of a class named ``name`` (what a value that is not data decodes to)."""
    if not (isinstance(name, str) and name.isidentifier() and len(name) <= 100):
        name = "Opaque"
    return type(name, (), {})()


def decode(head: bytes, payload: bytes, *, device: str | None = None) -> dict:
    """The message of one frame, checked (module doc); tensors land on ``device`` (None: the device
    type the sender named, when this process has it, else the CPU)."""
    try:
        msg = json.loads(head.decode("utf-8"), parse_constant=_refuse)
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise Malformed(f"a header that is not JSON ({type(err).__name__})") from None
    if not isinstance(msg, dict):
        raise Malformed("a header that is not an object")
    offset = [0]

    def tensor(spec, meta: bool = False) -> torch.Tensor:
        if not (isinstance(spec, list) and len(spec) == 3 and spec[0] in DTYPES and isinstance(spec[1], list)
                and len(spec[1]) <= 8 and all(type(n) is int and 0 <= n < 1 << 40 for n in spec[1])
                and isinstance(spec[2], str)):
            raise Malformed(f"a tensor marker {str(spec)[:80]!r}")
        dtype = DTYPES[spec[0]]
        if meta:
            return torch.empty(spec[1], dtype=dtype, device="meta")
        n = math.prod(spec[1]) * torch.empty((), dtype=dtype).element_size()
        if offset[0] + n > len(payload):
            raise Malformed("a payload shorter than its tensors")
        raw = bytearray(payload[offset[0]:offset[0] + n])
        offset[0] += n
        t = torch.frombuffer(raw, dtype=torch.uint8).view(dtype).reshape(spec[1]) if n else \
            torch.empty(spec[1], dtype=dtype)
        where = device or spec[2]
        if where != "cpu":
            try:
                t = t.to(where)
            except Exception:  # noqa: BLE001 - a device this process has not: the tensor stays on the CPU
                pass
        return t

    def dec(x, depth=0):
        if depth > MAX_DEPTH + 2:
            raise Malformed("a value nested too deep")
        if isinstance(x, list):
            return [dec(v, depth + 1) for v in x]
        if not isinstance(x, dict):
            return x
        if len(x) == 1:
            (key, val), = x.items()
            if key == "$t":
                return tensor(val)
            if key == "$meta":
                return tensor(val, meta=True)
            if key == "$tuple" and isinstance(val, list):
                return tuple(dec(v, depth + 1) for v in val)
            if key == "$obj":
                return opaque(val)
            if key == "$f" and val in ("inf", "-inf", "nan"):
                return float(val)
            if key == "$gen":
                g = torch.Generator()
                state = dec(val, depth + 1)
                if not isinstance(state, torch.Tensor) or state.dtype != torch.uint8:
                    raise Malformed("a generator state that is not bytes")
                try:
                    g.set_state(state)
                except Exception:  # noqa: BLE001
                    raise Malformed("a generator state torch refuses") from None
                return g
        if any(k.startswith("$") for k in x):
            raise Malformed(f"an unknown marker in {sorted(x)[:3]}")
        return {k: dec(v, depth + 1) for k, v in x.items()}

    try:
        out = dec(msg)
    except RecursionError:
        raise Malformed("a value nested too deep") from None
    if offset[0] != len(payload):
        raise Malformed(f"a payload of {len(payload)} bytes for {offset[0]} bytes of tensors")
    return out


def _refuse(constant: str):
    raise ValueError(f"bare {constant}")
