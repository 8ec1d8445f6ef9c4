"""The paper's microbenchmark (Golden et al., arXiv 2405.02803, Figs. 3-6) as built-in sweep specs.

The paper states no N, d, SRAM size or seeds, so these are our choices,
written here once: d = 64, N(0, 1) inputs, tiles Br = Bc = 64 where the figure fixes them, and the
SRAM sweep M = 4d * Bc (elements) for Bc = 16 .. 512 (quick), so that Br = min(Bc, d) caps at d and
swapping the block dimensions changes Bc. Every figure runs under the ``uniform`` policy (the
paper's re-implementation) and the ``fa2`` policy (what real kernels do), for variants fa1 and fa2,
with several seeds.

Beyond the figures, three groups let the findings be maps rather than points:

- ``grid`` and ``grid-dist``: bf16 over N x Bc x policy x variant, reaching the many-tile regime
  (N >= 4096 with Bc <= 32) where the paper's 10x appears, for N(0, 1) inputs (``grid``) and for the
  other input distributions (``grid-dist``, to a smaller largest N: the quick profile's time);
- ``eager``: flash against PyTorch eager attention in bf16 (``baseline_policy = "torch-eager"``),
  a baseline with the same low precision as real code has;
- ``grid-mma``: a few of the grid's bf16 cells (the many-tile corner where the 10x appears, and N = 1024)
  with both matmuls of flash and baseline run as Ampere's and Hopper's tensor-core instructions
  (``mma`` = sm80, sm90), beside the same cells under the exact model (the report's "tensor cores" table);
- ``attribute``: the error budget per rounding site (``kind = "attribute"``) at the fig4 point and
  in the many-tile regime, which the findings cite as the dominant site.

``quick`` fits in 10 minutes on 2 CPU cores; ``full`` is the paper's scale (N to 32k, all formats,
more seeds), meant for a GPU node or a Ray cluster; ``smoke`` runs every group at toy sizes in
seconds (tests and CI).
"""

from __future__ import annotations

from typing import Any

from attnum.sweep.spec import SweepSpec, spec_from_dict

PROFILES = ("quick", "full", "smoke")  # the inference profiles are the serving family's
MMA_ARCHES = ("sm80", "sm90")  # the grid-mma group's tensor-core models (attnum.numerics.mma.dense)
_NAMED = ["bf16", "fp16", "fp32", "fp64"]


def _sram_for(bc: int, d: int) -> int:
    """M (elements) giving Bc = bc at head dim d under Algorithm 1's rule Bc = ceil(M / 4d)."""
    return 4 * d * bc


_PROFILES: dict[str, dict[str, Any]] = {
    "quick": {
        "head_dim": 64,
        "tile": 64,
        "heads": 1,
        "seeds": [0, 1, 2, 3, 4],
        "named": _NAMED,
        "n_fig4": 1024,
        "n_mantissa": 256,
        "e8": list(range(3, 24)),
        "e11": [3, 5, 7, 10, 14, 19, 23, 30, 40, 52],
        "n_fig5": [256, 512, 1024, 2048, 4096],
        "fmt_fig5": ["bf16", "fp16", "fp32"],
        "n_fig6": 1024,
        "bc_fig6": [16, 32, 64, 128, 256, 512],
        "fmt_fig6": _NAMED,
        "seeds_fig5": [0, 1, 2],
        "grid_n": [1024, 2048, 4096, 8192],
        "grid_bc": [16, 32, 64, 128],
        "grid_dist": ["normal", "uniform"],
        "grid_dist_n": [1024, 2048, 4096],
        "grid_seeds": [0, 1, 2],
        "eager_n": [1024, 4096],
        "eager_bc": [16, 64],
        "attribute": [(1024, 64), (4096, 16)],
        "mma_n": [1024, 4096],
        "mma_bc": [16],
        "mma_seeds": [0],
    },
    "full": {
        "head_dim": 64,
        "tile": 64,
        # One head: the float64 golden of one N = 32768 head already holds an 8.6 GB score matrix.
        "heads": 1,
        "seeds": [0, 1, 2, 3, 4],
        "named": ["bf16", "fp16", "tf32", "fp32", "fp64"],
        "extra_fig4": ["e5m2", "e4m3fn"],
        "n_fig4": 4096,
        "n_mantissa": 1024,
        "e8": list(range(3, 24)),
        "e11": list(range(3, 53)),
        "n_fig5": [256, 512, 1024, 2048, 4096, 8192, 16384, 32768],
        "fmt_fig5": ["bf16", "fp16", "tf32", "fp32", "fp64"],
        "n_fig6": 4096,
        "bc_fig6": [16, 32, 64, 128, 256, 512, 1024, 2048],
        "fmt_fig6": _NAMED,
        "grid_n": [1024, 2048, 4096, 8192, 16384, 32768],
        "grid_bc": [16, 32, 64, 128, 256],
        "grid_dist": ["normal", "uniform", "outlier"],
        "grid_dist_n": [1024, 2048, 4096, 8192, 16384, 32768],
        "grid_seeds": [0, 1, 2, 3, 4],
        "eager_n": [1024, 4096, 16384],
        "eager_bc": [16, 64, 128],
        "attribute": [(1024, 64), (8192, 16), (32768, 16)],
        "mma_n": [1024, 4096, 16384],
        "mma_bc": [16, 64],
        "mma_seeds": [0, 1, 2],
    },
    # Seconds, not minutes: the same groups, figures and findings at toy sizes, for tests and CI.
    "smoke": {
        "head_dim": 16,
        "tile": 16,
        "heads": 1,
        "seeds": [0, 1],
        "named": _NAMED,
        "n_fig4": 128,
        "n_mantissa": 64,
        "e8": [3, 7, 12, 23],
        "e11": [3, 10, 30, 52],
        "n_fig5": [64, 128, 256],
        "fmt_fig5": ["bf16"],
        "n_fig6": 128,
        "bc_fig6": [4, 16, 64],
        "fmt_fig6": ["bf16"],
        "grid_n": [64, 128, 256],
        "grid_bc": [4, 16],
        "grid_dist": ["normal", "uniform"],
        "grid_dist_n": [64, 128],
        "grid_seeds": [0, 1],
        "eager_n": [64, 256],
        "eager_bc": [4],
        "attribute": [(128, 4)],
        "mma_n": [128],
        "mma_bc": [4],
        "mma_seeds": [0],
    },
}


