"""Triton's interpreter with the GPU's arithmetic: ``with faithful(): kernel[grid](...)``.

Triton's interpreter (``TRITON_INTERPRET=1``, ``triton/runtime/interpreter.py``) runs each program
instance in numpy. Its arithmetic is not a GPU's: bf16 is carried as 16-bit integers and added or
multiplied *as integers*, an fp32 -> bf16 cast truncates, ``tl.dot`` ignores ``input_precision`` (fp32
dots are exact where NVIDIA's default is TF32), and ``tl.sum`` of bf16 sums bit patterns.

:func:`faithful` swaps, for the duration of a ``with`` block, the operations of the interpreter's
builder (``interpreter_builder``: ``binary_op``, ``unary_op``, ``cast_impl``, ``create_fp_to_fp``,
``create_dot`` (float and integer), ``create_fma``, ``create_clampf``, ``create_fp_to_si``) and of its reductions (``ReduceOps.sum``,
``ReduceOps.min_max``, ``ScanOps.apply_impl``) for ones that compute what
:mod:`attnum.kernels.triton.model` says the GPU computes; Triton's own code is not copied, and is
restored on exit. fp16 element-wise arithmetic is left to numpy, whose float16 operations compute in
float32 and round once to nearest even -- the model's answer. With FP fusion on (Triton's
``enable_fp_fusion``, :func:`fp_fusion_default`), an fp32 add or subtract one of whose operands an fp32
multiply produced is one fused multiply-add (:func:`attnum.kernels.triton.model.mul_add`), as LLVM and ptxas contract it;
``GridExecutor.__call__`` is wrapped to honour a launch's own ``enable_fp_fusion=``. A float kernel argument
(not a constexpr) is an fp32 scalar, as Triton's launcher types it (the interpreter passes the Python float
on, a weak scalar in type promotion: ``x_bf16 * sm_scale`` would stay bf16). Before either, an
add of ``tl.dot(a, b)`` (zero accumulator) and d is ``tl.dot(a, b, d)``, as Triton's combine pass
rewrites it. What is not modelled raises
``NotImplementedError`` (an ``unsupported`` verdict): fp8 formats other than e4m3fn / e5m2, bf16 and
fp16 cumulative scans, dot precisions other than tf32 / tf32x3 / ieee.

:func:`wrap` returns a function that runs another under :func:`faithful` (what attnum's Triton
targets use); :func:`name` is the label verdicts carry (``triton-interp:nvidia-sm90``).
"""

from __future__ import annotations

import contextlib
import functools
import threading

import numpy as np
import torch

from attnum.kernels.triton import model
from attnum.kernels.triton import tensor_core as tc
from attnum.kernels.triton.fusion import fp_fusion_default, not_forced_off
from attnum.kernels.triton.values import _BITS, _TORCH, _Codec, _precision, _retype
from attnum.numerics.rounding import round_to

NUMERICS = ("faithful", "raw")
_LOCK = threading.RLock()
_DEPTH = [0]
_SAVED: dict = {}
_PRODUCT = "attnum.fp32_product"  # TensorHandle.attr key: the two factors of an fp32 multiply's result
_DOT = "attnum.dot_zero_acc"  # TensorHandle.attr key: the operands of a tl.dot whose accumulator was zero


def name(numerics: str = "faithful", *, approx_exp: bool = False, fp_fusion: bool | None = None,
         arch: str = tc.DEFAULT_ARCH) -> str:
    """The label of the arithmetic a Triton verdict ran under: ``triton-interp:nvidia-sm90`` (the
    ``arch`` whose tensor cores ``tl.dot`` runs on) plus ``,ex2-approx`` and ``,fp-fusion`` when they are
    on (``fp_fusion=None``: :func:`fp_fusion_default`)."""
    if numerics not in NUMERICS:
        raise ValueError(f"{numerics=} must be one of {NUMERICS}")
    if numerics == "raw":
        return "triton-interp:raw"
    fused = fp_fusion_default() if fp_fusion is None else fp_fusion
    return f"triton-interp:{tc.model_name(arch)}" + (",ex2-approx" if approx_exp else "") + (",fp-fusion" if fused else "")


