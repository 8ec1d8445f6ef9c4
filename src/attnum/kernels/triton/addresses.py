"""Every address an interpreted Triton kernel loads or stores, checked against the tensor it came from.

Triton's interpreter (``triton/runtime/interpreter.py``) turns each tensor argument into its raw address
(``_implicit_cvt``: ``arg.data_ptr()``) and dereferences whatever address a ``tl.load`` / ``tl.store``
computes (``interpreter.load`` / ``store`` in C++). A read past a tensor's end returns whatever the heap
holds there, or kills the process with SIGSEGV when that page is unmapped: the same kernel passes on one
run and crashes on another. Under :func:`checked` every access is checked before it happens:

- **Provenance in the address.** At each launch the i-th tensor argument's address gets the tag i in
  bits 48..62 (x86-64 and AArch64 user addresses fit in 48 bits). Every pointer the kernel derives from
  it -- ``+`` offsets, ``tl.where``, broadcasts, reshapes, casts to an integer and back, a tensor
  descriptor's base -- carries the tag, because the interpreter computes pointers as plain uint64
  arithmetic (an offset of 2**48 bytes would be needed to disturb it). So each lane's address says
  which argument it was derived from, with no bookkeeping per operation that an op Triton adds could
  bypass. The tags are stripped before the real access.
- **An offset that reaches the tag.** ``ptr + offset`` (``create_addptr``, every ``+`` on a pointer) whose
  result's top 16 bits differ from its pointer's carried into or borrowed from the tag: 2**48 bytes or more
  away, an address no GPU maps. Such a lane is marked (the tag :data:`MOVED`) and any live access through
  it is :class:`OutOfBounds`; without the mark, ``x + 2**46`` fp32 elements would read as the next
  argument's pointer and ``x - 2**46`` as an untagged one inside ``x``, both passed.
- **The check.** Each live lane (mask true) of ``create_masked_load`` / ``create_masked_store`` (which
  ``tl.load`` / ``tl.store`` of blocks and scalars, tensor-descriptor loads and stores, gathers and
  scatters, ``atomic_load`` / ``atomic_store`` go through) and of ``create_atomic_rmw`` /
  ``create_atomic_cas`` must lie, all ``width`` bytes of it, inside the elements of *its own* argument:
  between the view's first and last element (:mod:`attnum.kernels.triton.extents`), and for a view with gaps (``kv[:, 0]``
  of a [blocks, 2, ...] cache) not in a gap. Lanes masked off are neither checked nor dereferenced
  (Triton's C++ ``load`` / ``store`` / ``atomic_rmw`` skip them: a wild address there is harmless).
  Outside: :class:`OutOfBounds`, naming the kernel, the argument, the distance past the end (or before
  the start) in elements and bytes, how many lanes, and the program id. It depends on offsets from the
  tensor only, never on the heap: the same on every run.
- **What a view may reach.** A kernel handed a view may reach that view's elements, not the rest of
  its base's storage: a key cache handed over as ``kv_cache[:, 0]`` that reads block ``num_blocks``
  reads the value cache, which is a bug although the memory is mapped.
- **Untagged addresses** (a pointer built from an integer the kernel loaded or was passed) have no
  provenance: they may lie inside any argument; outside every one, the access is refused
  (:class:`Unchecked`, a ``NotImplementedError``: ``unsupported``), since attnum cannot tell a wild read from a pointer table.

Shapes: an access is a block of lanes, ``ptrs`` (any shape) uint64, ``mask`` (the same shape) bool.
"""

from __future__ import annotations

import contextlib
import inspect
import threading

import numpy as np

from attnum.kernels.triton.extents import Extent, extent, inside

SHIFT = 48
TAG_LIMIT = 1 << 15  # tags live in bits 48..62: int64 casts of a tagged pointer stay positive
MOVED = TAG_LIMIT - 1  # the tag of a pointer whose arithmetic reached the tag bits (never an argument's)
_TOP = np.uint64(SHIFT)
ADDRESS = np.uint64((1 << SHIFT) - 1)
_LOCK = threading.RLock()
_DEPTH = [0]
_SAVED: dict = {}
_ACTIVE: list = []  # the launches running now, innermost last (one per GridExecutor call)


class OutOfBounds(Exception):  # noqa: N818 - the finding's name, as the audit prints it
    """A kernel accessed memory outside the tensor argument its pointer was derived from (module doc)."""


class Unchecked(NotImplementedError):
    """An access the check cannot vouch for (an untagged address outside every argument): a refusal."""


class _Launch:
    """One kernel launch: its name, its tensor arguments' names in call order (matched to the host
    copies the interpreter converts), and the extent of each tag."""

    def __init__(self, kernel: str, names: list[tuple[str, tuple]]) -> None:
        self.kernel, self.names, self.extents = kernel, names, []

    def claim(self, sig: tuple) -> str:
        for i, (name, s) in enumerate(self.names):
            if s == sig:
                del self.names[i]
                return name
        return f"argument {len(self.extents) + 1}"


