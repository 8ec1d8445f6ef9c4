"""One comparison point: flash and baseline under a policy against the float64 golden value.

All three see the same inputs: float64 samples rounded once to the policy's input format, so the
deviations measure the arithmetic, not the input quantization.

:class:`CompareConfig` is the one description of a point: its fields are the ``attnum compare``
flags and the sweep axes (a sweep's :class:`attnum.studies.paper.point.Point` is a CompareConfig
plus what to run at it), and :data:`FIELDS` holds the one validator of each field.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import torch

from attnum.attention import baseline_attention, flash_attention, golden_attention
from attnum.attention.flash import VARIANTS, kv_tile_order
from attnum.attention.masks import ALIGNMENTS
from attnum.attention.tiles import resolve_tiles
from attnum.errors import AttnumInputError, bad_value
from attnum.numerics.formats import get_format
from attnum.numerics.metrics import deviation, error_ratio
from attnum.numerics.mma.sites import check_arch
from attnum.numerics.policy import parse_policy
from attnum.numerics.rounding import round_to
from attnum.sweep import memo
from attnum.sweep.axes import COMMON, DEVICES, POLICY_NAMES, allowed_for  # noqa: F401 - compare's names for them too
from attnum.sweep.axes import is_bool as _bool
from attnum.sweep.axes import opt_positive_int as _opt_positive_int
from attnum.sweep.axes import parses as _parses
from attnum.workloads.inputs import DISTS, InputSpec, make_qkv

KV_ORDERS = ("forward", "reverse", "random", "random:SEED")


@dataclass(frozen=True, kw_only=True)
class CompareConfig:
    """Every knob of one point; field names are the ``attnum compare`` flags and the sweep axes.

    ``None`` means the core's default: ``kv_len`` = ``seq_len``, ``kv_heads`` = ``heads``, tiles 128.
    ``causal_alignment`` places the causal diagonal: ``top_left`` (query i sees keys j <= i, as
    torch) or ``bottom_right`` (j <= i + S - N, as flash-attn >= 2.1); it matters only when
    ``causal`` and ``kv_len`` != ``seq_len``. ``baseline_policy`` (None: ``policy``) is the
    baseline's own policy, e.g. ``torch-eager`` to compare flash with PyTorch eager attention in
    the same dtype; it must round the inputs as ``policy`` does (both see the same inputs). ``mma``
    (None: the policies' own) runs both policies' matmuls as that architecture's tensor-core
    instructions (the policy knob ``mma=ARCH``; ``none`` turns a policy's own off): the sweep axis that
    compares exact, sm80 and sm90 accumulation.
    """

    policy: str = "uniform"
    format: str = "bf16"
    baseline_policy: str | None = None
    mma: str | None = None
    seq_len: int = 1024
    kv_len: int | None = None
    head_dim: int = 64
    heads: int = 8
    kv_heads: int | None = None
    batch: int = 1
    block_q: int | None = None
    block_k: int | None = None
    sram: int | None = None
    swap_blocks: bool = False
    square: bool = False
    variant: str = "fa2"
    kv_order: str = "forward"
    causal: bool = False
    causal_alignment: str = "top_left"
    dist: str = "normal"
    logit_scale: float = 1.0
    seed: int = 0
    device: str = "cpu"

    def __post_init__(self) -> None:
        for f in fields(CompareConfig):
            check_field(f.name, getattr(self, f.name))
        # Equal configs compare (and hash) equal: one spelling per format, logit_scale a float.
        object.__setattr__(self, "format", get_format(self.format).name)
        object.__setattr__(self, "logit_scale", float(self.logit_scale))
        # What no single field decides: the policy at this format, kv_heads | heads, sram vs blocks.
        policy, base = self.policies()
        if base.inputs != policy.inputs:
            raise AttnumInputError(
                f"baseline_policy={self.baseline_policy!r} is not allowed with policy={self.policy!r}: it rounds "
                f"the inputs to {base.inputs.name}, the policy to {policy.inputs.name}; expected the same "
                "inputs format (flash, baseline and golden see the same inputs)")
        spec = self.input_spec()
        kv_tile_order(self.tiles().Tc(spec.S), self.kv_order)

    def policies(self):
        """(flash policy, baseline policy) at this config's format."""
        policy = parse_policy(self.policy, self.format)
        base = policy if self.baseline_policy is None else parse_policy(self.baseline_policy, self.format)
        if self.mma is not None:
            arch = check_arch(self.mma)
            policy, base = policy.with_overrides(mma=arch), base.with_overrides(mma=arch)
        return policy, base

    def input_spec(self) -> InputSpec:
        return InputSpec(batch=self.batch, heads=self.heads, kv_heads=self.kv_heads, seq_len=self.seq_len,
                         kv_len=self.kv_len, head_dim=self.head_dim, dist=self.dist,
                         logit_scale=self.logit_scale, seed=self.seed)

    def tiles(self):
        return resolve_tiles(self.head_dim, block_q=self.block_q, block_k=self.block_k, sram=self.sram,
                             swap_blocks=self.swap_blocks, square=self.square)

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(CompareConfig)}


# field -> (what is allowed, check): the one validator of each field, for the CLI and the sweeps.
FIELDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "policy": COMMON["policy"],
    "format": COMMON["format"],
    "baseline_policy": ("unset (the policy), or a policy as for policy (e.g. torch-eager)",
                        lambda v: v is None or _parses(lambda x: parse_policy(x, "fp32"))(v)),
    "mma": COMMON["mma"],
    "seq_len": COMMON["seq_len"],
    "kv_len": ("a positive integer (S; default seq_len)", _opt_positive_int),
    "head_dim": COMMON["head_dim"],
    "heads": COMMON["heads"],
    "kv_heads": COMMON["kv_heads"],
    "batch": COMMON["batch"],
    "block_q": ("a positive integer (Br)", _opt_positive_int),
    "block_k": COMMON["block_k"],
    "sram": ("a positive integer (M, the SRAM size in elements that sets Br and Bc)", _opt_positive_int),
    "swap_blocks": ("true or false", _bool),
    "square": ("true or false", _bool),
    "variant": (f"one of {VARIANTS}", lambda v: v in VARIANTS),
    "kv_order": (f"one of {KV_ORDERS}", _parses(lambda v: kv_tile_order(1, v))),
    "causal": COMMON["causal"],
    "causal_alignment": (f"one of {ALIGNMENTS}", lambda v: v in ALIGNMENTS),
    "dist": (f"one of {DISTS}", lambda v: v in DISTS),
    "logit_scale": ("a positive finite number (multiplies Q)",
                    lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < float("inf")),
    "seed": COMMON["seed"],
    "device": COMMON["device"],
}


