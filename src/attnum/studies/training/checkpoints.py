"""Checkpoint files: written as safetensors; read from safetensors or torch state dicts.

Torch files are loaded with ``weights_only=True`` only: a pickle that needs arbitrary code is refused,
never executed. Any failure to read a file becomes one ``AttnumInputError`` naming the file.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from attnum.errors import AttnumInputError

SAFETENSORS_SUFFIXES = (".safetensors",)
TORCH_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")
_STEP_RE = re.compile(r"(\d+)(?!.*\d)")


def checkpoint_name(step: int) -> str:
    return f"step_{step:06d}.safetensors"


def save_checkpoint(state: dict[str, torch.Tensor], path: Path) -> None:
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in state.items()}
    tmp = path.with_suffix(".tmp")
    save_file(tensors, str(tmp))
    tmp.replace(path)  # a reader never sees a half-written checkpoint


def _flatten(obj: object, prefix: str, out: dict[str, torch.Tensor]) -> None:
    if isinstance(obj, torch.Tensor):
        out[prefix] = obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)


def load_state(path: Path) -> dict[str, torch.Tensor]:
    """Name -> tensor of one checkpoint file (nested dicts flattened with dots; DDP's ``module.`` kept)."""
    path = Path(path)
    try:
        if path.suffix in SAFETENSORS_SUFFIXES:
            from safetensors.torch import load_file

            return load_file(str(path), device="cpu")
        if path.suffix in TORCH_SUFFIXES:
            obj = torch.load(path, map_location="cpu", weights_only=True)
            for key in ("state_dict", "model", "module"):  # common wrappers around the weights
                if isinstance(obj, dict) and isinstance(obj.get(key), dict):
                    obj = obj[key]
            out: dict[str, torch.Tensor] = {}
            _flatten(obj, "", out)
            if not out:
                raise ValueError("no tensors found")
            return out
    except Exception as err:  # every reader's failure, reported against the file
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise AttnumInputError(f"cannot read checkpoint {path}: {first}") from err
    raise AttnumInputError(
        f"checkpoint={str(path)!r} is not allowed; expected a file ending in "
        + ", ".join(SAFETENSORS_SUFFIXES + TORCH_SUFFIXES)
    )


def list_checkpoints(folder: Path) -> dict[str, Path]:
    """File name -> path of every checkpoint file in ``folder`` (or the file itself)."""
    folder = Path(folder)
    if not folder.exists():
        raise FileNotFoundError(f"checkpoint folder {folder} does not exist")
    if folder.is_file():
        return {folder.name: folder}
    files = sorted(p for p in folder.iterdir() if p.suffix in SAFETENSORS_SUFFIXES + TORCH_SUFFIXES)
    if not files:
        raise AttnumInputError(f"checkpoint folder {folder} holds no .safetensors/.pt/.pth/.bin/.ckpt files")
    return {p.name: p for p in files}


def step_of(name: str) -> int | None:
    m = _STEP_RE.search(Path(name).stem)
    return int(m.group(1)) if m else None
