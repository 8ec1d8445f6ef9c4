"""Same request, same answer? Batch invariance and prefill/decode consistency of one request.

A serving kernel chooses how to split the KV cache from the shape of the whole batch, so a request's
attention output can depend on the requests batched with it (Thinking Machines, "Defeating
Nondeterminism in LLM Inference", 2025; Dao-AILab/flash-attention#1897; flashinfer-ai/flashinfer#1675;
sgl-project/sglang#10425; vllm-project/vllm#53257). This family measures, for one request, the output
under every way a server computes it (:mod:`.run`), which knob breaks invariance, what a model's tokens
and log-probabilities do (:mod:`.tokens`), and what invariance costs (:mod:`.cost_table`).

Kept free of imports (the CLI reads the package before every command).
"""
