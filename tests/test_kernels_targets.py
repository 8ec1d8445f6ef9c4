"""Target resolution: built-ins, adapters, user callables (module and file), signature checks."""

import importlib.util
from pathlib import Path

import pytest
import torch

from attnum.errors import AttnumInputError
from attnum.kernels.targets import ADAPTERS, builtin_names, resolve_target
from attnum.kernels.user import check_signature, load_user_target

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_builtins_cover_the_issue_list():
    assert set(builtin_names()) >= {"torch-sdpa", "torch-sdpa-math", "torch-sdpa-flash", "torch-sdpa-efficient",
                                    "torch-sdpa-cudnn", "torch-flex", "flash-attn", "flashinfer", "xformers"}


def test_cpu_builtins_resolve_and_run():
    q = torch.randn(1, 2, 5, 8)
    for name in ("torch-sdpa", "torch-sdpa-math", "torch-sdpa-flash", "torch-flex"):
        t = resolve_target(name, "cpu")
        assert t.available, (name, t.reason)
        out = t.fn(q, q, q, attn_mask=None, is_causal=True, scale=0.3)
        ref = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True, scale=0.3)
        torch.testing.assert_close(out, ref)


@pytest.mark.parametrize("name,package", [("flash-attn", "flash_attn"), ("flashinfer", "flashinfer"),
                                          ("xformers", "xformers")])
def test_missing_packages_are_unavailable_with_a_reason(name, package):
    if importlib.util.find_spec(package) is not None:
        pytest.skip(f"{package} is installed here")
    t = resolve_target(name, "cpu")
    assert not t.available and t.fn is None and package in t.reason


def test_cuda_only_builtins_unavailable_on_cpu():
    t = resolve_target("torch-sdpa-cudnn", "cpu")
    assert not t.available and "cuda" in t.reason.lower()


def test_file_target_imports_its_siblings():
    fn = load_user_target(f"{EXAMPLES}/sentinel_attention.py:attention")
    q = torch.randn(1, 1, 3, 4)
    assert fn(q, q, q).shape == (1, 1, 3, 4)


def test_module_target_and_dotted_attribute():
    fn = load_user_target("torch.nn.functional:scaled_dot_product_attention")
    assert fn is torch.nn.functional.scaled_dot_product_attention


def test_target_without_enable_gqa_refuses_gqa_as_unsupported():
    fn = load_user_target(f"{EXAMPLES}/nan_softmax_attention.py:attention")
    q = torch.randn(1, 2, 3, 4)
    assert fn(q, q, q, enable_gqa=False).shape == (1, 2, 3, 4)
    with pytest.raises(NotImplementedError):
        fn(q, q[:, :1], q[:, :1], enable_gqa=True)


@pytest.mark.parametrize("sig_ok,fn", [
    (True, lambda query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False: 0),
    (True, lambda q, k, v, **kw: 0),
    (False, lambda q, k, v, mask: 0),
    (False, lambda q, k: 0),
    (False, lambda q, k, v, attn_mask=None: 0),
])
def test_signature_check(sig_ok, fn):
    if sig_ok:
        check_signature(fn, "x:y")
    else:
        with pytest.raises(AttnumInputError, match="does not follow"):
            check_signature(fn, "x:y")


def test_adapters_declare_status_and_sdpa():
    for mod in ADAPTERS.values():
        ok, why = mod.status("cpu")
        assert isinstance(ok, bool) and (ok or why)
        assert callable(mod.sdpa)