def _install(approx_exp: bool, fp_fusion: bool, arch: str = tc.DEFAULT_ARCH) -> dict:
    from triton._C.libtriton import ir
    from triton.runtime import interpreter as I

    b, c, TH = I.interpreter_builder, _Codec(), I.TensorHandle
    orig = {k: getattr(b, k) for k in ("binary_op", "unary_op", "cast_impl", "create_fp_to_fp", "create_dot",
                                       "create_fma", "create_clampf", "create_fp_to_si")}
    cls = {(I.ReduceOps, "sum"): I.ReduceOps.sum, (I.ReduceOps, "min_max"): I.ReduceOps.min_max,
           (I.ScanOps, "apply_impl"): I.ScanOps.apply_impl, (I.GridExecutor, "__call__"): I.GridExecutor.__call__,
           (I.InterpretedFunction, "__call__"): I.InterpretedFunction.__call__, (I, "_implicit_cvt"): I._implicit_cvt}
    fusion = [fp_fusion]  # this launch's enable_fp_fusion
    warps = [4]  # this launch's num_warps (Triton's default 4): whether sm90 may use wgmma
    import dataclasses

    opts = b.options
    # The GPU's default max_num_imprecise_acc (the interpreter's is 0), so that semantic.dot hands an fp8
    # dot the value the CUDA backend would: 2**30 on sm90 (never promote), 0 elsewhere.
    b.options = dataclasses.replace(opts, max_num_imprecise_acc_default=tc.HOPPER_IMPRECISE_DEFAULT
                                    if arch == "sm90" else 0)

    def as32(h):
        return TH(c.decode(h, torch.float32).numpy(), c.tl.float32)

    def f64(data):
        return torch.from_numpy(np.asarray(data, dtype=np.float64))

    def fp32_op(lhs, rhs, op):
        """fp32 ``op`` with FP fusion: a multiply's result keeps its factors; an add or subtract with
        such an operand is one fma (the left product when both are: LLVM's DAG combiner tries the
        first operand first when their use counts tie, and use counts are not known here)."""
        if op is np.multiply:
            out = orig["binary_op"](lhs, rhs, op)
            out.attr[_PRODUCT] = (lhs.data, rhs.data)
            return out
        left, right = lhs.attr.get(_PRODUCT), rhs.attr.get(_PRODUCT)
        if op not in (np.add, np.subtract) or (left is None and right is None):
            return orig["binary_op"](lhs, rhs, op)
        sign = -1.0 if op is np.subtract else 1.0
        if left is not None:  # x*y + z, x*y - z
            (x, y), z = map(f64, left), sign * f64(rhs.data)
        else:  # z + x*y, z - x*y
            (x, y), z = map(f64, right), f64(lhs.data)
            x = sign * x
        return TH(model.mul_add(x, y, z, fused=True).float().numpy(), lhs.dtype.scalar)

    def binary_op(lhs, rhs, op):
        fmt = c.of(lhs.dtype)
        if op is np.add and fmt is not None:
            combined = dot_add(lhs, rhs)
            if combined is not None:
                return combined
        if fmt == "fp32" and fusion[0]:
            return fp32_op(lhs, rhs, op)
        if fmt != "bf16":
            return orig["binary_op"](lhs, rhs, op)
        out = orig["binary_op"](as32(lhs), as32(rhs), op)  # fp32, the model's compute format
        if out.data.dtype == np.bool_:
            return TH(out.data, lhs.dtype.scalar)
        r = round_to(torch.from_numpy(np.ascontiguousarray(out.data)), "bf16")  # model.elementwise's rounding
        return TH(c.encode(r, "bf16"), lhs.dtype.scalar)

    def unary_op(arg, op):
        f = c.of(arg.dtype)
        if f == "fp32" and op in (np.exp, np.exp2):
            fn = model.exp if op is np.exp else model.exp2
            return TH(fn(c.decode(arg, torch.float32), approx=approx_exp).float().numpy(), arg.dtype.scalar)
        if f != "bf16":
            return orig["unary_op"](arg, op)
        r = model.unary(lambda x: torch.from_numpy(np.ascontiguousarray(op(x.numpy()))),
                        c.decode(arg, torch.float32), "bf16")
        return TH(c.encode(r, "bf16"), arg.dtype.scalar)

    def convert(src, dst_type, mode="nearest_even"):
        fd = c.of(dst_type)
        x = c.decode(src)
        if fd is None:  # float -> int: C's truncation toward zero
            return TH(x.trunc().numpy().astype(I._get_np_dtype(dst_type)), dst_type.scalar)
        return TH(c.encode(model.cast(x, fd, mode), fd), dst_type.scalar)

    def cast_impl(src, dst_type):
        fs, fd = c.of(src.dtype), c.of(dst_type)
        if fs in _BITS or fd in _BITS:
            return convert(src, dst_type)
        return orig["cast_impl"](src, dst_type)

    def create_fp_to_fp(src, dst_type, rounding_mode):
        rtz = rounding_mode is not None and rounding_mode == ir.ROUNDING_MODE.RTZ
        return convert(src, dst_type, "toward_zero" if rtz else "nearest_even")

    def create_fp_to_si(src, dst_type):
        x = c.decode(src)
        r = model.to_int(x, dst_type.scalar.primitive_bitwidth)
        return TH(r.numpy().astype(I._get_np_dtype(dst_type)), dst_type.scalar)

    def create_dot(a, bb, d, input_precision, max_num_imprecise_acc):
        fa, fb, fd = c.of(a.dtype), c.of(bb.dtype), c.of(d.dtype)
        if fa is None and fb is None and fd is None:  # integer dots (int8 x int8 -> int32)
            r = model.dot_int(torch.from_numpy(np.asarray(a.data)), torch.from_numpy(np.asarray(bb.data)),
                              torch.from_numpy(np.asarray(d.data)), acc_bits=d.dtype.scalar.primitive_bitwidth)
            return TH(r.numpy().astype(d.data.dtype), d.dtype.scalar)
        if fa is None or fb is None or fd is None:  # mixed integer / float operands: not modelled
            raise NotImplementedError("tl.dot of mixed integer and float operands is not modelled by attnum's "
                                      "faithful interpreter")
        how = {"precision": _precision(input_precision), "out_fmt": fd,
               "operand_bits": min(a.dtype.scalar.primitive_bitwidth, bb.dtype.scalar.primitive_bitwidth),
               "arch": arch, "dtypes": (_TORCH[fa], _TORCH[fb]), "max_imprecise": int(max_num_imprecise_acc or 0),
               "num_warps": warps[0]}
        acc = c.decode(d)
        out = TH(c.encode(model.dot(c.decode(a), c.decode(bb), acc, **how), fd), d.dtype.scalar)
        if not max_num_imprecise_acc and not bool(acc.any()):  # dot(a, b, 0): an add may become its acc
            out.attr[_DOT] = (a, bb, how)
        return out

    def dot_add(lhs, rhs):
        """Triton's combine pass (``Combine.td``, ``CombineDotAddFPattern`` and its reverse):
        ``d + tl.dot(a, b)`` with a zero accumulator becomes ``tl.dot(a, b, d)``, the add gone, so the
        MMA accumulates onto d (rounded per k-step) instead of d being added once at the end. The
        pattern also wants the dot result used once and a zero constant as accumulator; neither is
        visible here (an all-zero accumulator is taken for the constant). None: no dot operand."""
        dot_of, acc = rhs.attr.get(_DOT), lhs
        if dot_of is None:
            dot_of, acc = lhs.attr.get(_DOT), rhs
        if dot_of is None:
            return None
        a, bb, how = dot_of
        r = model.dot(c.decode(a), c.decode(bb), c.decode(acc), **how)
        return TH(c.encode(r, how["out_fmt"]), lhs.dtype.scalar)

    def create_fma(x, y, z):
        if c.of(z.dtype) != "bf16":
            return orig["create_fma"](x, y, z)
        r = round_to(c.decode(x) * c.decode(y) + c.decode(z), "bf16")  # exact product, one rounding
        return TH(c.encode(r, "bf16"), z.dtype.scalar)

    def create_clampf(arg, lo, hi, propagate_nans):
        if c.of(arg.dtype) != "bf16":
            return orig["create_clampf"](arg, lo, hi, propagate_nans)
        out = orig["create_clampf"](as32(arg), as32(lo), as32(hi), propagate_nans)
        return TH(c.encode(torch.from_numpy(out.data), "bf16"), arg.dtype.scalar)  # exact: one of the inputs

    def reduce_sum(self, input):
        f = c.of(input.dtype)
        if f not in ("bf16", "fp16"):
            return cls[(I.ReduceOps, "sum")](self, input)
        x, axis = c.decode(input.handle, torch.float32), self.axis
        if axis is None:
            x, axis = x.reshape(-1), 0
        r = model.tree_sum(x, axis, f)
        if self.keep_dims:
            r = r.unsqueeze(axis) if self.axis is not None else r.reshape([1] * input.handle.data.ndim)
        return self.to_tensor(c.encode(r, f), input.dtype)

    def min_max(self, input, val_reduce_op, idx_reduce_op=None):
        if c.of(input.dtype) != "bf16":
            return cls[(I.ReduceOps, "min_max")](self, input, val_reduce_op, idx_reduce_op)
        x32 = c.tl.core.tensor(as32(input.handle), _retype(input.type, c.tl.float32))
        out = cls[(I.ReduceOps, "min_max")](self, x32, val_reduce_op, idx_reduce_op)

        def back(t):
            if t.dtype != c.tl.float32:
                return t
            r = c.encode(torch.from_numpy(np.ascontiguousarray(t.handle.data)), "bf16")  # exact: a max/min
            return c.tl.core.tensor(TH(r, c.tl.bfloat16), _retype(t.type, c.tl.bfloat16))

        return tuple(back(t) for t in out) if isinstance(out, tuple) else back(out)

    def scan(self, input):
        if any(c.of(t.dtype) in ("bf16", "fp16") for t in input):
            raise NotImplementedError("tl.cumsum / tl.associative_scan over bf16 or fp16 is not modelled by "
                                      "attnum's faithful interpreter")
        return cls[(I.ScanOps, "apply_impl")](self, input)

    def launch(self, *args, **kwargs):
        asked = kwargs.get("enable_fp_fusion")
        before, warps_before = fusion[0], warps[0]
        warps[0] = int(kwargs.get("num_warps") or 4)
        if asked is not None:
            fusion[0] = bool(asked) and not_forced_off()  # Triton's rule for an explicit request
        import triton.language as tl

        scope = I._LangPatchScope()
        if id(tl.core) not in _langs(self.fn):  # what a device function of triton.language.core would patch
            I._patch_builtin(tl.core, I.interpreter_builder, scope)
            I._patch_builtin(tl.core.tensor, I.interpreter_builder, scope)
            I._patch_lang_tensor(tl.core.tensor, scope)
            I._patch_lang_core(tl.core, scope)
        patched.append(frozenset((id(tl), id(tl.core))))
        try:
            return cls[(I.GridExecutor, "__call__")](self, *args, **kwargs)
        finally:
            fusion[0], warps[0] = before, warps_before
            patched.pop()
            scope.restore()

    patched: list[frozenset] = []  # the triton.language modules each running launch has patched

    def device_call(self, *args, **kwargs):
        """A @triton.jit function called from a kernel (``tl.cdiv``, a kernel's helpers). Triton's
        interpreter re-patches triton.language on every such call (``_patch_lang``: ``inspect.getmembers``
        of up to four modules, about 0.5 ms) and never restores what it patched. Here each launch patches
        ``tl`` (Triton's launch) and ``tl.core`` (above, with Triton's own patch functions, restored after
        the launch), so a device function whose globals reach no other module goes straight to its
        rewritten function: a quarter of an interpreted decode kernel's time. Called outside a launch, it
        takes Triton's own path. The arithmetic is the same either way (outputs bit-identical)."""
        if not patched or not _langs(self.fn) <= patched[-1]:
            return cls[(I.InterpretedFunction, "__call__")](self, *args, **kwargs)
        fn = self.rewrite()
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            raise I.InterpreterError(repr(e)) from e

    def implicit_cvt(arg):
        """A kernel argument as the launch hands it over. A float that is not a constexpr is an fp32
        scalar on the GPU (Triton's launcher types it ``fp32``), so it promotes a bf16 or fp16 tensor to
        fp32 (``x_bf16 * sm_scale`` is fp32). Triton's interpreter passes the Python float on, and its
        type promotion treats a Python number as a weak scalar: the product would stay bf16, with the
        scale itself rounded to bf16. Here it is the fp32 scalar (rounded to nearest, as the launcher's
        double -> float conversion)."""
        if isinstance(arg, float):
            return c.tl.core.tensor(TH(np.array([arg], dtype=np.float32), c.tl.float32), c.tl.float32)
        return cls[(I, "_implicit_cvt")](arg)

    new = {"binary_op": binary_op, "unary_op": unary_op, "cast_impl": cast_impl, "create_fp_to_fp": create_fp_to_fp,
           "create_dot": create_dot, "create_fma": create_fma, "create_clampf": create_clampf,
           "create_fp_to_si": create_fp_to_si}
    for k, fn in new.items():
        setattr(b, k, fn)
    I.ReduceOps.sum, I.ReduceOps.min_max, I.ScanOps.apply_impl = reduce_sum, min_max, scan
    I.GridExecutor.__call__ = launch
    I.InterpretedFunction.__call__ = device_call
    I._implicit_cvt = implicit_cvt
    return {"builder": (b, orig), "classes": cls, "options": (b, opts)}


