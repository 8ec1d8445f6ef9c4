"""Tile sizes of the re-implementation: given directly, or derived from an SRAM size.

FlashAttention (Dao et al. 2022, Algorithm 1 line 1) sizes tiles from the on-chip SRAM size M:
Bc = ceil(M / 4d) key/value rows, Br = min(ceil(M / 4d), d) query rows. attnum counts M in
*elements* (values of whatever format the tiles hold), as the FlashAttention paper does; an
A100's 192 KiB of shared memory holding fp16 is M = 98304.

In the forward pass each output row depends on Bc only (through the Tc = ceil(S / Bc) rescaling
steps); Br changes how rows are grouped, not their arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from attnum.errors import AttnumInputError

DEFAULT_BLOCK = 128  # FlashAttention-2's forward tile for d <= 128


@dataclass(frozen=True, kw_only=True)
class Tiles:
    Br: int
    Bc: int

    def __post_init__(self) -> None:
        for name in ("Br", "Bc"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise AttnumInputError(f"{name}={value!r} is not allowed; expected a positive integer")

    def Tc(self, S: int) -> int:
        """Number of key/value tiles (outer-loop steps) for S keys (0 for no keys)."""
        return math.ceil(S / self.Bc)

    @property
    def area(self) -> int:
        return self.Br * self.Bc


def resolve_tiles(
    d: int,
    *,
    block_q: int | None = None,
    block_k: int | None = None,
    sram: int | None = None,
    swap_blocks: bool = False,
    square: bool = False,
) -> Tiles:
    """Tiles from explicit blocks, or from ``sram`` (elements) by Algorithm 1's rule.

    ``swap_blocks`` exchanges Br and Bc (the paper's Fig. 6a); ``square`` sets Br = Bc (Fig. 6b).
    """
    if sram is not None:
        if block_q is not None or block_k is not None:
            raise AttnumInputError(f"sram={sram!r} is not allowed together with block_q/block_k; give one or the other")
        if not isinstance(sram, int) or isinstance(sram, bool) or sram < 1:
            raise AttnumInputError(f"sram={sram!r} is not allowed; expected a positive number of elements")
        bc = math.ceil(sram / (4 * d))
        br = min(bc, d)
    else:
        br = DEFAULT_BLOCK if block_q is None else block_q
        bc = DEFAULT_BLOCK if block_k is None else block_k
        for name, value in (("block_q", br), ("block_k", bc)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise AttnumInputError(f"{name}={value!r} is not allowed; expected a positive integer")
    if swap_blocks:
        br, bc = bc, br
    if square:
        br = bc
    return Tiles(Br=br, Bc=bc)
