"""The one registry: every class of attention name resolves, runs like SDPA, or says why it cannot."""

from __future__ import annotations

import importlib.util

import _paths
import pytest
import torch

from attnum.attention.golden import golden_attention
from attnum.errors import AttnumInputError
from attnum.kernels import reference
from attnum.kernels.registry import KERNELS, builtin_names, require, resolve
from attnum.kernels.user import check_signature, load_user_target
from attnum.numerics.formats import get_format
from attnum.numerics.metrics import ulp
from attnum.numerics.policy import SITES, parse_policy

EXAMPLES = _paths.EXAMPLES
B, H, G, N, S, d = 2, 4, 2, 7, 13, 8  # S not a multiple of the flash tile below; GQA (G < H)
USER_FILE = '''
import torch.nn.functional as F


def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, is_causal=is_causal,
                                          scale=scale, enable_gqa=enable_gqa)
'''


def _coarsest(policy: str) -> str:
    """The format with the fewest mantissa bits among a policy's sites: it bounds the error."""
    p = parse_policy(policy)
    return min((getattr(p, s) for s in SITES), key=lambda f: f.mbits).name


# (name, format its arithmetic is in, tiles): one entry per class of name
CASES = [
    ("golden", "fp64", {}),
    ("eager", "fp64", {}),
    ("baseline:fp32", "fp32", {}),
    ("flash:fa2:bf16,acc=fp16", _coarsest("fa2:bf16,acc=fp16"), {"block_k": 4}),
    ("flash:torch-cpu:fp32", "fp32", {"block_q": 4, "block_k": 4}),
    *((name, "fp64", {}) for name in ("torch-sdpa", "torch-sdpa-math", "torch-sdpa-flash", "torch-flex")),
    ("torch.nn.functional:scaled_dot_product_attention", "fp64", {}),
    ("FILE:attention", "fp64", {}),
]


def _qkv(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, h, n, d, generator=g, dtype=torch.float64) for h, n in ((H, N), (G, S), (G, S)))


@pytest.mark.parametrize("masking", ["causal", "bool-mask"])
@pytest.mark.parametrize("name,fmt,tiles", CASES, ids=[c[0] for c in CASES])
def test_every_name_class_runs_like_sdpa_against_golden(name, fmt, tiles, masking, tmp_path):
    if name.startswith("FILE:"):
        (tmp_path / "user_attention.py").write_text(USER_FILE)
        name = name.replace("FILE", str(tmp_path / "user_attention.py"))
    q, k, v = _qkv()
    mask = None
    if masking == "bool-mask":  # random keep-pattern; every row keeps its first key, so none is empty
        mask = torch.rand(N, S, generator=torch.Generator().manual_seed(1)) < 0.6
        mask[:, 0] = True
    kw = {"attn_mask": mask, "is_causal": masking == "causal", "scale": 0.3}
    target = resolve(name, "cpu", **tiles)
    assert target.available and target.reason == "", target.reason
    out = target.fn(q, k, v, **kw, enable_gqa=True)
    want = golden_attention(q, k, v, **kw)
    assert out.dtype == q.dtype and out.shape == want.shape
    # Rounding-error bound of the two inner products (length d for the scores, S for P V), in
    # ULPs of the arithmetic's format at the output's scale.
    bound = (d + S) * ulp(float(want.abs().max()), get_format(fmt))
    err = float((out - want).abs().max())
    print(f"{name} {masking}: err={err:.3g} bound={bound:.3g} ({fmt})")
    assert err <= bound


def test_builtin_names_cover_the_issue_list():
    names = set(builtin_names())
    assert names >= {"golden", "eager", "baseline:POLICY", "flash:POLICY", "torch-sdpa", "torch-sdpa-math",
                     "torch-sdpa-flash", "torch-sdpa-efficient", "torch-sdpa-cudnn", "torch-flex", "flash-attn",
                     "flashinfer", "xformers"}


