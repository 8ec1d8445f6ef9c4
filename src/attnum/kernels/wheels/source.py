"""Third-party Triton kernels, from the installed package or from its wheel in a user cache.

SGLang's, vLLM's and SageAttention 1's Triton attention kernels, FlashInfer's Triton merges and
ring-flash-attn's merge are plain Python files inside their wheels. attnum runs
them from the installed package when there is one; otherwise ``attnum kernels fetch sglang|vllm``
(or ``sageattention``) downloads the pinned wheel once, without dependencies (``pip download --no-deps``), into
``$ATTNUM_CACHE`` (default ``~/.cache/attnum``) and extracts only the kernel files it needs; later runs,
CI included, reuse them. Nothing of theirs is committed here.

A kernel file is imported by path under its own module name, with small stand-ins for the heavy modules
it imports (``vllm.platforms``: an NVIDIA sm90 platform; ``vllm.envs``; ``vllm.logger``;
``sglang.srt.utils``: ``is_hip() = False``, ``is_cuda()`` = whether CUDA is present; ``flashinfer.utils``:
``get_compute_capability`` = (9, 0) for the host wrappers' sm90 check, and ``flashinfer.triton.utils.check_input``
without its ``is_cuda`` assertion on CPU, its contiguity check kept) -- the stand-ins are installed only when the
real package is absent. Package ``__init__`` files are never run (flashinfer's imports its JIT and CUDA
extensions, ring_flash_attn's imports flash_attn): only the listed files load. With ``TRITON_INTERPRET=1``
(CPU) the kernels run in Triton's interpreter; see :mod:`attnum.kernels.triton.faithful` for its arithmetic.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from attnum.errors import AttnumEnvironmentError, bad_value
from attnum.kernels.wheels import cache as wheel_cache
from attnum.kernels.wheels.stand_ins import _load_file, _stand_ins, importable

WHEELS = {
    "sglang": ("0.5.3", "sglang-0.5.3-py3-none-any.whl",
               "14b20822b7c36d7069556e559181bcaa1d3d44b2b0fcbf8818313af4ca22ae7f"),
    "vllm": ("0.33.0", "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl",
             "4b6bdec4ab269990bf70d45a3c1e94c3760a27064513760193b26d6f0da883aa"),
    "sageattention": ("1.0.6", "sageattention-1.0.6-py3-none-any.whl",
                      "fafc66569bed62a16839e820c2612141b5a20accf55b876d941bab9c0ac5d888"),
    "flashinfer": ("0.7.2.post1", "flashinfer_python-0.7.2.post1-py3-none-any.whl",
                   "bfdc18b9e1e4d8d0730fe4343dc0e284cd0c160086de80f99888bc4867922d49"),
    "ring-flash-attn": ("0.1.8", "ring_flash_attn-0.1.8-py3-none-any.whl",
                        "296c929516c3b21f7bcdaeca44a99bb541779a7b63979eb0f67837dcb18a2bb9"),
    "fla": ("0.6.0", "fla_core-0.6.0-py3-none-any.whl",
            "b0708b70e0b119cd58a0a5146ea56cb175cef6ed969d8ac60267e3e077ce3ebd"),
}
"""``{package: (version, wheel file name, sha256)}``: the one wheel attnum fetches and runs per package, with
the sha256 the registry (PyPI) publishes for it. A wheel in the cache is used only under this exact name and
only when its hash matches, on fetch and before every use (attnum.kernels.wheels.cache). The versions are the
ones the verdicts in docs/audit.md and docs/lowbit.md were measured on. vLLM's wheel is platform-specific:
its kernel files are plain Python, so the x86_64 wheel is fetched on every machine (``pip download
--platform``)."""

PINS = {name: pin[0] for name, pin in WHEELS.items()}
"""``{package: version}`` (from :data:`WHEELS`)."""

DISTS = {"flashinfer": "flashinfer-python", "fla": "fla-core"}
"""The PyPI name where it is not the package's own (``attnum kernels fetch flashinfer`` gets flashinfer-python)."""

