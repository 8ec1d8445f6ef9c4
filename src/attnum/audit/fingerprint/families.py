"""The arithmetics the fingerprint's search replays: each family's candidates for an input dtype.

- **attnum's policies, tile matmuls** (:func:`policy_candidates`): the named policies in the input format
  (``fa2``, ``uniform``, ``torch-eager``, uniform ``fp32``, ``fa2`` with FA4's polynomial exp2) and each
  with one site (scores, exp, probs, row_sum, rescale, acc, out) moved to bf16, fp16 or fp32, or the
  normalisation switched; and FA2's with its accumulator kept in the input format and updated in fp32,
  rounded once per tile (``acc_update=once``).
- **the matrix unit** (:func:`mma_candidates`): FA2's policy with ``mma=ARCH`` for the architectures whose
  MMA adds ``group`` products at a time in this operand type, the accumulator chained through the
  instructions (``chain``) or each tile's product from zero, and its one-site variants. One architecture
  stands for each distinct arithmetic during the search (:func:`mma_classes`); which others reproduce as
  well is replayed at the end.
- **un-tiled attention** (:func:`untiled_candidates`): softmax over all the keys, then one P V matmul
  (:func:`attnum.attention.baseline.baseline_attention`): torch's eager attention and SDPA's math path in
  each format (``torch-eager``, ``uniform``, ``fp32`` with the input and output formats), one site moved;
  and torch's own ops (:class:`EagerOps`): eager attention in the input dtype
  (:func:`attnum.attention.eager.eager_attention`), whose 16-bit GEMMs are the CPU library's (oneDNN's bf16
  kernels on a CPU with AVX512-BF16 or AMX sum otherwise than an fp32 GEMM of the same values), as a tile
  matmul is the BLAS's; and SDPA's math path (:func:`attnum.attention.eager.sdpa_math_attention`, which
  scales Q and K by sqrt(scale) each, not the scores by scale).
- **the element-wise Triton decode arithmetic** (:func:`family_candidates`:
  :class:`attnum.kernels.triton.sum_decode.SumDecode`, with and without FP fusion).
- **Triton's flash forward** (:func:`dot_flash_candidates`: :class:`attnum.kernels.triton.dot_flash.DotFlash`,
  the fused-attention tutorial's exp2 arithmetic with ``tl.dot(p, v, acc)`` on an architecture's MMA).
"""

from __future__ import annotations

from dataclasses import dataclass

from attnum.errors import AttnumInputError
from attnum.kernels.triton.dot_flash import DotFlash
from attnum.kernels.triton.sum_decode import SumDecode
from attnum.numerics.formats import get_format
from attnum.numerics.mma.arch import ARCHS
from attnum.numerics.policy import Policy, parse_policy

OBSERVED_SITES = ("scores", "exp", "probs", "row_sum", "rescale", "acc", "out")
LOWERED = ("bf16", "fp16", "fp32")
MMA_KIND = {"bf16": "bf16", "fp16": "fp16", "fp32": "tf32"}  # the tensor-core operand type of each input dtype
MMA_PREFERRED = ("sm80", "sm90", "cdna3", "sm70", "sm75", "sm89", "sm100", "sm120")  # who stands for a class


@dataclass(frozen=True)
class Untiled:
    """Softmax over all S keys, then one P V matmul, under ``policy``'s sites (baseline_attention)."""

    policy: Policy

    def spec(self) -> str:
        return f"untiled:{policy_spec(self.policy)}"


