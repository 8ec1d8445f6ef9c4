"""The user's function as the parent sees it: a proxy whose every call goes to a kernel server.

:class:`RemoteTarget` has the SDPA signature (``target(q, k, v, attn_mask=..., is_causal=...)``), the
serving entry points the target has (``decode``, ``merge_state``, ``merge_states``, ``varlen``) and the plain
attributes it declares (:data:`attnum.sandbox.child.ATTRS`), so probes and training loops use it as they use the function. When
autograd wants gradients of the inputs, the server keeps the graph and the output carries a
:class:`_RemoteGrad` node whose backward asks the server for dq, dk, dv given dO. Replies are checked
here: a gradient of the wrong shape is a :class:`~attnum.sandbox.wire.WrongOutput`; an exception the
user code raised there is raised here (:func:`attnum.sandbox.server.remote_exception`).
"""

from __future__ import annotations

import torch

from attnum.sandbox.server import KernelServer, TargetGone, remote_exception
from attnum.sandbox.wire import WrongOutput


def _autocast() -> str | None:
    try:
        if torch.is_autocast_enabled("cpu"):
            return str(torch.get_autocast_dtype("cpu")).removeprefix("torch.")
    except TypeError:  # an older torch
        if torch.is_autocast_cpu_enabled():
            return str(torch.get_autocast_cpu_dtype()).removeprefix("torch.")
    return None


def _raise(server: KernelServer, reply: dict, where: str):
    if reply.get("type") == "SystemExit":  # the child ends; a call that exits is the target's exit
        server.close()
        code = str(reply.get("text"))[:60]
        raise TargetGone("exited", f"the {server.noun} called sys.exit({code}), {where}", ready=True)
    raise remote_exception(reply.get("type"), reply.get("text", ""))


def invoke(server: KernelServer, entry: str | None, args: tuple, kw: dict, *, writeback: tuple[str, ...] = ()):
    """One call of the user's function (or its ``entry``) in the server; its checked result."""
    grad_args = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.requires_grad] \
        if torch.is_grad_enabled() else []
    gens = [v for v in (*args, *kw.values()) if isinstance(v, torch.Generator)]
    where = f"in the {server.noun}'s call" + (f" ({entry})" if entry else "")
    reply = server.request({"op": "call", "entry": entry, "args": list(args), "kw": kw, "grad_args": grad_args,
                            "grad_mode": torch.is_grad_enabled(), "autocast": _autocast(),
                            "writeback": list(writeback)}, where)
    if reply["op"] == "raised":
        _raise(server, reply, where)
    back = reply.get("writeback")
    for name, value in (back.items() if isinstance(back, dict) else ()):
        mine = kw.get(name)
        if isinstance(mine, torch.Tensor) and isinstance(value, torch.Tensor) and value.shape == mine.shape \
                and value.dtype == mine.dtype:
            mine.copy_(value)
    states = reply.get("generators")
    for g, s in zip(gens, states if isinstance(states, list) else (), strict=False):
        if isinstance(s, torch.Tensor) and s.dtype == torch.uint8 and s.shape == g.get_state().shape:
            g.set_state(s)
    out = reply.get("result")
    if grad_args and reply.get("graph") is True and isinstance(out, torch.Tensor) and out.is_floating_point():
        return _RemoteGrad.apply(server, reply["id"], out, *[args[i] for i in grad_args])
    return out


class _RemoteGrad(torch.autograd.Function):
    """The server's output as a node of this process's graph; backward runs in the server."""

    @staticmethod
    def forward(ctx, server, call_id, out, *inputs):  # noqa: D401 - autograd's signature
        ctx.server, ctx.call_id = server, call_id
        ctx.meta = [(x.shape, x.dtype, x.device) for x in inputs]
        return out.clone()

    @staticmethod
    def backward(ctx, grad_out):
        reply = ctx.server.request({"op": "backward", "ref": ctx.call_id, "grad_out": grad_out.contiguous()},
                                   where := f"in the {ctx.server.noun}'s call (backward)")
        if reply["op"] == "raised":
            _raise(ctx.server, reply, where)
        grads = reply.get("result")
        if not isinstance(grads, list) or len(grads) != len(ctx.meta):
            raise WrongOutput(f"the target's backward returned {type(grads).__name__}, expected "
                              f"{len(ctx.meta)} gradients")
        out = []
        for g, (shape, dtype, device) in zip(grads, ctx.meta, strict=True):
            if g is None:
                out.append(None)
                continue
            if not isinstance(g, torch.Tensor) or g.shape != shape:
                got = tuple(g.shape) if isinstance(g, torch.Tensor) else type(g).__name__
                raise WrongOutput(f"the target's backward returned a gradient {got}, expected {tuple(shape)}")
            out.append(g.to(device=device, dtype=dtype))
        return (None, None, None, *out)


class _Entry:
    def __init__(self, server: KernelServer, name: str, attrs: dict) -> None:
        self.server, self.name, self.attrs = server, name, attrs
        self.__name__ = name

    def __getattr__(self, name: str):
        attrs = self.__dict__.get("attrs", {})
        if name in attrs:
            return attrs[name]
        raise AttributeError(name)

    def __call__(self, *args, **kw):
        return invoke(self.server, self.name, args, kw, writeback=("out", "lse_out"))


class RemoteTarget:
    """The proxy (module doc) over a started :class:`KernelServer`."""

    def __init__(self, server: KernelServer) -> None:
        info = server.info
        self.server = server
        self.__name__ = str(info.get("name", "target"))
        self._attrs = info.get("attrs") if isinstance(info.get("attrs"), dict) else {}
        entries = info.get("entries") if isinstance(info.get("entries"), dict) else {}
        self._entries = {e: _Entry(server, e, a if isinstance(a, dict) else {}) for e, a in entries.items()
                         if e in ("merge_state", "merge_states", "decode", "varlen", "sdpa")}

    def __getattr__(self, name: str):
        d = self.__dict__
        if name in d.get("_entries", {}):
            return d["_entries"][name]
        if name in d.get("_attrs", {}):
            return d["_attrs"][name]
        raise AttributeError(name)

    def __call__(self, *args, **kw):
        return invoke(self.server, None, args, kw)

    def __repr__(self) -> str:
        return f"<{self.__name__} in a kernel server>"