IMPORTS = {"ring-flash-attn": "ring_flash_attn"}
"""The import name where it is not the package's own."""

FILES = {
    "sglang": ("sglang/srt/layers/attention/triton_ops/decode_attention.py",
               "sglang/srt/layers/attention/triton_ops/merge_state.py",
               "sglang/srt/layers/attention/triton_ops/extend_attention.py",
               "sglang/srt/layers/attention/triton_ops/prefill_attention.py"),
    "vllm": ("vllm/v1/attention/ops/triton_unified_attention.py",
             "vllm/v1/attention/ops/triton_attention_helpers.py",
             "vllm/v1/attention/ops/triton_merge_attn_states.py",
             "vllm/v1/attention/ops/triton_decode_attention.py",
             "vllm/v1/attention/ops/prefix_prefill.py"),
    # SageAttention 1's Triton path (a pure-Python wheel): sageattn's host code and every kernel it calls.
    "sageattention": ("sageattention/core.py", "sageattention/quant_per_block.py",
                      "sageattention/quant_per_block_hd96.py", "sageattention/quant_per_block_varlen.py",
                      "sageattention/attn_qk_int8_per_block.py", "sageattention/attn_qk_int8_per_block_causal.py",
                      "sageattention/attn_qk_int8_per_block_h96.py",
                      "sageattention/attn_qk_int8_per_block_h96_causal.py",
                      "sageattention/attn_qk_int8_block_varlen.py",
                      "sageattention/attn_qk_int8_per_block_causal_varlen.py"),
    # FlashInfer's Triton cascade merges: host wrappers, kernels, and the checks the wrappers call.
    "flashinfer": ("flashinfer/triton/cascade.py", "flashinfer/triton/kernels/cascade.py",
                   "flashinfer/triton/kernels/__init__.py", "flashinfer/triton/utils.py"),
    "ring-flash-attn": ("ring_flash_attn/utils.py",),
    # flash-linear-attention's softmax attention: the two kernel files and the two helper files they import;
    # its native sparse attention (NSA): the selection, compression and top-k kernels and the helper files
    # (index, block CSR, mean pooling) they import.
    "fla": ("fla/ops/attn/parallel.py", "fla/ops/attn/decoding.py", "fla/ops/utils/op.py",
            "fla/ops/utils/constant.py", "fla/ops/nsa/parallel.py", "fla/ops/nsa/compression.py",
            "fla/ops/nsa/utils.py", "fla/ops/utils/index.py", "fla/ops/utils/csr.py", "fla/ops/utils/pooling.py"),
}


def cache_dir() -> Path:
    return Path(os.environ.get("ATTNUM_CACHE") or Path.home() / ".cache" / "attnum")


def _check(package: str) -> str:
    if package not in PINS:
        raise bad_value("package", package, f"one of {', '.join(PINS)}")
    return package


def source_dir(package: str) -> Path:
    """Where the extracted kernel files of the pinned wheel live (``<cache>/src/<package>-<version>``)."""
    return cache_dir() / "src" / f"{_check(package)}-{PINS[package]}"


def installed(package: str) -> bool:
    return importable(IMPORTS.get(_check(package), package))  # our own stand-ins do not count


def _fix(package: str) -> str:
    return f"attnum kernels fetch {package}"


def wheel_path(package: str) -> Path:
    """The pinned wheel's one accepted path in the cache (no glob: a decoy name is never picked)."""
    return cache_dir() / "wheels" / WHEELS[_check(package)][1]


def _problem(package: str) -> str:
    """'' when the pinned wheel verifies and the extracted kernel files are its bytes, else why not."""
    try:
        wheel_cache.verify_wheel(cache_dir(), wheel_path(package), WHEELS[package][2], _fix(package))
    except AttnumEnvironmentError as err:
        return str(err)
    return wheel_cache.tree_problem(cache_dir(), wheel_path(package), FILES[package], source_dir(package),
                                    _fix(package))


