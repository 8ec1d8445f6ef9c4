"""The kernel server's child side (protocol: :mod:`attnum.sandbox.server`): resolve, then call on request.

Nothing here judges anything; it only runs the user's function on the inputs it is sent and sends
back what came out. User code runs in this process and may do anything to it, including write to
the channel: the parent treats every frame as the kernel's answer to one call.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import warnings
from collections import OrderedDict

import torch

from attnum.errors import AttnumInputError
from attnum.sandbox.isolation import become_subreaper, die_with_parent
from attnum.sandbox.wire import HEAD, decode, encode

ENTRIES = ("merge_state", "merge_states", "decode", "varlen", "sdpa")
MAX_GRAPHS = 64  # autograd graphs kept for backward calls that may still come (oldest dropped)
MAX_WARNINGS = 20  # per call: a kernel that warns in a loop still sends a short list
ATTRS = ("causal_alignment", "empty_rows", "lse_base", "empty_lse", "kv_cache_dtype", "k_scale", "v_scale",
         "q_scale", "split_rule", "single_query_only", "accepts_out", "emulation", "attnum_numerics", "attnum_batch_invariant",
         "attnum_emulation", "attnum_softcap", "attnum_window", "attnum_sinks", "attnum_mla",
         "attnum_block_select", "attnum_sdpa")


def _jsonable(x, depth: int = 0) -> bool:
    if x is None or isinstance(x, bool | int | float | str):
        return True
    if isinstance(x, dict) and depth < 2:
        return all(isinstance(k, str) and _jsonable(v, depth + 1) for k, v in x.items())
    return False


def _attrs(obj) -> dict:
    out = {}
    for a in ATTRS:
        with contextlib.suppress(Exception):
            v = getattr(obj, a, None)
            if v is not None and _jsonable(v):
                out[a] = v
    return out


def _read(fh) -> dict:
    head = fh.read(HEAD.size)
    if len(head) < HEAD.size:
        raise EOFError
    n_head, n_payload = HEAD.unpack(head)
    return decode(fh.read(n_head), fh.read(n_payload))


def _resolve(init: dict):
    """(fn, ready message)."""
    if init["kind"] == "sampler":
        # The sampler auditor names its resolver (a layer above this one), so the sandbox imports no study.
        module, _, attr = str(init.get("resolver") or "").partition(":")
        if not module.startswith("attnum.") or not attr:
            raise ValueError(f"resolver={init.get('resolver')!r} must be 'attnum.MODULE:FUNCTION'")
        name, fn = getattr(importlib.import_module(module), attr)(init["spec"])
        return fn, {"op": "ready", "available": True, "reason": "", "declared": {}, "attrs": {}, "entries": {},
                    "name": name}
    from attnum.kernels.registry import resolve

    t = resolve(init["spec"], init["device"], param="target", numerics=init["numerics"], block_q=init["block_q"],
                block_k=init["block_k"], arch=init.get("arch") or "sm90")
    entries = {}
    for e in ENTRIES:
        f = getattr(t.fn, e, None) if t.fn is not None else None
        if callable(f):
            entries[e] = _attrs(f)
    return t.fn, {"op": "ready", "available": t.available, "reason": t.reason, "declared": dict(t.declared),
                  "attrs": _attrs(t.fn) if t.fn is not None else {}, "entries": entries, "name": t.name}


def serve() -> None:
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    inp = os.fdopen(os.dup(0), "rb", buffering=1 << 16)
    os.set_inheritable(out.fileno(), False)
    os.set_inheritable(inp.fileno(), False)
    os.dup2(2, 1)  # whatever user code prints goes to stderr, never into the parent's stdout
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    init = _read(inp)
    if os.getppid() != init["parent"]:
        os._exit(0)  # the parent is already gone
    die_with_parent()
    become_subreaper()
    import faulthandler

    faulthandler.enable()  # a crash leaves the Python stack on stderr
    sys.path[:] = init["sys_path"]
    torch.set_num_threads(max(1, int(init["threads"])))
    try:
        fn, ready = _resolve(init)
    except AttnumInputError as err:
        out.write(encode({"op": "input_error", "text": str(err)}))
        return
    out.write(encode(ready))
    graphs: OrderedDict[int, tuple] = OrderedDict()
    while True:
        try:
            msg = _read(inp)
        except EOFError:
            return
        op = msg.get("op")
        if op == "release":
            for i in msg.get("ids", ()):
                graphs.pop(i, None)
            continue
        # Warnings the user code raises (Triton's interpreter: numpy's RuntimeWarnings) go back with the
        # reply, for the case's note, instead of into the middle of the parent's progress lines.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                reply = _call(fn, msg, graphs) if op == "call" else _backward(msg, graphs)
            except SystemExit as exc:  # the parent ends this child and reports it as "exited"
                out.write(encode({"op": "raised", "id": msg["id"], "type": "SystemExit", "text": repr(exc.code)}))
                return
            except Exception as exc:  # noqa: BLE001 - the user code's exception is its answer
                reply = {"op": "raised", "id": msg["id"], "type": type(exc).__name__, "text": str(exc)}
        if caught:
            reply["warnings"] = [f"{w.category.__name__}: {str(w.message).splitlines()[0][:200]}"
                                 for w in caught[:MAX_WARNINGS]]
        try:
            frame = encode(reply)
        except Exception as exc:  # noqa: BLE001 - an output that cannot be sent is the call's exception
            frame = encode({"op": "raised", "id": msg["id"], "type": type(exc).__name__, "text": str(exc)})
        out.write(frame)


def _call(fn, msg: dict, graphs: OrderedDict) -> dict:
    args, kw = list(msg["args"]), dict(msg["kw"])
    gens = [v for v in (*args, *kw.values()) if isinstance(v, torch.Generator)]
    grad = [i for i in msg.get("grad_args", ()) if isinstance(args[i], torch.Tensor)]
    for i in grad:
        args[i] = args[i].requires_grad_(True)
    f = getattr(fn, msg["entry"]) if msg.get("entry") else fn
    cast = msg.get("autocast")
    ac = torch.autocast(args[0].device.type if args and isinstance(args[0], torch.Tensor) else "cpu",
                        dtype=getattr(torch, cast)) if cast else contextlib.nullcontext()
    with torch.set_grad_enabled(bool(msg.get("grad_mode", True))), ac:
        result = f(*args, **kw)
    graph = bool(grad) and isinstance(result, torch.Tensor) and result.grad_fn is not None
    if graph:
        graphs[msg["id"]] = ([args[i] for i in grad], result)
        while len(graphs) > MAX_GRAPHS:
            graphs.popitem(last=False)
    return {"op": "ok", "id": msg["id"], "result": result.detach() if isinstance(result, torch.Tensor) else result,
            "graph": graph, "writeback": {k: kw[k] for k in msg.get("writeback", ()) if k in kw},
            "generators": [g.get_state() for g in gens]}


def _backward(msg: dict, graphs: OrderedDict) -> dict:
    inputs, out = graphs.pop(msg["ref"])
    grads = torch.autograd.grad(out, inputs, msg["grad_out"], allow_unused=True)
    return {"op": "ok", "id": msg["id"], "result": [None if g is None else g.detach() for g in grads]}