def check_field(name: str, value: Any) -> None:
    """Raise :class:`AttnumInputError` (``name=value is not allowed; expected ...``) unless allowed."""
    allowed, ok = FIELDS[name]
    if not ok(value):
        raise bad_value(name, value, allowed_for(allowed, ok, value))


def compare_inputs(cfg: CompareConfig):
    """The shared inputs of a point: float64 samples rounded to the policy's input format."""
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise AttnumInputError("device='cuda' is not allowed here; CUDA is not available on this machine")
    policy = cfg.policies()[0]  # the flash policy, with the mma axis applied
    q, k, v = make_qkv(cfg.input_spec(), device=cfg.device)
    return policy, tuple(round_to(x, policy.inputs) for x in (q, k, v))


def require_finite_golden(golden: torch.Tensor, cfg: CompareConfig, what: str = "golden value") -> None:
    """A NaN or inf in the float64 golden value is not a measurement: refuse, naming the input to blame.

    The samples are N(0, 1)-like, so only ``logit_scale`` (which multiplies Q) can push the float64
    scores past 1.8e308; the message says so (and the rest of the configuration when it is not that).
    """
    if bool(torch.isfinite(golden).all()):
        return
    bad = int((~torch.isfinite(golden)).sum())
    raise AttnumInputError(
        f"logit_scale={cfg.logit_scale!r} makes the float64 {what} non-finite ({bad} of {golden.numel()} values "
        f"NaN or inf: q * logit_scale or q . k overflows float64 with dist={cfg.dist!r}, d={cfg.head_dim}); "
        "expected a logit_scale that keeps |q . k| * logit_scale below 1.8e308 (e.g. <= 1e300)")