def missing(package: str) -> str:
    """'' when ``package``'s kernel files can be loaded here, else why not (one line). Fetched files are
    checked against the pinned wheel's sha256 on every call (attnum.kernels.wheels.cache)."""
    if installed(package):
        return ""
    src = source_dir(package)
    if not any(os.path.lexists(src / f) for f in FILES[package]) and not os.path.lexists(wheel_path(package)):
        return (f"{package} is neither installed nor fetched: run `attnum kernels fetch {package}` "
                f"(pip download --no-deps {DISTS.get(package, package)}=={PINS[package]} into {cache_dir()})")
    return _problem(package)


def _download(package: str, wheels: Path, quiet: bool) -> None:
    """pip download of the pinned wheel into a fresh folder beside ``wheels``; the pinned file, verified,
    renamed into place."""
    version, name, sha = WHEELS[package]
    tmp = Path(tempfile.mkdtemp(prefix=".download-", dir=wheels))
    try:
        plat = name[:-4].split("-")[4] if name.count("-") >= 4 else "any"
        platform = [a for p in plat.split(".") for a in ("--platform", p)] if plat != "any" else []
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", *platform,
               "--disable-pip-version-check", f"{DISTS.get(package, package)}=={version}", "-d", str(tmp)]
        run = subprocess.run(cmd, capture_output=quiet, text=True)
        got = tmp / name
        if run.returncode or not got.is_file() or got.is_symlink():
            tail = (run.stderr or "").strip().splitlines()[-1:] if quiet else []
            raise AttnumEnvironmentError(f"pip download of {DISTS.get(package, package)}=={version} ({name}) failed"
                                         + (f": {tail[0]}" if tail else ""))
        wheel_cache.verify_wheel(wheels, got, sha, _fix(package))
        os.replace(got, wheels / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def fetch(package: str, *, quiet: bool = False) -> Path:
    """Download the pinned wheel (no dependencies) once, check its sha256, and extract the kernel files
    into a fresh folder renamed into place; returns the folder. A cached wheel whose hash is wrong (a
    truncated download, a decoy) is refused with one line naming the file and the command that clears it."""
    dest = source_dir(package)
    if not _problem(package):
        return dest
    wheels = cache_dir() / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    wheel_cache.refuse_links(cache_dir(), wheels, _fix(package))
    if not os.path.lexists(wheel_path(package)):
        _download(package, wheels, quiet)
    wheel_cache.verify_wheel(cache_dir(), wheel_path(package), WHEELS[package][2], _fix(package))
    wheel_cache.extract(cache_dir(), wheel_path(package), FILES[package], dest, _fix(package))
    why = _problem(package)
    if why:
        raise AttnumEnvironmentError(why)
    return dest


# -- loading ---------------------------------------------------------------------------------------


    # ring-flash-attn's utils.py imports torch only


def load(package: str, module: str):
    """The kernel module ``module`` (dotted, e.g. ``vllm.v1.attention.ops.triton_merge_attn_states``):
    the installed one, else the fetched file with stand-ins for its heavy imports."""
    if installed(package):
        return importlib.import_module(module)
    if module in sys.modules:
        return sys.modules[module]
    why = missing(package)  # the pinned hash, checked again before this process runs the files
    if why:
        raise (NotImplementedError if "neither installed nor fetched" in why else AttnumEnvironmentError)(why)
    _stand_ins(package, source_dir(package))
    # sibling kernel files first (vLLM's unified attention imports its helpers, SGLang's extend its prefill)
    for f in FILES[package]:
        name = f[:-3].replace("/", ".")
        if name != module and (name.endswith("_helpers") or name.endswith("prefill_attention")):
            _load_file(name, source_dir(package) / f)
    return _load_file(module, source_dir(package) / (module.replace(".", "/") + ".py"))