@dataclass(frozen=True)
class EagerOps:
    """Un-tiled attention as torch's own CPU ops: ``path="eager"`` is ``softmax(Q K^T * scale) V`` in the
    input dtype (:func:`attnum.attention.eager.eager_attention`: Q K^T and P V torch's GEMMs in that
    dtype); ``path="sdpa-math"`` is SDPA's math path (:func:`attnum.attention.eager.sdpa_math_attention`:
    upcast to fp32, Q and K each times sqrt(scale), softmax, P V, cast back)."""

    inputs: str
    path: str = "eager"

    def spec(self) -> str:
        return f"torch-{self.path}-ops:{self.inputs}"

    def sites(self) -> dict[str, str]:
        wide = "fp32"
        mid = self.inputs if self.path == "eager" else wide
        return {"scores": mid, "exp": wide, "probs": mid, "row_sum": wide, "rescale": wide, "acc": wide,
                "out": self.inputs}

    def run(self, q, k, v):
        from attnum.attention.eager import eager_attention, sdpa_math_attention

        return eager_attention(q, k, v) if self.path == "eager" else sdpa_math_attention(q, k, v)


def _key(p: Policy) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in p.describe().items()))


def _variant(base: Policy, **change) -> Policy | None:
    """``base`` with ``change``, or None when the policy refuses it: an arithmetic no hardware runs (under
    ``mma=ARCH``, P and V in two 16-bit formats neither of which holds the other) is not a candidate."""
    try:
        return base.with_overrides(**change)
    except AttnumInputError:
        return None


def _with_variants(bases: list[Policy], sites=OBSERVED_SITES, *, allowed=None) -> list[Policy]:
    """``bases`` (first, in order), then each with one site moved to another of :data:`LOWERED` and with
    its normalisation switched (the variants the policy accepts: :func:`_variant`); deduplicated by arithmetic;
    ``allowed(policy)`` filters the variants."""
    out: dict[tuple, Policy] = {}
    for base in bases:
        out.setdefault(_key(base), base)
    for base in bases:
        for site in sites:
            for fmt in LOWERED:
                if getattr(base, site).name != get_format(fmt).name:
                    p = _variant(base, **{site: fmt})
                    if p is not None and (allowed is None or allowed(p)):
                        out.setdefault(_key(p), p)
        p = _variant(base, normalize="divide" if base.normalize == "reciprocal" else "reciprocal")
        if p is not None:
            out.setdefault(_key(p), p)
    return list(out.values())


def _base(spec: str, f: str) -> Policy:
    base = parse_policy(spec)
    if base.inputs.name != f:
        base = base.with_overrides(inputs=f)  # the inputs site is the target's own dtype
    return base


def policy_candidates(dtype: str) -> list[Policy]:
    """attnum's policies with tile matmuls (module doc), the named ones first."""
    f = get_format(dtype).name
    bases = [_base(s, f) for s in (f"fa2:{f}", f"uniform:{f}", f"torch-eager:{f}", "fp32", f"fa2:{f},exp2=poly3")]
    out = _with_variants(bases)
    once = bases[0].with_overrides(acc=f, acc_update="once")  # O kept in the input format, updated in fp32
    if _key(once) not in {_key(p) for p in out}:
        out.append(once)
    return out


def mma_classes(dtype: str) -> dict[int, list[list[str]]]:
    """{group size L: [[architectures with one arithmetic], ...]} for this dtype's operand type: the
    architectures whose instruction has the same L, F, adder, rounding and zero exponent are one class
    (the first of each class stands for it)."""
    kind = MMA_KIND[get_format(dtype).name]
    classes: dict[tuple, list[str]] = {}
    for name in MMA_PREFERRED:
        arch = ARCHS[name]
        if kind not in arch.instructions:
            continue
        ins = arch.instruction(kind)
        classes.setdefault((ins.L, ins.F, ins.adder, ins.e_zero32, ins.fp32_mbits), []).append(name)
    out: dict[int, list[list[str]]] = {}
    for (L, *_), names in classes.items():
        out.setdefault(L, []).append(names)
    return out


def mma_groups(dtype: str) -> tuple[int, ...]:
    """The MMA group sizes L this dtype's operands are added in on some architecture."""
    return tuple(sorted(mma_classes(dtype)))