def check_point(cfg: CompareConfig) -> None:
    """What can be refused before the point runs: more memory than this machine has (an estimate), and
    inputs that are already not finite (``logit_scale`` so large that q itself overflows float64), which
    would make the golden value non-finite. Cheap next to the point (its inputs are O(N d)): the CLI calls
    it before its progress starts, so the mistake is the command's only line."""
    from attnum.sweep.memory_budget import require_compare

    require_compare(cfg)
    _, inputs = compare_inputs(cfg)
    for x in inputs:
        if not bool(torch.isfinite(x).all()):
            require_finite_golden(x, cfg, what="input q (before the golden value)")


def run_compare(cfg: CompareConfig) -> dict:
    """Run one point -> {"config", "policy", "baseline_policy", "tiles", "metrics": {pair: {...}},
    "ratio", "timing_s"}. Refuses (one line) a point larger than this machine's memory, before
    allocating, and a point whose golden value is not finite."""
    from attnum.sweep.memory_budget import require_compare

    require_compare(cfg)
    return _run_compare(cfg)


def _run_compare(cfg: CompareConfig) -> dict:


    policy, (q, k, v) = compare_inputs(cfg)
    base_policy = cfg.policies()[1]
    tiles = cfg.tiles()
    common = dict(is_causal=cfg.causal, causal_alignment=cfg.causal_alignment)
    timing = {}
    t0 = time.perf_counter()
    mask = tuple(sorted(common.items()))  # every argument beside q, k, v (and the baseline's policy)
    scores = q.shape[-2] * k.shape[-2] * q.shape[0] * q.shape[1]
    # Equal inputs, same bits: points that differ only in tiles, variant or flash policy share these
    # (attnum.sweep.memo; timing_s then shows the time to fetch them).
    golden = memo.reuse("golden", (q, k, v), mask, lambda: golden_attention(q, k, v, **common), scores)
    timing["golden"] = time.perf_counter() - t0
    require_finite_golden(golden, cfg)
    t0 = time.perf_counter()
    base = memo.reuse("baseline", (q, k, v), (mask, base_policy),
                      lambda: baseline_attention(q, k, v, policy=base_policy, **common), scores)
    timing["baseline"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    flash = flash_attention(q, k, v, policy=policy, block_q=tiles.Br, block_k=tiles.Bc, variant=cfg.variant,
                            kv_order=cfg.kv_order, **common)
    timing["flash"] = time.perf_counter() - t0
    out_fmt = policy.out
    metrics = {
        "flash_vs_golden": deviation(flash, golden, fmt=out_fmt),
        "baseline_vs_golden": deviation(base, golden, fmt=base_policy.out),
        "flash_vs_baseline": deviation(flash, base, fmt=out_fmt),
    }
    ratio = {key: error_ratio(metrics["flash_vs_golden"], metrics["baseline_vs_golden"], key)
             for key in ("max_abs", "mean_abs", "rmse")}
    return {
        "config": cfg.to_dict(),
        "policy": {"name": policy.name, **policy.describe()},
        "baseline_policy": {"name": base_policy.name, **base_policy.describe()},
        "tiles": {"Br": tiles.Br, "Bc": tiles.Bc, "Tc": tiles.Tc(cfg.input_spec().S), "area": tiles.area},
        "metrics": metrics,
        "ratio": ratio,
        "timing_s": timing,
    }
