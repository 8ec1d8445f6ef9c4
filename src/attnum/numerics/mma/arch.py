"""The matrix units of each GPU architecture, as data: which MMA instruction serves which operand type, and
the constants of its arithmetic (see :mod:`attnum.numerics.mma.dense` for what the constants mean).

Every number here is MMA-Sim's (Xie et al., arXiv 2511.10909; github.com/microsoft/MMA-Sim, PyPI ``mmasim``
2.1.1), whose models were checked bit for bit against the instructions on the GPUs; the FP8 rows of Ada and
Hopper (F = 13, an fp32 output truncated to e8m13) agree with Khattak & Mikaitis (arXiv 2512.07004).

- ``k``: the instruction's K (8 for TF32, 16 for fp16/bf16, 32 for FP8); a K that is not a multiple of it is
  padded with zeros, as a kernel pads its last tile.
- ``L``: products per group (one multi-term fused adder); an instruction of k > L is k / L groups, chained.
- ``F``: fraction bits kept below the group's largest exponent when the terms are aligned.
- ``e_zero32`` / ``e_zero16``: the exponent a zero term takes in the alignment (fp32 / fp16 output): a zero
  is not "absent", it pulls the alignment exponent up to this floor and truncates terms below it.
- ``fp32_mbits``: fraction bits of the fp32 output (23, or 13 for the "FP22" e8m13 output of FP8 on
  Ada/Hopper), rounded toward zero; the fp16 output is rounded to nearest even.
- ``adder``: ``"t"`` (NVIDIA: one truncating multi-term adder over the products and c); ``"tr"`` (CDNA3
  fp16/bf16/xf32: the products are summed first, truncated to F = 24, then aligned with the accumulator
  by rounding down, the sum rounded down to 31 fraction bits, then to nearest fp32); ``"gtr"`` (CDNA3
  FP8: as ``"tr"`` with the products summed in two interleaved halves (even and odd k), each aligned to
  the larger of the two rounding down, and an accumulator more than F + 1 binades below the sum dropped).

Block-scaled instructions (Blackwell's ``kind::mxf8f6f4``, ``mxf4``, ``mxf4nvf4``; :class:`BlockScaledInstruction`,
``Arch.block_scaled``; the arithmetic is :mod:`attnum.numerics.mma.scaled`'s) are MMA-Sim's ``MMA_ST_FDPA`` and
``MMA_GST_FDPA`` with its constants (``mmasim/nv_ptx/sim.py``: ``MMABlockScale`` for sm120's mma.sync,
``TCGen05MMABlockScale`` for sm100's tcgen05.mma; the same constants on both): ``adder`` ``"st"`` (every product
scaled, F = 25, e_zero = -133) or ``"gst"`` (sums of G = 16 products, each scaled, F = 35, e_zero = -139).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from attnum.errors import AttnumInputError

OPERAND_KINDS = ("tf32", "fp16", "bf16", "fp8", "fp8fnuz")
ADDERS = ("t", "tr", "gtr")
OUT_FORMATS = ("fp32", "fp16")


@dataclass(frozen=True, kw_only=True)
class Instruction:
    """One MMA instruction's arithmetic (the constants of the module docstring); ``name`` is its PTX/ISA name."""

    name: str
    k: int
    L: int
    F: int
    e_zero32: int
    e_zero16: int | None = None  # None: no fp16 output
    fp32_mbits: int = 23
    adder: str = "t"

    def __post_init__(self) -> None:
        if not (isinstance(self.k, int) and isinstance(self.L, int) and self.L >= 1 and self.k % self.L == 0):
            raise AttnumInputError(f"k={self.k!r}, L={self.L!r} is not allowed; expected k a positive multiple of L")
        if not isinstance(self.F, int) or not 1 <= self.F <= 30:
            raise AttnumInputError(f"F={self.F!r} is not allowed; expected an integer in 1..30")
        if self.adder not in ADDERS:
            raise AttnumInputError(f"adder={self.adder!r} is not allowed; expected one of {ADDERS}")
        if self.fp32_mbits not in (13, 23):
            raise AttnumInputError(f"fp32_mbits={self.fp32_mbits!r} is not allowed; expected 13 or 23")

    @property
    def outputs(self) -> tuple[str, ...]:
        return ("fp32", "fp16") if self.e_zero16 is not None else ("fp32",)


