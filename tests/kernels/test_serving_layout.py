"""The token-major buffers the SGLang / vLLM adapters hand their kernels (attnum.kernels.serving_layout).

A caller's ``out`` (B, H, N, d) is a copy once made token-major (N > 1): a kernel that writes the token
buffer alone leaves ``out`` as it was, and the audit's poison check then calls rows the kernel wrote
``unwritten`` (vllm-unified's decode did, until ``written`` copied back). Rows the kernel leaves alone must
keep what ``out`` held, so that the check still sees a row no kernel wrote."""

from __future__ import annotations

import pytest
import torch

from attnum.kernels import serving_layout as lay


@pytest.mark.parametrize("N", [1, 3])
def test_tokens_round_trip(N):
    x = torch.randn(2, 4, N, 8)
    tok = lay.tokens(x)
    assert tok.shape == (2 * N, 4, 8) and tok.is_contiguous()
    assert torch.equal(tok[1 * N + (N - 1), 2], x[1, 2, N - 1])  # token b N + i, head h = x[b, h, i]
    assert torch.equal(lay.untokens(tok, 2, N), x)


@pytest.mark.parametrize("N", [1, 3])
def test_a_kernel_writing_the_token_buffer_fills_the_callers_out(N):
    B, H, d = 2, 4, 8
    poison = 1234.5
    out = torch.full((B, H, N, d), poison)
    buf = lay.token_out(out, out)
    assert buf.data_ptr() != out.data_ptr() and torch.equal(buf, torch.full_like(buf, poison))
    want = torch.randn(B, H, N, d)
    kernel_rows = lay.tokens(want)
    buf[1:] = kernel_rows[1:]  # the "kernel" writes every token but the first
    got = lay.written(out, buf, B, N)
    assert got is out
    assert torch.equal(out[0, :, 0], torch.full((H, d), poison))  # token 0 = (b 0, query 0): never written
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[0, 0] = False
    assert torch.equal(out.permute(0, 2, 1, 3)[mask], want.permute(0, 2, 1, 3)[mask])


def test_without_out_the_result_is_the_token_buffer():
    buf = lay.token_out(None, torch.zeros(2, 4, 3, 8, dtype=torch.float16))
    assert buf.shape == (6, 4, 8) and buf.dtype == torch.float16
    buf.copy_(torch.arange(buf.numel(), dtype=torch.float16).reshape(buf.shape))
    got = lay.written(None, buf, 2, 3)
    assert got.shape == (2, 4, 3, 8) and torch.equal(lay.tokens(got), buf)