def mma_candidates(dtype: str, group: int, chain: bool) -> list[Policy]:
    """FA2's policy on the MMA of each architecture class adding ``group`` products at a time, the
    accumulator chained (``chain``) or each tile from zero, and their one-site variants (a chained
    accumulator stays fp32: a narrower ``acc`` is a product from zero, another family)."""
    f = get_format(dtype).name
    bases = []
    for cls in mma_classes(dtype).get(group, []):
        p = _base(f"fa2:{f}", f).with_overrides(mma=cls[0])
        bases.append(p if chain else p.with_overrides(mma_chain=False))

    def allowed(p: Policy) -> bool:
        if p.probs.name not in ("bf16", "fp16", "fp32") or (chain and p.acc.name != "fp32"):
            return False
        return not (f != "fp32" and p.probs.name == "fp32")  # an fp32 P on a 16-bit MMA is TF32: not this dot

    out = _with_variants(bases, allowed=allowed)
    if not chain:
        out += [b.with_overrides(acc=f, acc_update="once") for b in bases]
    return out


def untiled_candidates(dtype: str) -> list:
    """Eager attention and SDPA's math path in ``dtype`` (module doc), one site moved; torch's own eager ops."""
    f = get_format(dtype).name
    bases = [_base(f"torch-eager:{f}", f), _base(f"uniform:{f}", f), _base("fp32", f).with_overrides(out=f)]
    sites = ("scores", "exp", "probs", "row_sum", "acc", "out")  # what baseline_attention rounds
    seen, out = set(), []
    for p in _with_variants(bases, sites):
        key = tuple(getattr(p, s).name for s in ("inputs", *sites)) + (str(p.matmul_acc),)
        if key not in seen:  # baseline ignores normalize and rescale: one candidate per arithmetic
            seen.add(key)
            out.append(Untiled(p))
    return [EagerOps(f), EagerOps(f, "sdpa-math"), *out]


def family_candidates(dtype: str) -> list[SumDecode]:
    """The element-wise Triton decode arithmetic in ``dtype``, with and without FP fusion."""
    f = get_format(dtype).name
    return [SumDecode(f, fused=True), SumDecode(f, fused=False)]


def dot_flash_candidates(dtype: str, group: int) -> list[DotFlash]:
    """Triton's flash forward (the tutorial's arithmetic) on the MMA classes adding ``group`` products at
    a time, with and without FP fusion; none for fp32 inputs (the tutorial's dots take 16-bit operands)."""
    f = get_format(dtype).name
    if f not in ("bf16", "fp16"):
        return []
    archs = [cls[0] for cls in mma_classes(dtype).get(group, []) if cls[0] in ("sm80", "sm90")]
    return [DotFlash(f, arch=a, fused=fz) for a in archs for fz in (True, False)]


def arch_of(policy) -> str | None:
    """The architecture a candidate's matmuls run on, or None (CPU matmuls, the Triton decode family)."""
    if isinstance(policy, DotFlash):
        return policy.arch
    return getattr(policy, "mma", None)


def with_arch(policy, arch: str):
    """``policy`` on another architecture (same family, same sites)."""
    if isinstance(policy, DotFlash):
        return DotFlash(policy.inputs, arch=arch, fused=policy.fused)
    return policy.with_overrides(mma=arch)


def policy_spec(p) -> str:
    """A policy string that parses back to ``p``'s arithmetic (the Triton families: their names;
    un-tiled: ``untiled:`` and the policy of its sites)."""
    if isinstance(p, (SumDecode, DotFlash, Untiled, EagerOps)):
        return p.spec()
    base = p.name.split(",")[0]
    ref = parse_policy(base) if base else None
    over = []
    for site in OBSERVED_SITES + ("inputs",):
        if ref is None or getattr(ref, site) != getattr(p, site):
            over.append(f"{site}={getattr(p, site).name}")
    for knob in ("normalize", "exp2"):
        if ref is None or getattr(ref, knob) != getattr(p, knob):
            over.append(f"{knob}={getattr(p, knob)}")
    if p.mma is not None and (ref is None or ref.mma != p.mma):
        over.append(f"mma={p.mma}")
    if p.mma is not None and not p.mma_chain:
        over.append("mma_chain=off")
    if p.acc_update != "each":
        over.append(f"acc_update={p.acc_update}")
    return ",".join([base or "fp32", *over])
