"""Model doctoring the search tests share. Not a test module; import it as
`tests._model_helpers` (`pythonpath = ["."]` in pyproject's pytest options)."""

from __future__ import annotations

import torch


class Favour(torch.nn.Module):
    """An output layer that adds `boost` to one token's logit: a model that wants that token
    (a stop it writes whenever it can, a token it repeats)."""

    def __init__(self, inner: torch.nn.Module, token: int, boost: float) -> None:
        super().__init__()
        self.inner, self.token, self.boost = inner, token, boost

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        out = self.inner(h).clone()  # (..., V)
        out[..., self.token] += self.boost
        return out
