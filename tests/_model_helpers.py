"""Models the tests share: doctored ones for the search tests, seeded layers, a tiny model
folder. Not a test module; import it as `tests._model_helpers` (`pythonpath = ["."]` in
pyproject's pytest options)."""

from __future__ import annotations

from pathlib import Path

import torch

from simulmt.engine import Engine
from simulmt.model.checkpoint import save_checkpoint


def seeded_linear(seed: int, d_in: int, d_out: int, *, bias: bool = True) -> torch.nn.Linear:
    torch.manual_seed(seed)
    return torch.nn.Linear(d_in, d_out, bias=bias)


def save_tiny_folder(folder: Path, *, seed: int = 0) -> Path:
    """A model folder (model.pt with its tokenizer) holding the random tiny model `seed`."""
    engine = Engine.tiny(seed=seed)
    folder.mkdir(parents=True, exist_ok=True)
    save_checkpoint(
        folder / "model.pt",
        {
            "model_config": engine.model.cfg.to_dict(),
            "model": engine.model.state_dict(),
            "tokenizer": engine.tokenizer.to_bytes(),
            "meta": {"name": "tiny", "src": "de", "tgt": "en"},
        },
    )
    return folder


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