@pytest.mark.parametrize("spec", ["no-such-kernel", "flash", "", "  "])
def test_unknown_names_list_the_known_ones(spec):
    with pytest.raises(AttnumInputError, match="expected a built-in") as err:
        resolve(spec)
    msg = str(err.value)
    assert all(name in msg for name in builtin_names())
    assert "module:function" in msg and "file.py:function" in msg


@pytest.mark.parametrize("spec", ["flash:nope", "baseline:", "flash:fa2:bf16,nosuchsite=fp16"])
def test_bad_policies_fail_with_the_policy_parser_message(spec):
    with pytest.raises(AttnumInputError, match="policy"):
        resolve(spec)


@pytest.mark.parametrize("name,package", [("flash-attn", "flash_attn"), ("flashinfer", "flashinfer"),
                                          ("xformers", "xformers")])
def test_missing_packages_are_unavailable_with_a_reason(name, package):
    if importlib.util.find_spec(package) is not None:
        pytest.skip(f"{package} is installed here")
    t = resolve(name, "cpu")
    assert not t.available and t.fn is None and package in t.reason
    with pytest.raises(AttnumInputError, match=f"not available here: .*{package}"):
        require(name, "cpu")


@pytest.mark.parametrize("name", ["torch-sdpa-cudnn", "torch-sdpa-efficient", "flash-attn", "flashinfer"])
def test_cuda_only_kernels_say_so_on_cpu(name):
    t = resolve(name, "cpu")
    assert not t.available and "cuda only, not cpu" in t.reason


@pytest.mark.parametrize("name", ["torch-sdpa-cudnn", "golden", "flash:fp32", "torch.nn.functional:scaled_dot_product_attention"])
def test_cuda_without_a_gpu_is_unavailable(name):
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    t = resolve(name, "cuda")
    assert not t.available and "CUDA is not available" in t.reason
    if name == "torch-sdpa-cudnn":  # device=None: could it run on any device here?
        assert "CUDA is not available" in resolve(name, None).reason
    else:
        assert resolve(name, None).available


def test_callables_pass_through_with_their_name():
    fn = torch.nn.functional.scaled_dot_product_attention
    t = resolve(fn)
    assert t.fn is fn and t.available and t.name == "scaled_dot_product_attention"


@pytest.mark.parametrize("name", ["golden", "baseline:fp32", "flash:fp32"])
def test_emulations_refuse_dropout(name):
    q, k, v = _qkv()
    with pytest.raises(AttnumInputError, match="dropout_p=0.1"):
        resolve(name).fn(q, k, v, dropout_p=0.1, enable_gqa=True)