_LANGS: dict = {}


def _langs(fn) -> frozenset:
    """The ids of the triton.language modules (``tl``, ``tl.core``) in ``fn``'s globals: what Triton's
    interpreter patches for it (``_patch_lang``)."""
    key = id(fn.__globals__)
    if key not in _LANGS:  # the globals dict is kept with its answer, so its id is never reused
        import triton.language as tl

        _LANGS[key] = (fn.__globals__,
                       frozenset(id(v) for v in list(fn.__globals__.values()) if v is tl or v is tl.core))
    return _LANGS[key][1]


def _uninstall(saved: dict) -> None:
    ob, opts = saved["options"]
    ob.options = opts
    b, orig = saved["builder"]
    for k in orig:
        with contextlib.suppress(AttributeError):
            delattr(b, k)  # the instance attribute shadowed the class's method
    for (klass, attr), fn in saved["classes"].items():
        setattr(klass, attr, fn)


@contextlib.contextmanager
def faithful(*, approx_exp: bool = False, fp_fusion: bool | None = None, arch: str = tc.DEFAULT_ARCH):
    """Run interpreted Triton kernels inside the block with the GPU's arithmetic (module docstring).
    ``fp_fusion``: fp32 multiply-add contraction, None for the installed Triton's default
    (:func:`fp_fusion_default`); a launch's own ``enable_fp_fusion=`` still wins, as on the GPU.
    ``arch``: the GPU whose tensor cores ``tl.dot`` runs on (:data:`attnum.kernels.triton.tensor_core.ARCHES`).

    Needs ``TRITON_INTERPRET=1`` (kernels decorated under it). Re-entrant (an inner block keeps the
    outer one's settings); not for concurrent threads running interpreted kernels under different
    settings."""
    with _LOCK:
        if _DEPTH[0] == 0:
            fused = fp_fusion_default() if fp_fusion is None else fp_fusion
            _SAVED["state"] = _install(approx_exp, fused, tc.check_arch(arch))
        _DEPTH[0] += 1
    try:
        yield
    finally:
        with _LOCK:
            _DEPTH[0] -= 1
            if _DEPTH[0] == 0:
                _uninstall(_SAVED.pop("state"))


def wrap(fn, *, numerics: str = "faithful", approx_exp: bool = False, fp_fusion: bool | None = None,
         arch: str = tc.DEFAULT_ARCH):
    """``fn`` run under :func:`faithful` (``numerics="faithful"``) or as is (``"raw"``)."""
    if numerics not in NUMERICS:
        raise ValueError(f"{numerics=} must be one of {NUMERICS}")
    if numerics == "raw":
        return fn

    @functools.wraps(fn)
    def call(*args, **kw):
        with faithful(approx_exp=approx_exp, fp_fusion=fp_fusion, arch=arch):
            return fn(*args, **kw)

    return call
