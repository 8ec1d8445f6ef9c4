"""attnum.integrations.shadow: every attention call of real models is intercepted once and recorded."""

from __future__ import annotations

import json

import pytest
import torch

from attnum.integrations.shadow import shadow


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: threads only add synchronisation
    yield
    torch.set_num_threads(before)


def _tiny_llama():
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    model.set_attn_implementation("sdpa")
    return model


def _tiny_unet():
    diffusers = pytest.importorskip("diffusers", reason="diffusers is not installed")
    torch.manual_seed(0)
    return diffusers.UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, block_out_channels=(32, 64),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32, attention_head_dim=8, norm_num_groups=8, layers_per_block=1,
    )


def test_records_every_attention_call_of_llama():
    model = _tiny_llama()
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(0))
    pad = torch.ones(2, 12, dtype=torch.long)
    pad[0, :3] = 0
    with shadow(candidate="torch-sdpa", reference="golden", model=model) as rec:
        model(input_ids=ids, attention_mask=pad, labels=ids).loss.backward()
        rec.next_step()
        model(input_ids=ids)
    n_layers = model.config.num_hidden_layers
    assert len(rec.records) == 2 * n_layers
    assert [r["layer"] for r in rec.records] == list(range(n_layers)) * 2
    assert [r["step"] for r in rec.records] == [0] * n_layers + [1] * n_layers
    assert rec.records[0]["module"] == "model.layers.0.self_attn"
    assert rec.records[0]["k_shape"][1] in (2, 4)  # GQA: 2 KV heads (or repeated to 4 by transformers)
    # fp32 torch SDPA vs float64 golden: within a few hundred fp32 ulps of O(1) outputs
    assert all(r["metrics"]["max_abs"] < 256 * torch.finfo(torch.float32).eps for r in rec.records)
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_records_every_attention_call_of_diffusers_unet():
    unet = _tiny_unet()
    n_attn = len(unet.attn_processors)
    x = torch.randn(1, 4, 8, 8)
    enc = torch.randn(1, 5, 32)
    with shadow(candidate="flash:fp32", reference="golden", model=unet) as rec:
        unet(x, 3, encoder_hidden_states=enc).sample.sum().backward()
    assert n_attn == 8 and len(rec.records) == n_attn
    assert {r["module"].rsplit(".", 1)[-1] for r in rec.records} == {"attn1", "attn2"}
    assert all(r["metrics"]["max_abs"] < 256 * torch.finfo(torch.float32).eps for r in rec.records)


def test_diffusers_processors_route_through_recorder_with_layer_names():
    from attnum.integrations.diffusers import set_processors

    unet = _tiny_unet()
    x, enc = torch.randn(1, 4, 8, 8), torch.randn(1, 5, 32)
    want = unet(x, 3, encoder_hidden_states=enc).sample
    with shadow(candidate="eager", reference="golden") as rec:
        n = set_processors(unet, rec.sdpa)
        got = unet(x, 3, encoder_hidden_states=enc).sample
    assert len(rec.records) == n
    assert rec.records[0]["module"] == "down_blocks.0.attentions.0.transformer_blocks.0.attn1"
    assert [r["layer"] for r in rec.records] == [0, 0, 0, 0, 1, 1, 1, 1]  # first integer of the path
    # eager vs torch's fp32 SDPA: a few fp32 ulps per layer (6.5 measured), bound 64 ulps of the max
    tol = 64 * torch.finfo(torch.float32).eps * float(want.detach().abs().max())
    assert float((got - want).detach().abs().max()) <= tol


def test_multihead_attention_inner_call_is_recorded_and_output_kept():
    mha = torch.nn.MultiheadAttention(16, 2, batch_first=True)
    x = torch.randn(2, 5, 16)
    kpm = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    want, want_w = mha(x, x, x, key_padding_mask=kpm)
    with shadow(candidate="eager", reference="golden", model=mha) as rec:
        got, got_w = mha(x, x, x, key_padding_mask=kpm)
    assert len(rec.records) == 1 and rec.records[0]["kind"] == "mha" and rec.records[0]["has_mask"]
    tol = 64 * torch.finfo(torch.float32).eps
    assert float((got - want).detach().abs().max()) <= tol * float(want.detach().abs().max())
    assert float((got_w - want_w).detach().abs().max()) <= tol


def test_transformer_encoder_layers_each_recorded():
    layer = torch.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, batch_first=True, dropout=0.0)
    enc = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    with shadow(candidate="eager", reference="golden", model=enc) as rec:
        enc(torch.randn(2, 5, 16))
    assert [r["module"] for r in rec.records] == ["layers.0.self_attn", "layers.1.self_attn"]
    assert [r["layer"] for r in rec.records] == [0, 1]


def test_propagate_reference_returns_reference_output():
    q, k, v = (torch.randn(1, 2, 7, 8) for _ in range(3))
    fn = torch.nn.functional.scaled_dot_product_attention
    with shadow(candidate="flash:uniform:bf16", reference="eager", propagate="reference") as rec:
        out = fn(q, k, v, is_causal=True)
    from attnum.attention.eager import eager_attention

    assert torch.equal(out, eager_attention(q, k, v, is_causal=True))
    assert rec.records[0]["metrics"]["max_abs"] > 0  # bf16 candidate differs, and it was measured


def test_store_receives_records(tmp_path):
    class Sink:
        def __init__(self):
            self.got = []

        def add_records(self, records):
            self.got.extend(records)

    sink = Sink()
    q = torch.randn(1, 1, 4, 4)
    with shadow(store=sink):
        torch.nn.functional.scaled_dot_product_attention(q, q, q)
    path = tmp_path / "records.jsonl"
    with shadow(store=path):
        torch.nn.functional.scaled_dot_product_attention(q, q, q)
    assert len(sink.got) == 1 and len(path.read_text().splitlines()) == 1
    assert json.loads(path.read_text())["metrics"]["max_abs"] >= 0


def test_hf_attention_interface_keeps_the_mask():
    from attnum.integrations import hf

    model = _tiny_llama()
    hf.register("attnum-reimpl", "flash:fp32")
    ids = torch.randint(0, 64, (1, 10), generator=torch.Generator().manual_seed(1))
    changed = ids.clone()
    changed[0, -1] = (changed[0, -1] + 1) % 64
    with torch.no_grad():
        model.set_attn_implementation("eager")
        want = model(input_ids=ids).logits
        model.set_attn_implementation("attnum-reimpl")
        got = model(input_ids=ids).logits
        got_changed = model(input_ids=changed).logits
    tol = 256 * torch.finfo(torch.float32).eps * float(want.abs().max())
    assert float((got - want).abs().max()) <= tol
    # causal mask applied: the first 9 positions do not see the last token
    assert torch.equal(got[0, :9], got_changed[0, :9])
    model(input_ids=ids, labels=ids).loss.backward()  # trainable through the recomputing backward
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    with pytest.raises(ValueError, match="flash"):
        hf.register("my-flash", "eager")
