"""What stands in for the parts of a third-party package attnum does not load: its package ``__init__``
(which imports CUDA extensions and every op), a platform probe, a logger. Each stand-in replaces one name the
kernel file imports, and says what and why (see kernels/wheels/source.py's docstring and docs/audit.md)."""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
import types
from enum import IntEnum
from pathlib import Path


def importable(name: str) -> bool:
    """Whether ``name`` is really installed: a stand-in of ours in ``sys.modules`` is not (find_spec would
    raise ValueError on its missing ``__spec__``, or, given one, call it installed)."""
    top = sys.modules.get(name.split(".")[0])
    if top is not None and getattr(top, "__attnum_stand_in__", False):
        return False
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _module(name: str, **attrs) -> types.ModuleType:
    mod = sys.modules.get(name)
    if mod is None:
        mod = types.ModuleType(name)
        mod.__attnum_stand_in__ = True
        mod.__path__ = []  # a package, so that submodules can be registered beneath it
        sys.modules[name] = mod
    for k, v in attrs.items():
        setattr(mod, k, v)
    parent, _, leaf = name.rpartition(".")
    if parent:
        setattr(_module(parent), leaf, mod)
    return mod


def _logger(name):
    log = logging.getLogger(name)
    for method in ("debug_once", "info_once", "warning_once"):
        setattr(log, method, getattr(log, method.split("_")[0]))
    return log


def _stand_ins(package: str, root: Path) -> None:
    """The stand-ins ``package``'s kernel files need; ``root``: where its files were extracted."""
    import torch
    import triton
    import triton.language as tl

    if package == "vllm":
        _module("vllm.triton_utils", triton=triton, tl=tl)
        _module("vllm.envs", VLLM_BATCH_INVARIANT=False)
        _module("vllm.logger", init_logger=_logger)
        _module("vllm.platforms", current_platform=_Platform())
        _module("vllm.v1.kv_cache_interface", KVQuantMode=_KVQuantMode)
    elif package == "sglang":
        cuda = torch.cuda.is_available()
        # sglang >= 0.5.16 also asks for AMD GPU generations (False: an NVIDIA device) and the SM count, and
        # reads its environment flags only on AMD paths: a read here is refused, never guessed
        _module("sglang.srt.utils", is_hip=lambda: False, is_cuda=lambda: cuda, is_gfx95_supported=lambda: False,
                is_gfx1250_supported=lambda: False, get_device_core_count=lambda index=0: 132)  # an H100 SXM's SMs (sm90)
        _module("sglang.srt.environ", envs=_Refused("sglang.srt.environ.envs"))
    elif package == "flashinfer":
        _flashinfer_stand_ins(root)
    elif package == "sageattention":  # no heavy imports; its package path, so that relative imports resolve
        _module("sageattention").__path__ = [str(root / "sageattention")]
    elif package == "fla":
        _fla_stand_ins(root)


def _flashinfer_stand_ins(root: Path) -> None:
    """``flashinfer.triton``'s files without the package: its path (the wrappers import ``.kernels.cascade``
    and ``.utils`` relatively), ``flashinfer.utils`` for an sm90 device, and the real ``check_input``
    less its ``x.is_cuda`` assertion for CPU tensors (the interpreter runs on them)."""
    _module("flashinfer.triton").__path__ = [str(root / "flashinfer" / "triton")]
    _module("flashinfer.utils", get_compute_capability=lambda device: (9, 0),
            GPUArchitectureError=_GPUArchitectureError)
    utils = importlib.import_module("flashinfer.triton.utils")
    real = getattr(utils, "_attnum_real_check_input", utils.check_input)

    def check_input(x):
        if x.is_cuda:
            return real(x)
        assert x.is_contiguous(), "must be contiguous"  # what the real check asks beyond the device

    utils._attnum_real_check_input, utils.check_input = real, check_input