BLOCK_SCALED_KINDS = ("mxf8f6f4", "mxf4", "mxf4nvf4")  # PTX's .kind of the block_scale instructions
BLOCK_ADDERS = ("st", "gst")
ELEMENT_FORMATS = ("e4m3", "e5m2", "e3m2", "e2m3", "e2m1")  # PTX's names (attnum's: e4m3fn, e5m2, e3m2fn, ...)
SCALE_FORMATS = ("ue8m0", "ue4m3")


@dataclass(frozen=True, kw_only=True)
class BlockScaledInstruction:
    """One block-scaled MMA instruction's arithmetic (MMA-Sim's ST-FDPA / GST-FDPA).

    ``k``: the instruction's K (= ``L``, one fused group per instruction); ``G``: products summed (exactly)
    before the scale is applied (``adder="gst"``; None for ``"st"``, where each product is scaled); ``F``:
    fraction bits kept below the group's largest exponent; ``e_zero``: the exponent of a zero term;
    the output is fp32 rounded toward zero (``fp32_mbits`` = 23). ``elements``: the element formats A and
    B may take (PTX names); ``scales``: the (block, scale format) pairs it takes, the first the default."""

    name: str
    kind: str
    k: int
    L: int
    F: int
    e_zero: int
    adder: str
    elements: tuple[str, ...]
    scales: tuple[tuple[int, str], ...]
    G: int | None = None
    fp32_mbits: int = 23

    def __post_init__(self) -> None:
        if self.kind not in BLOCK_SCALED_KINDS:
            raise AttnumInputError(f"kind={self.kind!r} is not allowed; expected one of {BLOCK_SCALED_KINDS}")
        if self.adder not in BLOCK_ADDERS:
            raise AttnumInputError(f"adder={self.adder!r} is not allowed; expected one of {BLOCK_ADDERS}")
        if not (isinstance(self.k, int) and isinstance(self.L, int) and self.L >= 1 and self.k % self.L == 0):
            raise AttnumInputError(f"k={self.k!r}, L={self.L!r} is not allowed; expected k a positive multiple of L")
        if not isinstance(self.F, int) or not 1 <= self.F <= 40:
            raise AttnumInputError(f"F={self.F!r} is not allowed; expected an integer in 1..40")
        if set(self.elements) - set(ELEMENT_FORMATS) or not self.elements:
            raise AttnumInputError(f"elements={self.elements!r} is not allowed; expected names among {ELEMENT_FORMATS}")
        for block, sf in self.scales:
            if sf not in SCALE_FORMATS or self.k % block:
                raise AttnumInputError(f"scales={self.scales!r} is not allowed; expected (block, scale format) pairs "
                                       f"with a block dividing k={self.k} and a format among {SCALE_FORMATS}")
            if self.adder == "gst" and (self.G is None or block % self.G or self.L % self.G):
                raise AttnumInputError(f"G={self.G!r} is not allowed; expected a divisor of L={self.L} and of every block")

    @property
    def default_block(self) -> int:
        return self.scales[0][0]

    def scale_format_for(self, block: int) -> str:
        """The default scale format with ``block``: the first pair's of that block."""
        return next(sf for b, sf in self.scales if b == block)


def _mx(name: str, kind: str) -> BlockScaledInstruction:
    """MMA-Sim's constants (nv_ptx/sim.py): k = 32 (kind::mxf8f6f4) is ST-FDPA(F=25, L=32, e_zero=-133); k = 64
    (mxf4, mxf4nvf4) is GST-FDPA(G=16, F=35, L=64, e_zero=-139); both RZ-FP32. The (block, scale) pairs are
    its instruction lists (isa_mma.py, isa_tcgen05mma.py; block32 ue4m3 is not a valid mxf4nvf4 form)."""
    if kind == "mxf8f6f4":
        return BlockScaledInstruction(name=name, kind=kind, k=32, L=32, F=25, e_zero=-133, adder="st",
                                      elements=ELEMENT_FORMATS, scales=((32, "ue8m0"),))
    scales = ((32, "ue8m0"),) if kind == "mxf4" else ((16, "ue4m3"), (16, "ue8m0"), (32, "ue8m0"))
    return BlockScaledInstruction(name=name, kind=kind, k=64, L=64, G=16, F=35, e_zero=-139, adder="gst",
                                  elements=("e2m1",), scales=scales)


