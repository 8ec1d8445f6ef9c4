"""``attnum diverge --checkpoints A/ B/``: the divergence metrics on two folders of the user's checkpoints.

Files are paired by name (``step_000100.safetensors`` in both); two folders of one file each are
paired whatever their names. Unpaired files and mismatched tensors (names or shapes) are listed and
the rest compared. Torch files are read with ``weights_only=True`` only (``checkpoints.load_state``).
"""

from __future__ import annotations

from pathlib import Path

from attnum.errors import AttnumInputError
from attnum.studies.training.checkpoints import list_checkpoints, load_state, step_of
from attnum.studies.training.divergence import weight_divergence


def pair_files(a_dir: Path, b_dir: Path) -> tuple[list[tuple[str, Path, Path]], list[str]]:
    """([(label, file in A, file in B)] ordered by step then name, [unpaired descriptions])."""
    a, b = list_checkpoints(a_dir), list_checkpoints(b_dir)
    common = sorted(set(a) & set(b), key=lambda n: (step_of(n) is None, step_of(n) or 0, n))
    if not common and len(a) == 1 and len(b) == 1:
        (na, pa), (nb, pb) = next(iter(a.items())), next(iter(b.items()))
        return [(f"{na} vs {nb}", pa, pb)], []
    if not common:
        raise AttnumInputError(
            f"checkpoints={str(a_dir)!r}, {str(b_dir)!r}: no file names in common "
            f"(A has {sorted(a)[:5]}, B has {sorted(b)[:5]})"
        )
    unpaired = [f"{n} only in A" for n in sorted(set(a) - set(b))] + [f"{n} only in B" for n in sorted(set(b) - set(a))]
    return [(n, a[n], b[n]) for n in common], unpaired


def compare_folders(a_dir: Path, b_dir: Path) -> dict:
    """{"pairs": [{"name", "step", "max_abs", "w1", "w1_mean", "numel", "mismatches", "per_tensor"}],
    "unpaired_files": [...]}."""
    pairs, unpaired = pair_files(Path(a_dir), Path(b_dir))
    rows = []
    for label, pa, pb in pairs:
        div = weight_divergence(load_state(pa), load_state(pb))
        rows.append({"name": label, "step": step_of(pa.name), **div.as_dict()})
    return {"a": str(a_dir), "b": str(b_dir), "pairs": rows, "unpaired_files": unpaired}
