"""Model FLOPs per training step: the count the throughput and MFU figures rest on."""

from __future__ import annotations

import torch

from simulmt.model.config import ModelConfig
from simulmt.model.transformer import SimulTransformer
from simulmt.train.flops import step_flops


def test_linear_flops_are_six_per_weight_and_token_when_attention_is_negligible() -> None:
    """With one-token sentences attention is a rounding error, and a step costs 6 FLOPs per
    weight a token passes through (2 forward, 4 backward): the encoder's weights for source
    tokens; the decoder's, the output projection's and the cross-attention K/V's for target
    tokens and source tokens respectively."""
    m = ModelConfig(vocab_size=100, d_model=16, n_heads=2, enc_layers=2, dec_layers=1, d_ff=32)
    model = SimulTransformer(m)
    enc = sum(p.numel() for n, p in model.encoder.named_parameters() if p.dim() == 2)
    dec = sum(p.numel() for n, p in model.decoder.named_parameters() if p.dim() == 2)
    cross_kv = 2 * 16 * 16 * m.dec_layers  # K and V projections of the source
    out = model.out_proj.weight.numel()
    s, t = 1000, 1000  # tokens over many one-token sentences
    got = step_flops(m, [(1, 1)] * s)
    linear = 6 * (s * (enc + cross_kv) + t * (dec - cross_kv + out))
    attention = 3 * 2 * 2 * 16 * (m.enc_layers * s + m.dec_layers * 2 * t)
    assert got == linear + attention
    assert torch.isclose(torch.tensor(got / linear), torch.tensor(1.0), atol=0.02)


def test_attention_grows_with_the_square_of_the_length() -> None:
    m = ModelConfig(vocab_size=100, d_model=16, n_heads=2, enc_layers=1, dec_layers=1, d_ff=32)
    short, long = step_flops(m, [(10, 10)] * 2), step_flops(m, [(20, 20)])
    assert long > short  # same tokens, longer sentences: more attention work
