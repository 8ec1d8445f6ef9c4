"""Speculative decoding's accept/resample step under finite precision, and its exact output law.

Shape alphabet: V vocabulary, k draft tokens, n samples (Monte-Carlo), B a batch of steps.

The step (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023): the draft proposes x_j ~ q_j for
j = 1..k; x_j is accepted with probability min(1, p_j(x_j) / q_j(x_j)); at the first rejection the step
emits y ~ norm(max(p_j - q_j, 0)) and stops; when all k are accepted it emits a bonus y ~ p_{k+1}. In
exact arithmetic every emitted token is distributed as the target.

*Position model.* p_j and q_j are given per position, (k+1, V) and (k, V), and do not depend on the
drafted prefix. Each verification's arithmetic depends on its own (p_j, q_j) only, so every rounding
mechanism is covered; what is not modelled is a target whose distribution depends on the prefix.

*The emulated procedure* (:class:`SpecProcedure`) rounds, through ``round_to`` at named sites, in one
format F:

============== ===================================================================================
logits         the logits as the model hands them over
exp            exp(l - max l)
sum            the softmax denominator (pairwise tree, every partial sum rounded)
probs          exp / sum: p^ and q^
ratio          p^(x) / q^(x)
residual       p^ - q^ (then max(., 0), exact)
residual_sum   the residual's sum (pairwise tree)
residual_probs residual / residual_sum
============== ===================================================================================

and then draws categorically (exactly from the weights, or by an exponential race whose noise has a
floor, :data:`NOISE`). Its *exact* output law is computed in float64 from those rounded values
(:func:`spec_law`), and its total-variation distance to the exact target (float64 softmax of the same
logits) by enumerating the V**(k+1) outcomes of a step completed by exact target draws
(:func:`spec_tv`). Completion: after the step stops at length m <= k+1 the remaining k+1-m positions
are drawn from the exact target, so that in exact arithmetic the completed block is distributed as
prod_j p_j and every deviation is the step's own. ``tv_plain`` is the same distance for plain
(non-speculative) sampling from p^ in the same format: the baseline.
"""

from attnum.sampling.emulate import (
    SITES,
    accept_prob,
    check_probs,
    prob_tolerance,
    ratio_in,
    residual_in,
    softmax_in,
    tree_sum,
)
from attnum.sampling.greedy import greedy_ties, greedy_verify
from attnum.sampling.law import (
    MAX_OUTCOMES,
    Q_ZERO,
    ZERO_RESIDUAL,
    SpecLaw,
    SpecProcedure,
    SpecTV,
    block_cells,
    block_index,
    block_law,
    spec_law,
    spec_tv,
)
from attnum.sampling.noise import NOISE, Noise, draw, get_noise, race_law
from attnum.sampling.samplers import reference_sampler, simulate

__all__ = [
    "MAX_OUTCOMES", "NOISE", "Q_ZERO", "SITES", "ZERO_RESIDUAL", "Noise", "SpecLaw", "SpecProcedure", "SpecTV",
    "accept_prob", "block_cells", "block_index", "block_law", "check_probs", "draw", "get_noise", "greedy_ties",
    "greedy_verify", "prob_tolerance", "race_law", "ratio_in", "reference_sampler", "residual_in", "simulate",
    "softmax_in", "spec_law", "spec_tv", "tree_sum",
]
