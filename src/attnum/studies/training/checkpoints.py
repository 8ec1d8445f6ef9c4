"""Checkpoint files: written as safetensors; read from safetensors or torch state dicts.

Torch files are loaded with ``weights_only=True`` only: a pickle that needs arbitrary code is refused,
never executed. Any failure to read a file becomes one ``AttnumInputError`` naming the file.

Reading is bounded in time and memory for any input. Unpickling is linear in the file's size; what
it builds is then walked with limits, counted as it is read: at most :data:`MAX_DEPTH` levels of
nested dicts, :data:`MAX_ENTRIES` dicts and tensors in all, no dict reached twice (a shared or cyclic
structure: a 2 KB pickle of dicts that share their children names 2**60 tensors), and tensor data of
at most :data:`DATA_FACTOR` times the file's size (a tensor viewing its storage with stride 0 claims
terabytes from a few bytes; tied weights, one tensor under two names, stay well within it).
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from attnum.errors import AttnumInputError

SAFETENSORS_SUFFIXES = (".safetensors",)
TORCH_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")
_STEP_RE = re.compile(r"(\d+)(?!.*\d)")
MAX_DEPTH = 32  # nested dicts in a torch checkpoint (a state dict is 1-3 deep)
MAX_ENTRIES = 1_000_000  # dicts and tensors in one file
DATA_FACTOR = 8  # tensor bytes per byte of file, at most
DATA_SLACK = 1 << 20  # bytes allowed on top (tiny files)


def checkpoint_name(step: int) -> str:
    return f"step_{step:06d}.safetensors"


def save_checkpoint(state: dict[str, torch.Tensor], path: Path) -> None:
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in state.items()}
    tmp = path.with_suffix(".tmp")
    save_file(tensors, str(tmp))
    tmp.replace(path)  # a reader never sees a half-written checkpoint


def _flatten(obj: object, out: dict[str, torch.Tensor], budget: int) -> None:
    """Name -> tensor below ``obj``, walked without recursion and with the module doc's limits
    (``budget``: tensor bytes allowed)."""
    seen: set[int] = set()
    todo: list[tuple[object, str, int]] = [(obj, "", 0)]
    entries = 0
    while todo:
        node, prefix, depth = todo.pop()
        entries += 1
        if entries > MAX_ENTRIES:
            raise ValueError(f"more than {MAX_ENTRIES} dicts and tensors")
        if isinstance(node, torch.Tensor):
            nbytes = node.numel() * node.element_size()
            if nbytes > node.untyped_storage().nbytes():
                raise ValueError(f"tensor {prefix[:60]!r} claims {nbytes} bytes from a storage of "
                                 f"{node.untyped_storage().nbytes()} (an overlapping or broadcast view)")
            budget -= nbytes
            if budget < 0:
                raise ValueError("its tensors claim more data than the file holds")
            out[prefix] = node
        elif isinstance(node, dict):
            if id(node) in seen:
                raise ValueError(f"{prefix[:60] or 'the top level'!r} is reached twice (a shared or cyclic "
                                 "structure)")
            seen.add(id(node))
            if depth >= MAX_DEPTH:
                raise ValueError(f"dicts nested deeper than {MAX_DEPTH} levels (at {prefix[:60]!r}...)")
            entries += len(node)
            if entries > MAX_ENTRIES:
                raise ValueError(f"more than {MAX_ENTRIES} dicts and tensors")
            todo.extend((v, f"{prefix}.{k}" if prefix else str(k), depth + 1)
                        for k, v in reversed(list(node.items())))


def _check_archive(path: Path) -> None:
    """A torch zip archive holds one record per storage: refuse more than MAX_ENTRIES before unpickling
    (torch.load takes time per record; a legacy non-zip file is bounded by its size alone)."""
    import zipfile

    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as zf:
            n = len(zf.infolist())
        if n > MAX_ENTRIES:
            raise ValueError(f"its archive holds {n} records, more than {MAX_ENTRIES}")


def load_state(path: Path) -> dict[str, torch.Tensor]:
    """Name -> tensor of one checkpoint file (nested dicts flattened with dots; DDP's ``module.`` kept)."""
    path = Path(path)
    try:
        if path.suffix in SAFETENSORS_SUFFIXES:
            from safetensors.torch import load_file

            return load_file(str(path), device="cpu")
        if path.suffix in TORCH_SUFFIXES:
            _check_archive(path)
            obj = torch.load(path, map_location="cpu", weights_only=True)
            for key in ("state_dict", "model", "module"):  # common wrappers around the weights
                if isinstance(obj, dict) and isinstance(obj.get(key), dict):
                    obj = obj[key]
            out: dict[str, torch.Tensor] = {}
            _flatten(obj, out, DATA_FACTOR * path.stat().st_size + DATA_SLACK)
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
