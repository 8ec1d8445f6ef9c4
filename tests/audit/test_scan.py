"""``attnum scan``: crafted Python, CUDA/C++ and Triton snippets, positives and negatives."""

import json

import _paths
import pytest

from attnum.audit.scan.scanner import scan_paths, scan_text
from attnum.cli import main

EXAMPLES = _paths.EXAMPLES


def rules(text, python=True):
    return sorted({(f.line, f.rule) for f in scan_text(text, "x", python=python)})


@pytest.mark.parametrize("src,rule", [
    ("scores = scores.masked_fill(~mask, -1e4)", "finite-mask-fill"),
    ("s = torch.where(mask, s, -65504.0)", "finite-mask-fill"),
    ("MASK_VALUE = -5e4", "finite-inf-constant"),
    ("NEG_INF = -1e30", "finite-inf-constant"),
    ("DEFAULT_MASK_VALUE = -0.7 * 3.4e38", "finite-inf-constant"),
    ("m_i = torch.full((n, 1), -1e9)", "finite-running-max-init"),
    ("bias = causal + torch.finfo(torch.float16).min", "finfo-min-additive"),
    ("NEG_INF = -1e4 if torch.cuda.is_available() else -1e9", "finite-inf-constant"),  # either branch
    ("mask_value = 0.0 if fp32 else -65504.0", "finite-inf-constant"),
    ("mask_value = torch.finfo(x.dtype).min if c else -1e4", "finite-inf-constant"),
    ("s = s.masked_fill(~m, -1e4 if half else float('-inf'))", "finite-mask-fill"),
    ("mask = (1 - m) * torch.finfo(x.dtype).min + pad", "finfo-min-additive"),
], ids=lambda x: x if len(x) < 30 else x[:30])
def test_python_positives(src, rule):
    assert (1, rule) in rules(src)


@pytest.mark.parametrize("src", [
    "scores = scores.masked_fill(~mask, float('-inf'))",
    "s = torch.where(mask, s, -math.inf)",
    "m_i = torch.full((n, 1), float('-inf'))",
    "m = 4096",
    "n_tokens = 50000",
    "x = y - 1e4 * z",
    "# MASK_VALUE = -5e4 (a comment)",
    "print('fill with -1e4')",
    "NEG_INF = float('-inf') if c else -math.inf",
    "n = 10000 if big else 100",  # a large number, not named like a mask value
    "f(mask_value=g(x, y), limit=-1e4)",  # the -1e4 is another argument's, past the ','

    "'''\nMASK_VALUE = -5e4 in a docstring\n'''",
])
def test_python_negatives(src):
    assert rules(src) == []


def test_a_conditional_sentinel_is_followed_to_its_uses():
    src = "big_neg = -1e4 if half else -1e9\ns = s.masked_fill(~keep, big_neg)\n"
    assert rules(src) == [(1, "finite-inf-constant"), (2, "finite-mask-fill")]


def test_finfo_min_fill_is_reported_low_only():
    """The fix of transformers#27114 is finite and dtype-dependent: a low finding, never medium/high."""
    src = "scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)"
    found = scan_text(src, "x", python=True)
    assert [(f.line, f.rule, f.severity) for f in found] == [(1, "finfo-mask-fill", "low")]


def test_named_sentinel_is_followed_to_its_uses():
    src = "MASK_VALUE = -5e4\nm_i = torch.full((n, 1), MASK_VALUE)\ns = s.masked_fill(~keep, MASK_VALUE)\n"
    assert rules(src) == [(1, "finite-inf-constant"), (2, "finite-mask-fill"), (2, "finite-running-max-init"),
                          (3, "finite-mask-fill")]


CUDA = """\
namespace math { constexpr float inf = 5e4; }
__device__ void f(float* s, const bool* mask, float d) {
  float m = -math::inf;                 // running max starts finite
  s[0] = mask[0] ? s[0] : -math::inf;   // masked fill finite
  float ok = -INFINITY;
  /* float MASK_VALUE = -1e30; (a comment) */
  float m2 = fmaxf(ok, -FLT_MAX);
  float lse = m + log2f(d);
  float e = expf(d);
}
#define NEG_INF -1e30f
"""