@dataclass(frozen=True, kw_only=True)
class Arch:
    """An architecture: its name, aliases and instruction per operand kind."""

    name: str
    aliases: tuple[str, ...]
    vendor_name: str  # MMA-Sim's name for it
    instructions: dict[str, Instruction] = field(default_factory=dict, hash=False)  # the name identifies it
    note: str = ""  # added to the error for an operand type it lacks
    block_scaled: dict[str, BlockScaledInstruction] = field(default_factory=dict, hash=False)  # by PTX kind

    def __post_init__(self) -> None:
        bad = set(self.instructions) - set(OPERAND_KINDS)
        if bad:
            raise AttnumInputError(f"instructions={sorted(bad)} is not allowed; expected kinds among {OPERAND_KINDS}")
        if any(kind != inst.kind for kind, inst in self.block_scaled.items()):
            raise AttnumInputError(f"block_scaled={sorted(self.block_scaled)} is not allowed; expected each "
                                   "instruction under its own kind")

    def block_scaled_instruction(self, kind: str) -> BlockScaledInstruction:
        """The block-scaled instruction of a PTX kind, or an input error naming what this architecture has."""
        if not self.block_scaled:
            with_them = [a.name for a in ARCHS.values() if a.block_scaled]
            raise AttnumInputError(f"arch={self.name!r} is not allowed for block-scaled products: {self.name} "
                                   f"({self.vendor_name}) has no block_scale instructions; expected one of {with_them} "
                                   "or an alias")
        if kind not in self.block_scaled:
            raise AttnumInputError(f"kind={kind!r} is not allowed on {self.name}; expected one of "
                                   f"{tuple(self.block_scaled)}")
        return self.block_scaled[kind]

    def instruction(self, kind: str) -> Instruction:
        """The instruction for an operand kind, or an input error naming what this architecture has."""
        if kind not in self.instructions:
            raise AttnumInputError(
                f"operand type {kind!r} on arch={self.name!r} is not allowed: {self.name} ({self.vendor_name}) has "
                f"matrix instructions for {', '.join(self.instructions)} only{self.note}")
        return self.instructions[kind]


def _nv(name: str, k: int, L: int, F: int, ez32: int, ez16: int | None, mbits: int = 23) -> Instruction:
    return Instruction(name=name, k=k, L=L, F=F, e_zero32=ez32, e_zero16=ez16, fp32_mbits=mbits)


# Volta: 8-byte groups (4 fp16 products), F = 23. Turing..Ada: 16-byte groups, F = 24. Hopper and both
# Blackwells: 32-byte groups, F = 25. The zero exponent sits F + 108 (fp32 output) / F - 4 (fp16) below 0.
_V = dict(F=23, ez32=-131, ez16=-19)
_T = dict(F=24, ez32=-132, ez16=-20)
_H = dict(F=25, ez32=-133, ez16=-21)

