"""The speculative-sampler auditor: crafted (p, q) cases, the exact law of the emitted block, a
chi-square test whose sample size comes from a power analysis. See :mod:`.targets` for the protocol."""

from attnum.spec_audit.runner import SpecAuditConfig, run_spec_audit

__all__ = ["SpecAuditConfig", "run_spec_audit"]