def test_cuda_positives_and_negatives():
    found = rules(CUDA, python=False)
    assert (1, "finite-inf-constant") in found
    assert (3, "finite-running-max-init") in found
    assert (4, "finite-mask-fill") in found
    assert (8, "lse-base-mix") in found
    assert (11, "finite-inf-constant") in found
    assert not [r for r in found if r[0] in (5, 6, 7)]


TRITON = """\
@triton.jit
def _fwd(Q, K, V, BLOCK_M: tl.constexpr):
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - 1.0e6
    qk += tl.where(offs_m[:, None] >= offs_n[None, :], 0, -1.0e6)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    ok = tl.where(mask, qk, float("-inf"))
    m_ok = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    qk = tl.where(mask, qk, float("-inf"))
    qk = softcap * tanh(qk / softcap)
"""


def test_triton_positives_and_negatives():
    found = rules(TRITON)
    assert (3, "finite-running-max-init") in found
    assert (4, "finite-mask-fill") in found
    assert (9, "softcap-after-mask") in found
    assert not [r for r in found if r[0] in (5, 6, 7, 8)]


def test_softcap_before_mask_is_fine():
    assert rules("qk = softcap * torch.tanh(qk / softcap)\nqk = qk.masked_fill(~m, float('-inf'))\n") == []


def test_scan_finds_the_example_sentinel_and_spares_the_nan_example():
    findings, n = scan_paths([EXAMPLES])
    assert n >= 3
    assert {f.rule for f in findings if f.path.endswith("sentinel_attention.py")} >= {
        "finite-inf-constant", "finite-mask-fill", "finite-running-max-init"}
    # The sentinel merge (examples/sentinel_merge.py, the serving probes' planted bug) is found too.
    assert {f.rule for f in findings if f.path.endswith("sentinel_merge.py")} == {"finite-inf-constant"}
    # The Triton tutorial-style kernel masks causal scores with the tutorial's own finite -1.0e6.
    assert {f.rule for f in findings if f.path.endswith("triton_tutorial/fused_attention.py")} == {"finite-mask-fill"}
    # HF's eager masks as the HF wrapper builds them: finfo(dtype).min where a key is masked (low).
    hf = {(f.rule, f.severity) for f in findings if f.path.endswith("hf_attention.py")}
    assert hf == {("finfo-mask-fill", "low")}
    assert not [f for f in findings if not f.path.endswith(("sentinel_attention.py", "sentinel_merge.py",
                                                            "triton_tutorial/fused_attention.py", "hf_attention.py"))]
    assert all(f.why and f.snippet for f in findings)
    assert all(f.severity == "high" for f in findings if not f.path.endswith("hf_attention.py"))


def test_cli_exit_codes_json_and_min_severity(tmp_path, capsys):
    (tmp_path / "k.py").write_text("bias = a + torch.finfo(torch.float16).min\n")
    assert main(["scan", str(EXAMPLES)]) == 1
    assert "sentinel_attention.py:" in capsys.readouterr().out
    assert main(["scan", str(tmp_path), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["files_scanned"] == 1 and doc["findings"][0]["rule"] == "finfo-min-additive"
    assert {"path", "line", "rule", "severity", "snippet", "why"} <= set(doc["findings"][0])
    assert main(["scan", str(tmp_path), "--min-severity", "high"]) == 0
    assert main(["scan", str(tmp_path), "--min-severity", "extreme"]) == 2
    assert main(["scan", str(tmp_path / "missing")]) == 2
    assert main(["scan"]) == 2


def test_package_option_scans_an_installed_package(tmp_path, monkeypatch, capsys):
    pkg = tmp_path / "fakekernels"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "attn.cu").write_text("s = masked ? -5e4f : s;\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["scan", "--package", "fakekernels"]) == 1
    assert "attn.cu:1" in capsys.readouterr().out
    assert main(["scan", "--package", "no_such_package_xyz"]) == 2
