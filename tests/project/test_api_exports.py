"""The top-level API: what ``import attnum`` offers, checked against exact values."""

from __future__ import annotations

import _paths

import attnum


def test_wasserstein_distance_and_metrics_are_top_level():
    assert {"wasserstein_distance", "metrics", "AttnumInputError"} <= set(attnum.__all__)
    assert attnum.wasserstein_distance is attnum.metrics.wasserstein_distance
    # By hand: {0, 1} -> {1, 2} moves all the mass by 1; on {0, 4}, weights (3/4, 1/4) -> (0, 1) move
    # 3/4 of it by 4.
    assert attnum.wasserstein_distance([0.0, 1.0], [1.0, 2.0]) == 1.0
    assert attnum.wasserstein_distance([0.0, 4.0], [0.0, 4.0], [3.0, 1.0], [0.0, 1.0]) == 3.0


def test_every_name_in_all_exists():
    for name in attnum.__all__:
        assert hasattr(attnum, name), name


def test_shadow_export_survives_the_submodule_import():
    """The root exports shadow lazily; importing the submodule (as integrations do) must not turn
    ``attnum.shadow(...)`` into "module object is not callable"."""
    import subprocess
    import sys

    code = ("import attnum, attnum.integrations.shadow, torch\n"
            "q = torch.randn(1, 1, 4, 8)\n"
            "with attnum.shadow(candidate='flash:uniform:bf16', reference='golden') as rec:\n"
            "    torch.nn.functional.scaled_dot_product_attention(q, q, q)\n"
            "from attnum import shadow\n"
            "from attnum.integrations.shadow import shadow as fn\n"
            "assert callable(shadow) and callable(fn)\n"
            "print(len(rec.records))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=_paths.HANG_S)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1"