def _signature(t) -> tuple:
    """What survives the interpreter's copy of an argument to the host: dtype, sizes, strides, offset."""
    return (str(t.dtype), tuple(t.shape), tuple(t.stride()), int(t.storage_offset()))


def _tensor(arg):
    """The torch tensor behind a kernel argument (``triton.reinterpret`` wraps one), or None."""
    base = getattr(arg, "base", None) if type(arg).__name__ == "TensorWrapper" else arg
    return base if hasattr(base, "untyped_storage") else None


def _arguments(executor, args: tuple, kwargs: dict) -> list[tuple[str, tuple]]:
    """(name, signature) of each tensor a launch hands its kernel, in parameter order, as Triton's
    ``GridExecutor.__call__`` binds them (a tuple's items are ``name[i]``, a descriptor's base ``name``)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    spec = inspect.getfullargspec(executor.fn)
    kw = {k: v for k, v in kwargs.items() if k in spec.args or k in spec.kwonlyargs}
    try:
        bound = inspect.getcallargs(executor.fn, *args, **kw)
    except TypeError:  # Triton will say why
        return []
    out: list[tuple[str, tuple]] = []

    def walk(name, arg):
        if isinstance(arg, tuple):
            for i, a in enumerate(arg):
                walk(f"{name}[{i}]", a)
        elif isinstance(arg, TensorDescriptor):
            walk(name, arg.base)
        elif _tensor(arg) is not None:
            out.append((name, _signature(_tensor(arg))))

    for name, arg in bound.items():
        if name not in executor.constexprs:
            walk(name, arg)
    return out


def _outside(frame: _Launch, e: Extent, addr: np.ndarray, bad: np.ndarray, width: int, verb: str) -> str:
    """The sentence for the lanes ``bad`` of an access to ``e``."""
    from triton.runtime import interpreter as I

    hit = addr[bad].astype(np.int64)
    past = int(hit.max()) + width - e.hi
    before = e.lo - int(hit.min())

    def by(n: int) -> str:
        k = -(-n // e.itemsize)
        return f"by {k} element{'s' if k != 1 else ''} ({n} byte{'s' if n != 1 else ''})"

    where = []
    if past > 0:
        where.append(f"past the end of {e.name} {by(past)}")
    if before > 0:
        where.append(f"before the start of {e.name} {by(before)}")
    if not where:
        where.append(f"{e.name} between its elements (a gap of the view, {int(hit.min()) - e.lo} bytes from its start)")
    pid = tuple(int(x) for x in I.interpreter_builder.grid_idx)
    lanes = f"{int(bad.sum())} of {bad.size} lane{'s' if bad.size != 1 else ''}"
    return f"kernel {frame.kernel} {verb} {' and '.join(where)}: {lanes}, program {pid}; {e.name} is {e.what}"


def check(ptrs: np.ndarray, mask: np.ndarray | None, width: int, verb: str) -> np.ndarray:
    """The untagged addresses of an access (``verb``: "read", "wrote", "atomically updated") whose live
    lanes (``mask``; None: all) all lie in their own argument's elements; else raises
    :class:`OutOfBounds` (:class:`Unchecked` for an untagged address outside every argument)."""
    p = np.asarray(ptrs, dtype=np.uint64)
    live = p.reshape(-1) if mask is None else p[np.broadcast_to(np.asarray(mask, dtype=bool), p.shape)]
    if live.size and _ACTIVE:
        frame = _ACTIVE[-1]
        tags = live >> np.uint64(SHIFT)
        one = tags.min() == tags.max()
        for tag in (tags[:1] if one else np.unique(tags)):
            addr = (live if one else live[tags == tag]) & ADDRESS
            _within(frame, int(tag), addr, width, verb)
    return p & ADDRESS


def _within(frame: _Launch, tag: int, addr: np.ndarray, width: int, verb: str) -> None:
    if tag == 0:
        owned = np.zeros(addr.shape, dtype=bool)
        for e in frame.extents:
            owned |= inside(e, addr, width)
        if not owned.all():
            raise Unchecked(
                f"kernel {frame.kernel} {verb} through an address not derived from any tensor argument (a pointer "
                "built from an integer) that lies outside every argument: attnum's address check cannot vouch for it")
        return
    if tag == MOVED:
        raise OutOfBounds(f"kernel {frame.kernel} {verb} through a pointer whose offset moved it 2**48 bytes or more "
                          "from the argument it was derived from (its arithmetic overflowed into the address's top "
                          "bits): no GPU maps an address there")
    if tag > len(frame.extents):
        raise OutOfBounds(f"kernel {frame.kernel} {verb} an address 2**48 bytes or more away from the argument its "
                          "pointer was derived from")
    e = frame.extents[tag - 1]
    ok = inside(e, addr, width)
    if not ok.all():
        raise OutOfBounds(_outside(frame, e, addr, ~ok, width, verb))


def _width(ptrs) -> int:
    return max(1, ptrs.get_element_ty().primitive_bitwidth // 8)


def _install() -> dict:
    from triton.runtime import interpreter as I

    b, TH = I.interpreter_builder, I.TensorHandle
    keys = ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas", "create_addptr")
    mine = {k: k in vars(b) for k in keys}  # an instance attribute already there (another patch) is restored
    orig = {k: getattr(b, k) for k in keys}
    cls = {"launch": I.GridExecutor.__call__, "cvt": I._implicit_cvt}

    def masked_load(ptrs, mask, other, cache_policy, is_volatile):
        clean = TH(check(ptrs.data, mask.data, _width(ptrs), "read"), ptrs.dtype)
        return orig["create_masked_load"](clean, mask, other, cache_policy, is_volatile)

    def masked_store(ptrs, value, mask, cache_policy):
        clean = TH(check(ptrs.data, mask.data, _width(ptrs), "wrote"), ptrs.dtype)
        return orig["create_masked_store"](clean, value, mask, cache_policy)

    def atomic_rmw(rmw_op, ptr, val, mask, sem, scope):
        clean = TH(check(ptr.data, mask.data, _width(ptr), "atomically updated"), ptr.dtype)
        return orig["create_atomic_rmw"](rmw_op, clean, val, mask, sem, scope)

    def atomic_cas(ptr, cmp, val, sem, scope):
        clean = TH(check(ptr.data, None, _width(ptr), "atomically updated"), ptr.dtype)
        return orig["create_atomic_cas"](clean, cmp, val, sem, scope)

    def addptr(ptr, offset):
        out = orig["create_addptr"](ptr, offset)
        if _ACTIVE:  # a lane whose top bits moved left its argument by 2**48 bytes or more: marked (module doc)
            moved = (np.asarray(ptr.data, dtype=np.uint64) >> _TOP) != (out.data >> _TOP)
            if moved.any():
                out.data = np.where(moved, (out.data & ADDRESS) | np.uint64(MOVED << SHIFT), out.data)
        return out

    def launch(self, *args, **kwargs):
        _ACTIVE.append(_Launch(getattr(self.fn, "__name__", "kernel"), _arguments(self, args, kwargs)))
        try:
            return cls["launch"](self, *args, **kwargs)
        finally:
            _ACTIVE.pop()

    def implicit_cvt(arg):
        out = cls["cvt"](arg)
        t = _tensor(arg)
        if not _ACTIVE or t is None:
            return out
        frame = _ACTIVE[-1]
        addr = int(out.handle.data.reshape(-1)[0])
        tag = len(frame.extents) + 1
        if addr >> SHIFT or tag >= MOVED:
            raise Unchecked(f"kernel {frame.kernel}: argument {tag}, at address {addr:#x}, leaves no room for "
                            "attnum's address tags (addresses below 2**48, fewer than 2**15 - 1 arguments)")
        frame.extents.append(extent(frame.claim(_signature(t)), t))
        out.handle.data = out.handle.data | np.uint64(tag << SHIFT)
        return out

    for k, fn in {"create_masked_load": masked_load, "create_masked_store": masked_store,
                  "create_atomic_rmw": atomic_rmw, "create_atomic_cas": atomic_cas, "create_addptr": addptr}.items():
        setattr(b, k, fn)
    I.GridExecutor.__call__, I._implicit_cvt = launch, implicit_cvt
    return {"builder": (b, orig, mine), "classes": cls}


def _uninstall(saved: dict) -> None:
    from triton.runtime import interpreter as I

    b, orig, mine = saved["builder"]
    for k, fn in orig.items():
        if mine[k]:
            setattr(b, k, fn)
        else:
            with contextlib.suppress(AttributeError):
                delattr(b, k)
    I.GridExecutor.__call__, I._implicit_cvt = saved["classes"]["launch"], saved["classes"]["cvt"]


@contextlib.contextmanager
def checked():
    """Check every address interpreted Triton kernels access inside the block (module doc). Re-entrant;
    nests with :func:`attnum.kernels.triton.faithful.faithful` in either order (each restores what it
    found); not for concurrent threads running interpreted kernels."""
    with _LOCK:
        if _DEPTH[0] == 0:
            _SAVED["state"] = _install()
        _DEPTH[0] += 1
    try:
        yield
    finally:
        with _LOCK:
            _DEPTH[0] -= 1
            if _DEPTH[0] == 0:
                _uninstall(_SAVED.pop("state"))


def found_in(exc: BaseException) -> OutOfBounds | Unchecked | None:
    """The :class:`OutOfBounds` (or :class:`Unchecked`) inside the ``InterpreterError`` Triton wraps a
    kernel's exception in."""
    seen = exc
    while seen is not None:
        if isinstance(seen, OutOfBounds | Unchecked):
            return seen
        seen = seen.__cause__
    return None
