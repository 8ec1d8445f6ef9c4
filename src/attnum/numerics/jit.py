"""Compiled element-wise kernels (numba): exact rounding onto a FloatFormat's grid in one pass.

The torch paths of :mod:`attnum.numerics.rounding` are the reference; the kernels here compute the same
bits (one rounding from the carrier value, the format's overflow rule) in one pass over memory,
from the IEEE bit fields with integer arithmetic:

    value = sig * 2**ex (sig < 2**53 from the float64 bits; a float32 is widened exactly),
    quantum 2**q with q = max(binade, emin) - mbits; n = sig >> (q - ex) rounded by the dropped bits
    (nearest-even: above half, or exactly half and n odd; toward zero: dropped); result n * 2**q.

``n * 2**q`` is one exact multiplication whenever the result is a value of a format that fits the
carrier; past the format's max it follows the overflow rule of :func:`attnum.numerics.rounding.round_to`.

The kernels are used when numba imports and ``ATTNUM_JIT`` is not ``0`` (``ATTNUM_JIT=0`` runs the
torch reference everywhere; :func:`enabled`). Scalar functions (``round_scalar``) are also inlined
into the fused tile kernels of :mod:`attnum.attention.fused`.

Every kernel is compiled with ``cache=True``: a program pays the compilation (seconds per kernel) once,
and every later run loads the machine code from numba's cache. numba keeps that cache in a
``__pycache__`` folder beside the source; where attnum's package folder is not writable (a system-wide
install, a read-only image) and ``NUMBA_CACHE_DIR`` is not set, :func:`numba_cache_dir` points numba at
``$ATTNUM_CACHE/numba`` (default ``~/.cache/attnum/numba``), set before numba is imported.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np


def numba_cache_dir(package_dir: Path, environ: dict) -> str | None:
    """The folder numba should cache attnum's compiled kernels in: None (numba's own choice, ``__pycache__``
    beside the source) when ``NUMBA_CACHE_DIR`` is set or ``package_dir`` is writable, else
    ``$ATTNUM_CACHE/numba`` (``~/.cache/attnum/numba``)."""
    if environ.get("NUMBA_CACHE_DIR"):
        return None
    pycache = package_dir / "__pycache__"
    if os.access(pycache if pycache.is_dir() else package_dir, os.W_OK):
        return None
    return str(Path(environ.get("ATTNUM_CACHE") or Path.home() / ".cache" / "attnum") / "numba")


# Global state, once, on purpose: numba reads its cache location from the environment when it loads.
_CACHE_DIR = numba_cache_dir(Path(__file__).resolve().parent, dict(os.environ))
if _CACHE_DIR is not None:
    os.environ["NUMBA_CACHE_DIR"] = _CACHE_DIR

try:  # numba is a dependency; a broken install falls back to the torch reference, visibly (enabled())
    import numba
    from numba import njit, types
    from numba.extending import intrinsic

    if _CACHE_DIR is not None:  # numba was loaded before attnum (by another library): tell it now
        numba.core.config.reload_config()
except Exception:  # pragma: no cover - exercised only without numba
    numba = None

MODE_CODES = {"nearest_even": 0, "toward_zero": 1}
SPECIALS_CODES = {"ieee": 0, "fn": 1, "none": 2}


def enabled() -> bool:
    """The compiled kernels are in use: numba imported and ``ATTNUM_JIT`` is not ``0``."""
    return numba is not None and os.environ.get("ATTNUM_JIT", "1") != "0"


@functools.lru_cache(maxsize=256)
def rne_args(fmt, saturate: bool = False) -> tuple:
    """The format as :func:`rne`'s constants: (drop, magic, tiny, max, overflow value, inf value, nosub).

    drop = 52 - mbits low bits go; magic = 2**(emin - mbits + 52) rounds the subnormal binades by one
    addition; finite overflow becomes inf (ieee), NaN (fn) or max (no specials, or ``saturate``)."""
    inf, nan = float("inf"), float("nan")
    over = float(fmt.max) if saturate or fmt.specials == "none" else (inf if fmt.specials == "ieee" else nan)
    return (52 - fmt.mbits, 2.0 ** (fmt.emin - fmt.mbits + 52), float(fmt.tiny), float(fmt.max), over, over,
            not fmt.subnormals)


@functools.lru_cache(maxsize=256)
def rne32_args(fmt, saturate: bool = False) -> tuple:
    """:func:`rne_args` for :func:`rne32`, a float32 value rounded on float32's bits (``fmt`` must fit
    fp32 with fewer than 23 mantissa bits): drop = 23 - mbits; magic = 2**(emin - mbits + 23), whose
    float32 ulp is the format's subnormal quantum (exact: emin >= -126 and mbits < 23 for such a format)."""
    _, _, tiny, fmax, over, infv, nosub = rne_args(fmt, saturate)
    f = np.float32
    return (np.int32(23 - fmt.mbits), f(2.0 ** (fmt.emin - fmt.mbits + 23)), f(tiny), f(fmax), f(over), f(infv), nosub)


