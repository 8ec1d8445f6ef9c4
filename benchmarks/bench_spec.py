"""Speed targets: the exact speculative-decoding law for V = 32, k = 4 in <= 1 s, and a 10^6-sample
sampler audit in <= 60 s on 2 cores.

    python benchmarks/bench_spec.py [--threads N] [--target attnum] [--samples 1000000]

Prints the time of the law alone (spec_law), of the exact TV over the 32**5 completed outcomes
(spec_tv: speculative and plain), of the audit (``--samples`` spread evenly over the 7 cases, the
reference sampler in batches), and each ratio to its target (< 1 is within it).
"""

from __future__ import annotations

import argparse
import time

import torch

from attnum.sampling import SpecProcedure, spec_law, spec_tv
from attnum.spec_audit import SpecAuditConfig, run_spec_audit
from attnum.spec_audit.cases import CASES
from attnum.studies.speculative.spec_decode import SpecConfig

LAW_TARGET_S = 1.0
AUDIT_TARGET_S = 60.0


def _best(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--target", default="attnum")
    ap.add_argument("--samples", type=int, default=1_000_000)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    t, d = SpecConfig(vocab=32, k=4).logits(4)
    proc = SpecProcedure(format="bf16")
    law_s = _best(lambda: spec_law(t, d, procedure=proc))
    tv_s = _best(lambda: spec_tv(t, d, procedure=proc))
    per_case = -(-args.samples // len(CASES))
    t0 = time.perf_counter()
    report = run_spec_audit(SpecAuditConfig(target=args.target, samples=per_case))
    audit_s = time.perf_counter() - t0
    print(f"threads={torch.get_num_threads()}")
    print(f"spec_law  V=32 k=4 bf16: {law_s:.4f} s  target {LAW_TARGET_S:.0f} s  ratio {law_s / LAW_TARGET_S:.3f}")
    print(f"spec_tv   V=32 k=4 bf16 (32**5 outcomes, speculative + plain): {tv_s:.3f} s  ratio {tv_s / LAW_TARGET_S:.3f}")
    print(f"spec-audit {args.target}: {per_case * len(CASES)} samples over {len(CASES)} cases: {audit_s:.2f} s  "
          f"target {AUDIT_TARGET_S:.0f} s  ratio {audit_s / AUDIT_TARGET_S:.3f}  verdict {report['verdict']}")


if __name__ == "__main__":
    main()
