"""Model hyper-parameters."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 8000  # joint de+en sentencepiece vocabulary (tokenizer default)
    d_model: int = 256  # small enough to train on 2 CPU cores in hours
    n_heads: int = 4  # head dim 64, the usual size
    enc_layers: int = 4  # unidirectional encoder: READ costs one position per layer
    dec_layers: int = 4
    d_ff: int = 1024  # 4 x d_model, as in the base Transformer
    dropout: float = 0.1
    max_len: int = 512  # longest source or target in tokens; longer input is refused
    tie_embeddings: bool = True  # joint vocabulary: one table for source, target and output

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        for name in ("vocab_size", "d_model", "n_heads", "enc_layers", "dec_layers", "d_ff"):
            if getattr(self, name) < 1:
                raise ValueError(f"ModelConfig.{name} must be >= 1, got {getattr(self, name)}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(
                f"unknown model config keys {sorted(unknown)}; accepted: {sorted(known)}"
            )
        return cls(**data)