def rne32_applies(fmt, src_dtype, dst_dtype) -> bool:
    """:func:`rne32` computes the rounding: float32 in and out, a format with fp32's range or less and
    fewer than 23 mantissa bits (every such format fits float32, so its constants are float32 values)."""
    return (src_dtype == np.float32 and dst_dtype == np.float32 and fmt.mbits < 23 and fmt.emin >= -126
            and fmt.emax <= 127)


@functools.lru_cache(maxsize=256)
def format_args(fmt, mode: str, saturate: bool) -> tuple:
    """The format as the kernels' plain arguments (formats stay data: nothing is compiled per format)."""
    return (fmt.mbits, fmt.emin, float(fmt.max), float(fmt.tiny), SPECIALS_CODES[fmt.specials],
            bool(fmt.subnormals), MODE_CODES[mode], bool(saturate))


if numba is not None:
    def _bitcast(src, dst):
        """An intrinsic reinterpreting a ``src`` scalar's bits as ``dst`` (a register bitcast)."""
        @intrinsic
        def cast(typingctx, x):
            def codegen(context, builder, signature, args):
                return builder.bitcast(args[0], context.get_value_type(dst))
            return dst(src), codegen
        return cast

    _bits = _bitcast(types.float64, types.int64)  # the IEEE bits of a float64
    _from_bits = _bitcast(types.int64, types.float64)  # the float64 whose IEEE bits are an int64
    _bits32 = _bitcast(types.float32, types.int32)
    _from_bits32 = _bitcast(types.int32, types.float32)

    @njit(inline="always", cache=True, error_model="numpy")
    def _pow2(q):
        """2**q as a float64 for -1074 <= q <= 1023, from its bits."""
        if q >= -1022:
            return _from_bits(np.int64(q + 1023) << 52)
        return _from_bits(np.int64(1) << (q + 1074))

    @njit(inline="always", cache=True, error_model="numpy")
    def round_scalar(x, mbits, emin, fmax, tiny, specials, subnormals, mode, saturate):
        """One float64 value rounded to the format (float64 result); see the module docstring."""
        a = abs(x)
        if a != a:
            return x  # NaN stays NaN
        if a == np.inf:
            if specials == 0 and not saturate:
                r = np.inf
            elif specials == 1 and not saturate:
                return np.nan
            else:
                r = fmax
            return r if x > 0 else -r
        bits = _bits(a)
        E = bits >> 52
        if E == 0:
            sig = bits
            ex = -1074
            e = -1022
        else:
            sig = (bits & np.int64((1 << 52) - 1)) | np.int64(1 << 52)
            ex = E - 1075
            e = E - 1023
        if e < emin:
            e = emin
        q = e - mbits
        shift = q - ex
        if shift <= 0:
            r = a
        elif shift > 54:
            r = 0.0
        else:
            n = sig >> shift
            if mode == 0:
                rem = sig - (n << shift)
                half = np.int64(1) << (shift - 1)
                if rem > half or (rem == half and (n & 1) == 1):
                    n += 1
            r = np.float64(n) * _pow2(q)
        if not subnormals and r < tiny:
            r = 0.0
        if r > fmax:
            if saturate or mode == 1 or specials == 2:
                r = fmax
            elif specials == 0:
                r = np.inf
            else:
                return np.nan
        return -r if _bits(x) < 0 else r

    @njit(inline="always", cache=True, error_model="numpy")
    def rne(x, drop, magic, tiny, fmax, over, infv, nosub):
        """Nearest-even rounding of one float64 to the format of :func:`rne_args`, branch-free (vectorizes).

        Normal binades: add half an ulp minus one (plus the kept last bit, for ties to even) to the bits
        and clear the dropped ones (a carry moves into the exponent, as it should); below tiny:
        (a + magic) - magic, one IEEE addition whose ulp is the format's subnormal quantum."""
        a = abs(x)
        b = _bits(a)
        one = np.int64(1)
        rb = (b + ((one << (drop - 1)) - one) + ((b >> drop) & one)) & ~((one << drop) - one)
        r = _from_bits(rb)
        rs = (a + magic) - magic
        r = rs if a < tiny else r
        r = 0.0 if nosub and r < tiny else r
        r = over if r > fmax else r
        r = infv if a == np.inf else r
        r = -r if _bits(x) < 0 else r
        return x if a != a else r

    @njit(inline="always", cache=True, error_model="numpy")
    def rne32(x, drop, magic, tiny, fmax, over, infv, nosub):
        """:func:`rne` on a float32's own bits, all in float32 (:func:`rne32_args`): twice the values per
        vector instruction; the same bits as ``rne(float64(x))`` (tested on every float32)."""
        a = abs(x)
        b = _bits32(a)
        one = np.int32(1)
        rb = (b + ((one << (drop - one)) - one) + ((b >> drop) & one)) & ~((one << drop) - one)
        r = _from_bits32(rb)
        rs = (a + magic) - magic
        r = rs if a < tiny else r
        r = np.float32(0.0) if nosub and r < tiny else r
        r = over if r > fmax else r
        r = infv if a == np.float32(np.inf) else r
        r = -r if _bits32(x) < 0 else r
        return x if a != a else r

    @njit(cache=True, nogil=True, error_model="numpy")
    def _rne32_flat(src, dst, drop, magic, tiny, fmax, over, infv, nosub):
        for i in range(src.size):
            dst[i] = rne32(src[i], drop, magic, tiny, fmax, over, infv, nosub)

    @njit(cache=True, nogil=True, error_model="numpy")
    def _rne_flat(src, dst, drop, magic, tiny, fmax, over, infv, nosub):
        for i in range(src.size):
            dst[i] = rne(np.float64(src[i]), drop, magic, tiny, fmax, over, infv, nosub)

    @njit(cache=True, nogil=True, error_model="numpy")
    def _round_flat(src, dst, mbits, emin, fmax, tiny, specials, subnormals, mode, saturate):
        for i in range(src.size):
            dst[i] = round_scalar(np.float64(src[i]), mbits, emin, fmax, tiny, specials, subnormals, mode, saturate)


def round_array_(src: np.ndarray, dst: np.ndarray, fmt, mode: str = "nearest_even", saturate: bool = False) -> None:
    """dst[:] = round_to(src, fmt) for 1-D float32/float64 arrays (dst may be src: in place).

    ``fmt`` must fit the dtype of ``dst`` (every value representable) and ``mode`` be nearest_even or
    toward_zero; callers check (:func:`attnum.numerics.rounding.round_to` does)."""
    if mode == "nearest_even" and rne32_applies(fmt, src.dtype, dst.dtype):
        _rne32_flat(src, dst, *rne32_args(fmt, saturate))
    elif mode == "nearest_even" and fmt.mbits < 52:
        _rne_flat(src, dst, *rne_args(fmt, saturate))
    else:
        _round_flat(src, dst, *format_args(fmt, mode, saturate))
