"""Low-bit attention schemes as data: SageAttention's quantized Q K^T and P V, as one frozen config.

A :class:`LowBit` rides on a :class:`attnum.numerics.policy.Policy` (``policy.lowbit``); flash and baseline
attention then run :func:`attnum.attention.lowbit.sage.sage_attention` (tiled, the kernel's online softmax)
and :func:`attnum.attention.lowbit.sage.sage_reference` (materialized, exact P V) instead of their own paths.

Knobs (SageAttention, arXiv 2410.02367, 2411.10958, 2505.11594; thu-ml/SageAttention):

- ``qk``: the Q, K format: ``int8``, ``int4`` (symmetric, amax/127 or amax/7, round half away from
  zero as the kernels' ``x += 0.5 * sign(x); x.to(int8)``), ``e4m3fn``, ``e5m2`` (scale amax / max),
  or ``nvfp4`` / ``mxfp4`` / ``mxfp8-e4m3`` ... (blocks along d, :mod:`attnum.numerics.mx`).
- ``granularity`` of the integer/FP8 scales (``sageattention/triton/quant_per_block.py``,
  ``quant_per_thread.py``): ``tensor`` (one scale); ``block`` (Q blocks of ``block_q`` = 128 tokens,
  K blocks of ``block_k`` = 64); ``warp`` (Q blocks of ``warp_q`` = 32 tokens, K per block);
  ``thread`` (Q: in each ``warp_q`` segment the tokens with equal i mod 8; K: in each ``block_k``
  block the tokens with equal (j mod 8) // 2, the rows one MMA thread holds); ``token``.
- ``smooth_k``: subtract K's per-channel mean over tokens (no correction needed: q . mean_k is
  constant along a softmax row). ``smooth_q``: subtract each Q block's mean and add
  mean_q . K^T back to the scores in fp32 (SageAttention2).
- ``pv``: P and V for the P V product: ``fp16`` (P rounded to fp16, V fp16: SageAttention1's
  Triton kernel), ``bf16``, ``e4m3fn`` / ``e5m2`` (P times a static 448 / 57344, V per-channel
  scales: SageAttention2), ``int8`` (P times 127, V per channel), ``nvfp4`` (SageAttention3: each P
  row first scaled so its max maps to 448 * 6, then NVFP4 along keys; V NVFP4 along tokens).
- ``pv_acc``: the P V MMA's accumulator format, accumulated ``mma_k`` products at a time (16 for
  16-bit inputs, 32 for 8-bit, 64 for 4-bit): ``fp16`` (``tl.dot(p, v, out_dtype=fp16)``),
  ``fp22`` (e8m13, SageAttention2's measurement of FP8 MMA on Ada/Hopper), ``fp32``; or a GPU
  architecture (:data:`ACC_ARCHES`, e.g. ``sm90``): the P V product as that architecture's tensor-core
  instructions (:func:`attnum.numerics.mma.dense.matmul`: Hopper's FP8 wgmma aligns and truncates to 13
  fraction bits and truncates its output to e8m13, the "FP22" SageAttention2 measured), into fp32.
  ``two_level``: the MMA accumulator restarts at every KV tile and each tile's result is added
  to an fp32 buffer (SageAttention2's fix); else the narrow accumulator carries the whole sum.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnum.errors import bad_value
from attnum.numerics.formats import FloatFormat, get_format

QK_FORMATS = ("int8", "int4", "e4m3fn", "e5m2", "nvfp4", "mxfp4", "mxfp6-e2m3", "mxfp6-e3m2", "mxfp8-e4m3",
              "mxfp8-e5m2")
GRANULARITIES = ("tensor", "block", "warp", "thread", "token")
PV_FORMATS = ("fp16", "bf16", "e4m3fn", "e5m2", "int8", "nvfp4")
ACC_FORMATS = {"fp16": "fp16", "fp22": "e8m13", "fp32": "fp32"}
ACC_ARCHES = ("sm89", "sm90", "sm100", "sm120")  # P V as the architecture's MMA (fp8 and 16-bit P, V)
INT_MAX = {"int8": 127, "int4": 7}
FP22 = FloatFormat(ebits=8, mbits=13, name="fp22")


def _pos_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise bad_value(name, value, "a positive integer")


@dataclass(frozen=True, kw_only=True)
class LowBit:
    """One low-bit attention scheme (see the module docstring); validates itself."""

    qk: str = "int8"
    granularity: str = "block"
    block_q: int = 128
    block_k: int = 64
    warp_q: int = 32
    smooth_k: bool = True
    smooth_q: bool = False
    pv: str = "fp16"
    pv_acc: str = "fp16"
    two_level: bool = True
    name: str = ""

    def __post_init__(self) -> None:
        if self.qk not in QK_FORMATS:
            raise bad_value("qk", self.qk, f"one of {QK_FORMATS}")
        if self.granularity not in GRANULARITIES:
            raise bad_value("granularity", self.granularity, f"one of {GRANULARITIES}")
        for name in ("block_q", "block_k", "warp_q"):
            _pos_int(name, getattr(self, name))
        if self.granularity == "thread":
            if self.warp_q % 8:
                raise bad_value("warp_q", self.warp_q, "a multiple of 8 for per-thread scales (8 row groups per warp)")
            if self.block_k % 8:
                raise bad_value("block_k", self.block_k, "a multiple of 8 for per-thread scales (4 groups of 2 of 8)")
        if self.granularity in ("warp", "thread") and self.block_q % self.warp_q:
            raise bad_value("warp_q", self.warp_q, f"a divisor of block_q={self.block_q} (warps split a Q block)")
        if self.pv not in PV_FORMATS:
            raise bad_value("pv", self.pv, f"one of {PV_FORMATS}")
        if self.pv_acc not in ACC_FORMATS:
            from attnum.numerics.mma.sites import ALIASES

            arch = ALIASES.get(self.pv_acc, self.pv_acc) if isinstance(self.pv_acc, str) else self.pv_acc
            if arch not in ACC_ARCHES:
                raise bad_value("pv_acc", self.pv_acc, f"one of {tuple(ACC_FORMATS)} or an architecture {ACC_ARCHES}")
            if self.pv in ("int8", "nvfp4"):
                raise bad_value("pv_acc", self.pv_acc, f"one of {tuple(ACC_FORMATS)} with pv={self.pv!r} (the tensor-"
                                "core model takes fp16, bf16 and fp8 P and V)")
            object.__setattr__(self, "pv_acc", arch)
        if self.pv == "nvfp4" and self.two_level is False:
            raise bad_value("two_level", False, "True with pv='nvfp4' (each tile's P has its own row factors)")
        for name in ("smooth_k", "smooth_q", "two_level"):
            if not isinstance(getattr(self, name), bool):
                raise bad_value(name, getattr(self, name), "True or False")
        if not self.name:
            object.__setattr__(self, "name", self.describe_short())

    @property
    def qk_is_int(self) -> bool:
        return self.qk in INT_MAX

    @property
    def qk_is_block(self) -> bool:
        return self.qk not in INT_MAX and self.qk not in ("e4m3fn", "e5m2")

    @property
    def acc_format(self) -> FloatFormat:
        if self.pv_acc in ACC_ARCHES:
            return get_format("fp32")  # the MMA's output
        return FP22 if self.pv_acc == "fp22" else get_format(ACC_FORMATS[self.pv_acc])

    @property
    def mma_k(self) -> int:
        """Products per MMA instruction along the key dimension (m16n8k16 / k32 / k64)."""
        return {"fp16": 16, "bf16": 16, "e4m3fn": 32, "e5m2": 32, "int8": 32, "nvfp4": 64}[self.pv]

    def describe_short(self) -> str:
        sm = "+".join(s for s, on in (("q", self.smooth_q), ("k", self.smooth_k)) if on) or "none"
        gran = "" if self.qk_is_block else f"/{self.granularity}"
        lvl = "2lvl" if self.two_level else "1lvl"
        return f"qk={self.qk}{gran},smooth={sm},pv={self.pv},acc={self.pv_acc}/{lvl}"

    def describe(self) -> dict:
        return {"qk": self.qk, "granularity": self.granularity, "block_q": self.block_q, "block_k": self.block_k,
                "warp_q": self.warp_q, "smooth_k": self.smooth_k, "smooth_q": self.smooth_q, "pv": self.pv,
                "pv_acc": self.pv_acc, "two_level": self.two_level}


# The published configurations.
SAGE = {
    # SageAttention1's Triton kernel (sageattn_qk_int8_pv_fp16_triton): INT8 per-block Q (128) and
    # K (64), smooth K, P and V in fp16 with an fp16 MMA accumulator, tiles added into fp32.
    "sage1": LowBit(qk="int8", granularity="block", smooth_k=True, pv="fp16", pv_acc="fp16", two_level=True),
    # SageAttention2 (sageattn_qk_int8_pv_fp8_cuda): INT8 per-thread (warp 32) Q and K, smooth K,
    # P and V in e4m3 (V per channel) in an FP8 MMA whose accumulator holds ~22 bits, two-level.
    "sage2": LowBit(qk="int8", granularity="thread", smooth_k=True, pv="e4m3fn", pv_acc="fp22", two_level=True),
    # SageAttention2's 4-bit variant (paper Tables 4, 6, 7): INT4 per-thread, smooth Q and K, e4m3 P V.
    "sage2-4b": LowBit(qk="int4", granularity="thread", smooth_k=True, smooth_q=True, pv="e4m3fn", pv_acc="fp22",
                       two_level=True),
    # SageAttention3 (Blackwell): NVFP4 Q, K (blocks of 16 along d), P (two-level scaled) and V; the
    # FP4 MMA accumulates in fp32.
    "sage3": LowBit(qk="nvfp4", granularity="block", smooth_k=True, smooth_q=True, pv="nvfp4", pv_acc="fp32",
                    two_level=True),
}


def parse_lowbit_override(lb: LowBit, key: str, value: str) -> LowBit:
    """One ``key=value`` of a policy spec (``sage1:fp16,granularity=thread,smooth_q=1``)."""
    import dataclasses

    fields = set(lb.describe())
    if key not in fields:
        raise bad_value("lowbit override", key, f"one of {sorted(fields)}")
    if key in ("smooth_k", "smooth_q", "two_level"):
        v = value.strip().lower()
        if v not in ("0", "1", "true", "false", "on", "off"):
            raise bad_value(key, value, "true or false")
        out = v in ("1", "true", "on")
    elif key in ("block_q", "block_k", "warp_q"):
        try:
            out = int(value)
        except ValueError:
            raise bad_value(key, value, "a positive integer") from None
    else:
        out = value.strip().lower()
    return dataclasses.replace(lb, **{key: out}, name="")