ARCHS: dict[str, Arch] = {a.name: a for a in (
    Arch(name="sm70", aliases=("volta",), vendor_name="Volta", instructions={
        "fp16": _nv("mma.sync.m8n8k4.f16", 4, 4, **_V)}),
    Arch(name="sm75", aliases=("turing",), vendor_name="Turing", instructions={
        "fp16": _nv("mma.sync.m16n8k8.f16", 8, 8, **_T)}),
    Arch(name="sm80", aliases=("ampere",), vendor_name="Ampere", instructions={
        "tf32": _nv("mma.sync.m16n8k8.tf32", 8, 4, _T["F"], _T["ez32"], None),
        "fp16": _nv("mma.sync.m16n8k16.f16", 16, 8, **_T),
        "bf16": _nv("mma.sync.m16n8k16.bf16", 16, 8, _T["F"], _T["ez32"], None)}),
    Arch(name="sm89", aliases=("ada",), vendor_name="Ada Lovelace", instructions={
        "tf32": _nv("mma.sync.m16n8k8.tf32", 8, 4, _T["F"], _T["ez32"], None),
        "fp16": _nv("mma.sync.m16n8k16.f16", 16, 8, **_T),
        "bf16": _nv("mma.sync.m16n8k16.bf16", 16, 8, _T["F"], _T["ez32"], None),
        "fp8": _nv("mma.sync.m16n8k32.f8", 32, 16, 13, _T["ez32"], _T["ez16"], mbits=13)}),
    Arch(name="sm90", aliases=("hopper",), vendor_name="Hopper", instructions={
        "tf32": _nv("wgmma.m64nNk8.tf32", 8, 8, _H["F"], _H["ez32"], None),
        "fp16": _nv("wgmma.m64nNk16.f16", 16, 16, **_H),
        "bf16": _nv("wgmma.m64nNk16.bf16", 16, 16, _H["F"], _H["ez32"], None),
        "fp8": _nv("wgmma.m64nNk32.f8", 32, 32, 13, _H["ez32"], _H["ez16"], mbits=13)}),
    Arch(name="sm100", aliases=("blackwell",), vendor_name="Blackwell", instructions={
        "tf32": _nv("tcgen05.mma.kind::tf32.k8", 8, 8, _H["F"], _H["ez32"], None),
        "fp16": _nv("tcgen05.mma.kind::f16.k16", 16, 16, **_H),
        "bf16": _nv("tcgen05.mma.kind::f16.k16.bf16", 16, 16, _H["F"], _H["ez32"], None),
        "fp8": _nv("tcgen05.mma.kind::f8f6f4.k32", 32, 32, **_H)},
        block_scaled={kind: _mx(f"tcgen05.mma.kind::{kind}.block_scale.k{32 if kind == 'mxf8f6f4' else 64}", kind)
                      for kind in BLOCK_SCALED_KINDS}),
    Arch(name="sm120", aliases=("rtx-blackwell",), vendor_name="RTX Blackwell", instructions={
        "tf32": _nv("mma.sync.m16n8k8.tf32", 8, 8, _H["F"], _H["ez32"], None),
        "fp16": _nv("mma.sync.m16n8k16.f16", 16, 16, **_H),
        "bf16": _nv("mma.sync.m16n8k16.bf16", 16, 16, _H["F"], _H["ez32"], None),
        "fp8": _nv("mma.sync.m16n8k32.f8", 32, 32, **_H)},
        block_scaled={kind: _mx(f"mma.sync.m16n8k{32 if kind == 'mxf8f6f4' else 64}.kind::{kind}.block_scale", kind)
                      for kind in BLOCK_SCALED_KINDS}),
    # CDNA3 (MI300): fp32 output only; float32 operands run as xf32 (v_mfma_f32_16x16x8_xf32, TF32-truncated);
    # its FP8 is the FNUZ encodings (torch.float8_e4m3fnuz / float8_e5m2fnuz, "fp8"/"bf8" in the ISA).
    Arch(name="cdna3", aliases=("mi300",), vendor_name="CDNA3", instructions={
        "tf32": Instruction(name="v_mfma_f32_16x16x8_xf32", k=8, L=4, F=24, e_zero32=-999, adder="tr"),
        "fp16": Instruction(name="v_mfma_f32_16x16x16_f16", k=16, L=8, F=24, e_zero32=-999, adder="tr"),
        "bf16": Instruction(name="v_mfma_f32_16x16x16_bf16", k=16, L=8, F=24, e_zero32=-999, adder="tr"),
        "fp8fnuz": Instruction(name="v_mfma_f32_16x16x32_fp8", k=32, L=16, F=24, e_zero32=-999, adder="gtr")},
        note=" (its FP8 takes torch.float8_e4m3fnuz / float8_e5m2fnuz)"),
)}
_BY_ALIAS = {alias: a for a in ARCHS.values() for alias in (a.name, *a.aliases)}


def arch_names() -> list[str]:
    """Every accepted name: the sm/cdna names and their aliases."""
    return sorted(_BY_ALIAS)


def get_arch(arch: str | Arch) -> Arch:
    """Resolve ``sm90`` / ``hopper`` (case-insensitive) to its :class:`Arch`; an input error otherwise."""
    if isinstance(arch, Arch):
        return arch
    found = _BY_ALIAS.get(str(arch).strip().lower()) if isinstance(arch, str) else None
    if found is None:
        raise AttnumInputError(f"arch={arch!r} is not allowed; expected one of {arch_names()}")
    return found
