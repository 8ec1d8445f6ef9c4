"""HF transformers' ``_speculative_sampling`` (generation/utils.py) behind the auditor's protocol.

transformers takes logits and one sequence at a time: ``_speculative_sampling(candidate_input_ids
(1, k), candidate_logits (1, k, V), candidate_length=k, new_logits (1, k+1, V))`` -> (valid_tokens
(1, n+1), n_matches), drawing from the global RNG (``torch.rand_like``, ``torch.multinomial``). The
adapter passes log-probabilities in float32 (as ``generate`` hands it float32 logits; its softmax
gives back the probabilities to fp32 rounding), seeds the global RNG from the protocol's generator
inside ``torch.random.fork_rng`` (the caller's RNG state is untouched), and loops over the batch.
"""

from __future__ import annotations

import torch

NAME = "hf-transformers"
PACKAGE = "transformers"


def sampler(target_probs: torch.Tensor, draft_probs: torch.Tensor, draft_tokens: torch.Tensor,
            generator: torch.Generator | None = None) -> torch.Tensor:
    from transformers.generation.utils import _speculative_sampling

    B, k1, _ = target_probs.shape
    k = k1 - 1
    logp = torch.log(target_probs.float())
    logq = torch.log(draft_probs.float())
    out = torch.full((B, k1), -1, dtype=torch.int64)
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for b in range(B):
            valid, _ = _speculative_sampling(draft_tokens[b:b + 1], logq[b:b + 1], k, logp[b:b + 1])
            out[b, :valid.shape[1]] = valid[0]
    return out
