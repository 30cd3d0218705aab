"""Model FLOPs of training steps, for throughput and model FLOPs utilisation (MFU) figures.

A step costs 3 x its forward pass (backward = 2 x forward), counting the matrix products the
real (unpadded) tokens need, as MFU is usually reported (PaLM, app. B):

    forward = 2 * [S * (L_enc (4d^2 + 2 d f) + L_dec 2d^2)       encoder, cross-attention K/V
                   + T * (L_dec (6d^2 + 2 d f) + d V)]           decoder, output projection
              + 4 d [L_enc S^2 + L_dec (T^2 + T S)]              attention scores and mixing

per sentence of S source and T target tokens (target + EOS). Padding, softmax, norms and the
optimizer are left out, so MFU understates what the device does, never overstates it.
"""

from __future__ import annotations

from collections.abc import Iterable

from simulmt.model.config import ModelConfig

H100_BF16_TFLOPS = 989.0  # dense bf16 of an H100/H200 SXM (NVIDIA's datasheet)


def step_flops(m: ModelConfig, lengths: Iterable[tuple[int, int]]) -> float:
    """Model FLOPs of one training step over sentences of (source, target) token lengths."""
    d, f = m.d_model, m.d_ff
    per_src = m.enc_layers * (4 * d * d + 2 * d * f) + m.dec_layers * 2 * d * d
    per_tgt = m.dec_layers * (6 * d * d + 2 * d * f) + d * m.vocab_size
    total = 0.0
    for s, t in lengths:
        linear = s * per_src + t * per_tgt
        attention = 2 * d * (m.enc_layers * s * s + m.dec_layers * (t * t + t * s))
        total += 2 * linear + 2 * attention
    return 3 * total
