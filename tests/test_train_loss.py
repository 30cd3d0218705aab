"""The training loop's own loss and dropout are drop-in replacements for PyTorch's: the same
loss value and gradient as `F.cross_entropy`, and dropout with the same distribution."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from simulmt.model.layers import Dropout
from simulmt.train import loss as loss_module
from simulmt.train.loss import smoothed_cross_entropy


def _both(logits: torch.Tensor, target: torch.Tensor, eps: float
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    a = logits.clone().requires_grad_()
    want = F.cross_entropy(a.float(), target, ignore_index=0, label_smoothing=eps,
                           reduction="sum")
    want.backward()
    b = logits.clone().requires_grad_()
    got = smoothed_cross_entropy(b, target, smoothing=eps, ignore_index=0)
    got.backward()
    assert a.grad is not None and b.grad is not None
    return want, got, a.grad, b.grad


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(1, 40), vocab=st.integers(2, 50), eps=st.sampled_from([0.0, 0.1, 0.3]),
       seed=st.integers(0, 10_000), chunk=st.integers(1, 16))
def test_value_and_gradient_match_cross_entropy(rows: int, vocab: int, eps: float, seed: int,
                                                chunk: int) -> None:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=g, dtype=torch.float64) * 4
    target = torch.randint(0, vocab, (rows,), generator=g)  # 0 = padding, ignored
    old = loss_module.CHUNK_ROWS
    loss_module.CHUNK_ROWS = chunk  # chunk edges anywhere, also mid-batch
    try:
        want, got, gw, gg = _both(logits.float(), target, eps)
    finally:
        loss_module.CHUNK_ROWS = old
    assert got.item() == pytest.approx(want.item(), rel=1e-5, abs=1e-5)
    torch.testing.assert_close(gg, gw, rtol=1e-5, atol=1e-6)


def test_bfloat16_logits_get_a_bfloat16_gradient_within_its_rounding() -> None:
    g = torch.Generator().manual_seed(1)
    logits = (torch.randn(300, 1000, generator=g) * 3).bfloat16()
    target = torch.randint(0, 1000, (300,), generator=g)
    want, got, gw, gg = _both(logits, target, 0.1)
    assert gg.dtype == torch.bfloat16
    assert got.item() == pytest.approx(want.item(), rel=1e-5)
    assert (gg.float() - gw.float()).abs().max().item() <= 2e-3


def test_ignored_rows_get_no_loss_and_no_gradient() -> None:
    logits = torch.randn(4, 7)
    target = torch.tensor([3, 0, 0, 5])
    x = logits.clone().requires_grad_()
    smoothed_cross_entropy(x, target, smoothing=0.1, ignore_index=0).backward()
    assert x.grad is not None
    assert x.grad[1:3].abs().sum().item() == 0.0
    only = smoothed_cross_entropy(logits[[0, 3]], target[[0, 3]], smoothing=0.1, ignore_index=0)
    assert smoothed_cross_entropy(logits, target, smoothing=0.1,
                                  ignore_index=0).item() == pytest.approx(only.item())


def test_shapes_are_checked() -> None:
    with pytest.raises(ValueError, match=r"\(N, V\)"):
        smoothed_cross_entropy(torch.zeros(2, 3, 4), torch.zeros(2, 3, dtype=torch.long),
                               smoothing=0.1, ignore_index=0)


def test_dropout_is_identity_in_eval_and_keeps_the_mean_in_training() -> None:
    drop = Dropout(0.25)
    x = torch.ones(200, 500)
    assert torch.equal(drop.eval()(x), x)
    torch.manual_seed(0)
    y = drop.train()(x)
    zeros = (y == 0).float().mean().item()
    assert zeros == pytest.approx(0.25, abs=0.01)  # 100,000 draws
    assert torch.unique(y).tolist() == [0.0, pytest.approx(1 / 0.75)]
    assert y.mean().item() == pytest.approx(1.0, abs=0.02)
    z = torch.ones(3, 4, requires_grad=True)
    out = drop(z)
    out.sum().backward()
    assert z.grad is not None
    assert torch.equal(z.grad, out.detach())  # survivors pass 1 / (1 - p), the dropped 0
    assert Dropout(0.0).train()(x) is x
