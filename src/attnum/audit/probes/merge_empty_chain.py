"""A chain of merges whose first state is empty must not poison the merges after it.

Ring attention merges, on each rank, the block results it receives one after another, starting from
its first block as is; so does any split-KV combine that folds states left to right. When that first
state is empty (a rank whose first block holds no key for some rows: varlen packing, padding, a
causal mask), the running LSE starts at the empty value, and a merge written for live states can turn
it into NaN at the next step: ring-flash-attn's sigmoid update ``lse - logsigmoid(lse - block_lse)``
gives -inf - (-inf) = NaN for lse = -inf (zhuzilin/ring-flash-attention utils.py, the form of
ring-flash-attention#34), and every later merge of that row is NaN. Cases, empties in the target's
declared convention (attnum.audit.merge_cases): [empty, live, live], [empty, live, live, live],
[live, empty, live], and [first state empty in half the rows, live, live] (two empty states in a row
are merge-two-empty's case); through ``merge_states``
where the target has it, else ``merge_state`` fed its own result.
"""

from __future__ import annotations

from attnum.audit.harness import Case, Probe, ProbeContext
from attnum.audit.merge_cases import chain_case, empty
from attnum.audit.serving import state, unsupported
from attnum.kernels.serving import conventions, entry

T, H, DV = 6, 2, 32


def run(ctx: ProbeContext) -> list[Case]:
    if entry(ctx.target, "merge_state") is None and entry(ctx.target, "merge_states") is None:
        return [unsupported("merge", "target has no merge_state or merge_states entry point "
                                     "(protocol: attnum.kernels.serving)")]
    _, empty_lse = conventions(ctx.target)

    def live(i: int, mu: float):
        return state(ctx.randn(T, H, DV, salt=10 * i), mu + ctx.randn(T, H, salt=10 * i + 1))

    def e():
        return empty(ctx, (T, H), DV)

    half = live(7, 0.5)
    rows = ctx.randn(T, H, salt=99) > 0  # the rows whose first block holds no key
    half.o[rows], half.lse[rows] = 0.0, empty_lse
    chains = {
        "[empty, live, live]": [e(), live(1, 0.0), live(2, 2.0)],
        "[empty, live, live, live]": [e(), live(3, 1.0), live(4, -1.0), live(2, 3.0)],
        "[live, empty, live]": [live(5, 0.0), e(), live(6, 1.5)],
        "[first empty in half the rows, live, live]": [half, live(8, 0.0), live(9, 1.0)],
    }
    return [chain_case(ctx, label, states) for label, states in chains.items()]


PROBE = Probe(
    name="merge-empty-chain",
    summary="a chain of merges starting from an empty state: no NaN, the merge of the live ones",
    refs=("zhuzilin/ring-flash-attention ring_flash_attn/utils.py::_update_out_and_lse",
          "zhuzilin/ring-flash-attention#34", "Dao-AILab/flash-attention#1936"),
    run=run,
)
