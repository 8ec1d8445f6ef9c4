"""Training stage of the paper (Stage 2): workloads, runs, checkpoints and weight divergence.

Modules: ``data`` (bundled datasets, fixed order per seed), ``models`` (tiny transformers with a
pluggable SDPA-signature attention; names resolve in ``attnum.kernels.registry``), ``loop`` (one run),
``checkpoints`` (safetensors I/O), ``divergence`` (weight metrics), ``diverge`` (the paper's runs),
``report`` (curves + HTML), ``ddp`` (torchrun).
"""
