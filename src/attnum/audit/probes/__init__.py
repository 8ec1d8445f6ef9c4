"""The probe catalogue: one documented bug class per module, in the order the audit runs them."""

from __future__ import annotations

from attnum.audit.harness import Probe
from attnum.audit.probes import (
    accumulator_overflow,
    additive_mask_overflow,
    attention_sinks,
    batch_invariance,
    below_sentinel,
    block_select,
    block_table_past_end,
    causal_alignment,
    decode_batch_invariance,
    decode_causal_alignment,
    determinism,
    empty_sequence,
    exp_overflow,
    float_bias,
    fully_masked,
    gqa_mapping,
    grad_accuracy,
    grad_fully_masked,
    grad_low_lse,
    grad_tile_tail,
    inf_lse_empty_rows,
    kv_scale_overflow,
    long_sequence,
    lse_base,
    masked_key_leak,
    merge_empty_chain,
    merge_empty_convention,
    merge_empty_split,
    merge_two_empty,
    mla_latent_decode,
    nonfinite_masked_kv,
    odd_lengths,
    page_padding_leak,
    qk_overflow,
    scale_argument,
    shape_contract,
    softcap_overflow,
    split_invariance,
    varlen_ragged,
    window_poisoned_keys,
)

_MODULES = (
    below_sentinel,
    masked_key_leak,
    fully_masked,
    causal_alignment,
    qk_overflow,
    exp_overflow,
    accumulator_overflow,
    scale_argument,
    gqa_mapping,
    long_sequence,
    odd_lengths,
    shape_contract,
    additive_mask_overflow,
    float_bias,
    nonfinite_masked_kv,
    determinism,
    batch_invariance,
    # score features a target declares (attnum.kernels.conventions)
    softcap_overflow,
    window_poisoned_keys,
    attention_sinks,
    block_select,
    # serving side (merge / decode targets, attnum.kernels.serving)
    merge_empty_split,
    merge_two_empty,
    merge_empty_convention,
    merge_empty_chain,
    lse_base,
    inf_lse_empty_rows,
    split_invariance,
    decode_batch_invariance,
    page_padding_leak,
    block_table_past_end,
    empty_sequence,
    varlen_ragged,
    decode_causal_alignment,
    mla_latent_decode,
    kv_scale_overflow,
    grad_fully_masked,
    grad_low_lse,
    grad_tile_tail,
    grad_accuracy,
)

PROBES: dict[str, Probe] = {m.PROBE.name: m.PROBE for m in _MODULES}
DEFAULT_PROBES: tuple[str, ...] = tuple(name for name, p in PROBES.items() if p.default)


def select(names: str | list[str] | tuple[str, ...] | None) -> tuple[Probe, ...]:
    """Probes by name (comma-separated string or list); None = the default set."""
    if names is None:
        return tuple(PROBES[n] for n in DEFAULT_PROBES)
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in names if n not in PROBES]
    if unknown or not names:
        from attnum.errors import bad_value

        # the names themselves would make a line of 1,000 characters: where to read them instead
        raise bad_value("probes", ",".join(unknown) or names, f"comma-separated names of the {len(PROBES)} probes "
                        "(attnum audit --list; attnum.audit.probes.PROBES)", choices=PROBES if len(unknown) == 1 else None)
    return tuple(PROBES[n] for n in dict.fromkeys(names))
