"""``assert_attention_close``: the auditor's probes and verdict rule as one pytest assertion.

Kernel authors put one line in their own test suite::

    from attnum.testing import assert_attention_close

    def test_my_kernel():
        assert_attention_close(my_kernel, dtypes=("bf16", "fp16"))

``fn`` follows ``torch.nn.functional.scaled_dot_product_attention``'s signature. The assertion fails
(AssertionError listing every failing probe with its three numbers: target error, baseline error,
bound) when any probe fails or the kernel raises; unsupported cases and behaviour notes do not fail
unless ``strict=True``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from attnum.audit.config import AuditConfig
from attnum.audit.runner import AuditReport, run_audit


def assert_attention_close(
    fn: Callable[..., torch.Tensor],
    *,
    dtypes: Sequence[str] | str = ("bf16", "fp16", "fp32"),
    probes: Sequence[str] | str | None = None,
    device: str = "cpu",
    strict: bool = False,
    k: float = 2.0,
    k_grad: float = 5.0,
    floor_ulps: float = 2.0,
    empty_rows: str | None = None,
    causal_alignment: str | None = None,
    seed: int = 0,
) -> AuditReport:
    """Run the audit on ``fn``; raise AssertionError on any failing probe, or when nothing was tested
    (every case refused); return the report. ``empty_rows``/``causal_alignment`` override what ``fn``
    declares (``fn.attnum_empty_rows``, ``fn.attnum_causal_alignment``); undeclared: SDPA's, zeros
    and top-left."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    cfg = AuditConfig(target=name, dtypes=tuple(dtypes) if not isinstance(dtypes, str) else dtypes,
                      device=device, probes=tuple(probes) if probes is not None and not isinstance(probes, str)
                      else probes, strict=strict, k=k, k_grad=k_grad, floor_ulps=floor_ulps,
                      empty_rows=empty_rows, causal_alignment=causal_alignment, seed=seed)
    report = run_audit(cfg, target=fn)
    if not report.available:
        raise AssertionError(f"attnum tested nothing for {name}: {report.reason}")
    bad = [r for r in report.results if not r.passed]
    if bad:
        head = (f"{len(bad)} attnum probe(s) failed for {name} (rule: err <= {k:g} x baseline "
                f"+ {floor_ulps:g} ulp + the rounding floor of the summed terms; gradients {k_grad:g} x):")
        lines = [head]
        lines += [f"  {r.name} [{r.dtype}] {r.status}: target_error={r.target_error:.3g} "
                  f"baseline_error={r.baseline_error:.3g} bound={r.bound:.3g} - {r.note}" for r in bad]
        raise AssertionError("\n".join(lines))
    return report