def paper_spec_dict(profile: str, device: str = "cpu") -> dict[str, Any]:
    """The spec (as TOML-shaped data) for ``profile``, every point on ``device`` (cpu or cuda)."""
    if profile not in _PROFILES:
        from attnum.errors import bad_value

        raise bad_value("--profile", profile, f"one of {PROFILES}")
    p = _PROFILES[profile]
    both = {"policy": ["uniform", "fa2"], "variant": ["fa1", "fa2"], "seed": p["seeds"]}
    fixed_tiles = {"block_q": p["tile"], "block_k": p["tile"]}
    srams = [_sram_for(bc, p["head_dim"]) for bc in p["bc_fig6"]]
    fig6 = {"format": p["fmt_fig6"], "seq_len": p["n_fig6"], "sram": srams, **both}
    grid = {"format": "bf16", "seq_len": p["grid_n"], "block_q": p["tile"], "block_k": p["grid_bc"],
            "dist": p["grid_dist"][0], **both, "seed": p["grid_seeds"]}
    grid_dist = {**grid, "dist": p["grid_dist"][1:], "seq_len": p["grid_dist_n"]}
    return {
        "name": f"paper-{profile}",
        "description": f"Golden et al. 2024 (arXiv 2405.02803) Figs. 3-6, profile {profile}",
        "record": ["flash_vs_golden", "baseline_vs_golden", "flash_vs_baseline", "kernels"],
        "defaults": {"head_dim": p["head_dim"], "heads": p["heads"], "batch": 1, "dist": "normal",
                     "device": device},
        "group": [
            {"name": "fig3", "axes": {"format": p["named"], "seq_len": p["n_fig4"], **fixed_tiles, **both}},
            {"name": "fig3-e8", "axes": {"format": [f"e8m{y}" for y in p["e8"]], "seq_len": p["n_mantissa"],
                                         **fixed_tiles, **both}},
            {"name": "fig3-e11", "axes": {"format": [f"e11m{y}" for y in p["e11"]], "seq_len": p["n_mantissa"],
                                          **fixed_tiles, **both}},
            {"name": "fig4", "axes": {"format": p["named"] + p.get("extra_fig4", []), "seq_len": p["n_fig4"],
                                      **fixed_tiles, **both}},
            {"name": "fig5", "axes": {"format": p["fmt_fig5"], "seq_len": p["n_fig5"], **fixed_tiles, **both,
                                      "seed": p.get("seeds_fig5", p["seeds"])}},
            {"name": "fig6a", "axes": {**fig6, "swap_blocks": [False, True]}},
            {"name": "fig6b", "axes": {**fig6, "square": [False, True]}},
            {"name": "fig6c", "axes": fig6},
            {"name": "grid", "axes": grid},
            {"name": "grid-dist", "axes": grid_dist},
            {"name": "eager", "axes": {**grid, "baseline_policy": "torch-eager", "variant": "fa2",
                                       "dist": "normal", "seq_len": p["eager_n"], "block_k": p["eager_bc"]}},
            {"name": "grid-mma", "axes": {**grid, "seq_len": p["mma_n"], "block_k": p["mma_bc"],
                                          "seed": p["mma_seeds"], "mma": list(MMA_ARCHES)}},
            {"name": "attribute", "points": [{"kind": "attribute", "format": "bf16", "policy": policy,
                                              "variant": "fa2", "seq_len": n, "block_q": p["tile"],
                                              "block_k": bc, "seed": 0}
                                             for n, bc in p["attribute"] for policy in ("uniform", "fa2")]},
        ],
    }


def paper_spec(profile: str, device: str = "cpu") -> SweepSpec:
    """The validated spec for ``profile`` (``quick``, ``full`` or ``smoke``) on ``device``."""
    return spec_from_dict(paper_spec_dict(profile, device),
                          source=f"attnum reproduce --profile {profile} --device {device}")
