"""Workload data shipped inside installed packages; nothing is downloaded at run time.

- digits: scikit-learn's bundled 8x8 handwritten digits (1797 images) with templated captions;
- lm: the English prose of the stdlib's ``pydoc_data.topics`` as bytes.

Every batch is a pure function of ``(data_seed, step)``, so runs that differ only in init seed,
attention or precision see the same examples, noise and timesteps in the same order, and a DDP run
sees the same global batch as a single process (each rank takes a contiguous slice).

Shapes: B batch, P pixels (64), L caption tokens, T sequence length.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnum.errors import AttnumInputError

DIGIT_NAMES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
# Every template has exactly four words so captions need no padding mask.
CAPTION_TEMPLATES = (
    "a handwritten digit {}",
    "a scribbled number {}",
    "the numeral {} drawn",
    "a small sketch {}",
)
CAPTION_LEN = 4


def _caption_vocab() -> dict[str, int]:
    words = sorted({w for t in CAPTION_TEMPLATES for w in t.split() if w != "{}"} | set(DIGIT_NAMES))
    return {w: i for i, w in enumerate(words)}


CAPTION_VOCAB = _caption_vocab()


def caption(label: int, template: int) -> str:
    """The templated caption, e.g. ``caption(7, 0) == "a handwritten digit seven"``."""
    return CAPTION_TEMPLATES[template].format(DIGIT_NAMES[label])


def tokenize_caption(text: str) -> list[int]:
    return [CAPTION_VOCAB[w] for w in text.split()]


def step_generator(data_seed: int, step: int) -> torch.Generator:
    # One generator per step: batch content does not depend on how many steps ran before.
    return torch.Generator().manual_seed(int(data_seed) * 1_000_003 + int(step))


@dataclass(frozen=True, kw_only=True)
class DigitsData:
    """All 1797 digits in [-1, 1] and their labels; captions are drawn per batch."""

    images_BP: torch.Tensor
    labels_B: torch.Tensor

    @staticmethod
    def load() -> DigitsData:
        from sklearn.datasets import load_digits

        d = load_digits()
        images = torch.tensor(d.data, dtype=torch.float32) / 8.0 - 1.0  # pixels 0..16
        return DigitsData(images_BP=images, labels_B=torch.tensor(d.target, dtype=torch.long))

    def batch(self, *, data_seed: int, step: int, batch_size: int, diffusion_steps: int) -> dict:
        """Images, caption tokens, timesteps and noise of one global batch."""
        g = step_generator(data_seed, step)
        idx = torch.randint(0, self.images_BP.shape[0], (batch_size,), generator=g)
        templates = torch.randint(0, len(CAPTION_TEMPLATES), (batch_size,), generator=g)
        labels = self.labels_B[idx]
        tokens = torch.tensor(
            [tokenize_caption(caption(int(y), int(t))) for y, t in zip(labels, templates)], dtype=torch.long
        )
        return {
            "x0_BP": self.images_BP[idx],
            "tokens_BL": tokens,
            "t_B": torch.randint(0, diffusion_steps, (batch_size,), generator=g),
            "noise_BP": torch.randn(batch_size, self.images_BP.shape[1], generator=g),
        }


@dataclass(frozen=True, kw_only=True)
class TextData:
    """The bytes of ``pydoc_data.topics`` (about 465k characters of English technical prose)."""

    bytes_T: torch.Tensor

    @staticmethod
    def load() -> TextData:
        from pydoc_data.topics import topics

        text = "\n\n".join(topics[k] for k in sorted(topics))
        raw = torch.frombuffer(bytearray(text.encode("utf-8")), dtype=torch.uint8)
        return TextData(bytes_T=raw.to(torch.long))

    def batch(self, *, data_seed: int, step: int, batch_size: int, seq_len: int) -> dict:
        g = step_generator(data_seed, step)
        starts = torch.randint(0, self.bytes_T.numel() - seq_len - 1, (batch_size,), generator=g)
        windows = torch.stack([self.bytes_T[s : s + seq_len + 1] for s in starts.tolist()])
        return {"inputs_BT": windows[:, :-1], "targets_BT": windows[:, 1:]}


def shard(batch: dict, rank: int, world_size: int) -> dict:
    """Rank ``rank``'s contiguous slice of a global batch (B must divide evenly)."""
    out = {}
    for name, t in batch.items():
        if t.shape[0] % world_size:
            raise AttnumInputError(f"batch={t.shape[0]} is not allowed with world_size={world_size}; expected a multiple of it")
        n = t.shape[0] // world_size
        out[name] = t[rank * n : (rank + 1) * n]
    return out