def _fla_stand_ins(root: Path) -> None:
    """``fla.ops.attn.parallel``'s imports without the package (whose ``__init__`` imports every op):

    - ``fla.backends.dispatch(name)``: the identity decorator (fla's backend switch; Triton is the default);
    - ``fla.utils``: ``check_shared_mem(arch)`` true for "hopper" and below (the sm90 the faithful model
      follows: parallel_attn_fwd then takes BT = 128, BS <= 64), ``contiguous`` and ``input_guard`` (make
      tensor arguments contiguous, as fla's do), ``autotune_cache_kwargs`` empty, ``tensor_cache`` the
      identity (fla's memoises index tensors), autocast decorators as identities (no autocast on the audit's path),
      ``IS_GATHER_SUPPORTED`` / ``IS_NVIDIA_BLACKWELL`` False (sm90);
    - ``fla.ops.utils``: ``prepare_chunk_indices`` ((sequence, chunk) pairs, fla's ``index.py`` in four
      lines of torch), ``chunk_global_cumsum`` refusing (only the gated ``g`` path calls it);
      ``op.py`` and ``constant.py`` are fla's own files;
    - ``einops.reduce`` where einops is not installed: refusing (only the backward calls it)."""
    import functools

    import torch

    def input_guard(fn):  # fla's: tensor arguments made contiguous (its device guard: one device here)
        @functools.wraps(fn)
        def wrapper(*args, **kw):
            args = [a.contiguous() if isinstance(a, torch.Tensor) else a for a in args]
            kw = {k: v.contiguous() if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
            return fn(*args, **kw)
        return wrapper

    contiguous = input_guard  # fla's ``contiguous`` decorates autograd forwards (ctx first) and plain functions

    def refuse(what):
        def fn(*args, **kw):
            raise NotImplementedError(f"{what} is not part of attnum's fla stand-ins (forward, no gate g)")
        return fn

    def prepare_chunk_indices(cu_seqlens, chunk_size, cu_seqlens_cpu=None):
        lens = torch.diff(cu_seqlens_cpu if cu_seqlens_cpu is not None else cu_seqlens)
        counts = (lens + chunk_size - 1).div(chunk_size, rounding_mode="floor").tolist()
        pairs = [(i, c) for i, n in enumerate(counts) for c in range(int(n))]
        return torch.tensor(pairs, dtype=torch.long).view(-1, 2).to(cu_seqlens)

    src, root = root, root / "fla"
    _module("fla").__path__ = [str(root)]
    _module("fla.backends", dispatch=lambda name: (lambda fn: fn))
    _module("fla.utils", check_shared_mem=lambda arch="none", index=None: arch in ("hopper", "ampere", "ada", "none"),
            contiguous=contiguous, autocast_custom_fwd=lambda fn: fn, autocast_custom_bwd=lambda fn: fn,
            IS_GATHER_SUPPORTED=False, IS_NVIDIA_BLACKWELL=False, input_guard=input_guard, autotune_cache_kwargs={},
            tensor_cache=lambda fn: fn)
    _module("fla.ops").__path__ = [str(root / "ops")]
    _module("fla.ops.utils", prepare_chunk_indices=prepare_chunk_indices,
            chunk_global_cumsum=refuse("chunk_global_cumsum")).__path__ = [str(root / "ops" / "utils")]
    _module("fla.ops.utils.cumsum", chunk_global_cumsum=refuse("chunk_global_cumsum"))
    _module("fla.ops.attn").__path__ = [str(root / "ops" / "attn")]
    _module("fla.ops.nsa").__path__ = [str(root / "ops" / "nsa")]  # its __init__ imports the naive reference
    for name in ("fla.ops.utils.constant", "fla.ops.utils.op"):
        _load_file(name, src / (name.replace(".", "/") + ".py"))
    if (root / "ops" / "nsa" / "parallel.py").is_file():  # NSA: fla's own index, CSR and pooling files
        index = _load_file("fla.ops.utils.index", src / "fla/ops/utils/index.py")
        csr = _load_file("fla.ops.utils.csr", src / "fla/ops/utils/csr.py")
        _module("fla.ops.utils", prepare_block_csr=csr.prepare_block_csr,
                **{n: getattr(index, n) for n in ("prepare_chunk_offsets", "prepare_lens", "prepare_token_indices")})
    if importlib.util.find_spec("einops") is None and "einops" not in sys.modules:
        _module("einops", reduce=refuse("einops.reduce (fla's backward)"))


class _Platform:
    """vllm.platforms.current_platform as an NVIDIA sm90 GPU (the model the faithful interpreter follows)."""

    def is_rocm(self):
        return False

    def is_cuda(self):
        return True

    def is_xpu(self):
        return False

    def has_device_capability(self, cap):
        return 90 >= (cap if isinstance(cap, int) else cap[0] * 10 + cap[1])

    def get_device_capability(self):
        return (9, 0)

    def is_device_capability_family(self, cap):
        return cap // 10 == 9

    def fp8_dtype(self):
        import torch

        return torch.float8_e4m3fn


class _KVQuantMode(IntEnum):  # the names unified_attention compares against; only NONE is used here
    NONE = 0
    FP8_PER_TENSOR = 1
    INT8_PER_TOKEN_HEAD = 2
    FP8_PER_TOKEN_HEAD = 3
    INT4_PER_TOKEN_HEAD = 4
    NVFP4 = 5


class _Refused:
    """A stand-in whose every attribute read raises: a name the kernel file imports but, on the paths
    attnum runs, never reads (SGLang's environment flags are read only on AMD GPUs)."""

    def __init__(self, what: str) -> None:
        self._what = what

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise NotImplementedError(f"{self._what}.{name} is not part of attnum's stand-ins (read only on paths "
                                  "attnum does not run)")


class _GPUArchitectureError(RuntimeError):
    pass


def _load_file(name: str, path: Path):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    parent, _, leaf = name.rpartition(".")
    _module(parent)
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    setattr(sys.modules[parent], leaf, mod)
    return mod