@pytest.mark.parametrize("name", ["golden", "baseline:uniform:bf16", "flash:fa2:bf16"])
def test_emulations_ignore_autocast_and_return_the_query_dtype(name):
    fn = resolve(name, block_k=4).fn
    q, k, v = (t.float() for t in _qkv())
    plain = fn(q, k, v, is_causal=True, enable_gqa=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        auto = fn(q, k, v, is_causal=True, enable_gqa=True)
    assert auto.dtype == torch.float32 and torch.equal(auto, plain)


def test_flash_tiles_reach_flash_attention(monkeypatch):
    seen = []
    real = reference.flash_attention

    def spy(*args, **kw):
        seen.append((kw["block_q"], kw["block_k"]))
        return real(*args, **kw)

    monkeypatch.setattr(reference, "flash_attention", spy)
    q, k, v = _qkv()
    resolve("flash:fp32", block_q=2, block_k=4).fn(q, k, v, enable_gqa=True)
    resolve("baseline:fp32", block_q=2, block_k=4).fn(q, k, v, enable_gqa=True)  # tiles ignored, no error
    assert seen == [(2, 4)]


@pytest.mark.parametrize("name", ["golden", "baseline:fp64", "flash:fp64"])
def test_emulations_are_differentiable_like_float64_autograd(name):
    q, k, v = _qkv()
    grads = []
    for fn in (resolve(name, block_k=4).fn, resolve("eager").fn):
        qkv = [t.clone().requires_grad_() for t in (q, k, v)]
        fn(*qkv, is_causal=True, enable_gqa=True).square().sum().backward()
        grads.append([t.grad for t in qkv])
    for got, want in zip(*grads):
        bound = (d + S) * ulp(float(want.abs().max()), get_format("fp64"))
        assert float((got - want).abs().max()) <= bound


# -- user targets -----------------------------------------------------------------------------------


def test_file_target_imports_its_siblings():
    fn = resolve(f"{EXAMPLES}/sentinel_attention.py:attention").fn
    q = torch.randn(1, 1, 3, 4)
    assert fn(q, q, q).shape == (1, 1, 3, 4)


def test_module_target_and_dotted_attribute():
    assert resolve("torch.nn.functional:scaled_dot_product_attention").fn is \
        torch.nn.functional.scaled_dot_product_attention
    assert resolve("torch.nn:functional.scaled_dot_product_attention").fn is \
        torch.nn.functional.scaled_dot_product_attention


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


def test_the_registry_lists_every_adapters_kernels_as_declared():
    from attnum.kernels.registry import ADAPTERS

    listed = [k for mod in ADAPTERS for k in mod.KERNELS]
    assert len(listed) >= 25
    for k in listed:
        assert KERNELS[k.name] is k, k.name


def test_a_specs_all_kernels_leaves_out_the_interpreted_ones():
    """Pallas in interpret mode costs ~10x a torch kernel per sweep point (the quick reproduction went
    from 134 s to 247 s with jax installed): "all" in a spec means the compiled kernels; a spec may
    still name an interpreted one."""
    from attnum.sweep.spec import spec_from_dict

    interpreted = {name for name, k in KERNELS.items() if k.interpreted}
    assert interpreted == {"pallas-mha", "pallas-tpu-flash", "sglang-decode", "sglang-merge", "sglang-extend",
                           "vllm-unified", "vllm-unified-fp8kv", "vllm-triton-merge", "vllm-triton-decode",
                           "vllm-prefix-prefill", "sglang-context", "sage1-triton", "flashinfer-triton-merge",
                           "flashinfer-triton-merge-n", "flashinfer-triton-merge-varlen", "ring-flash-attn-merge",
                           "fla-parallel-attn", "fla-decode", "fla-nsa", "vllm-mla-decode"}
    every = spec_from_dict({"name": "t", "axes": {"seq_len": [16]}}).kernel_names
    assert set(every) == set(KERNELS) - interpreted and "torch-sdpa-math" in every
    named = spec_from_dict({"name": "t", "kernels": ["pallas-mha"], "axes": {"seq_len": [16]}})
    assert named.kernel_names == ("pallas-mha",)


@pytest.mark.parametrize("name,declared", [
    ("torch-sdpa-math", {}),  # SDPA itself: its conventions are the defaults, not a declaration
    ("flash-attn", {"causal_alignment": "bottom_right", "empty_rows": "zeros"}),  # registry table, with sources
    ("pallas-mha", {"causal_alignment": "top_left"}),  # a module constant; empty rows unstated
    ("vllm-unified", {"causal_alignment": "bottom_right"}),  # ServingTarget(causal_alignment=...) only
    ("vllm-prefix-prefill", {"causal_alignment": "bottom_right", "empty_rows": "zeros"}),
    ("sglang-decode", {}),
])
def test_a_builtin_declares_only_what_its_adapter_states(name, declared):
    """What an adapter leaves unstated is judged by SDPA's default and the audit says "SDPA default", not
    "declared" (vllm-unified's empty rows: vLLM states nothing for a query with no key)."""
    from attnum.audit.config import AuditConfig
    from attnum.audit.engine import resolve_conventions

    target = resolve(name, "cpu")
    assert {k: v for k, v in target.declared.items() if k != "emulation"} == declared
    source = resolve_conventions(AuditConfig(target=name), target.declared)["source"]
    for field in ("causal_alignment", "empty_rows"):
        assert source[field] == ("declared" if field in declared else "SDPA default"), (field, source)
