"""The weights a server holds: the model's own and its variants, one Engine each.

A session picks its Engine once, at start, by what its words look like (`start.input`): a
speech recognizer's output reads best with the model's recognizer weights (a low-rank delta
stored beside the model, simulmt.model.delta) and written text with the model's own. Engines
share nothing but the folder they came from; the worker batches each Engine's sessions apart.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from simulmt.engine import Engine, default_model_dir
from simulmt.model.delta import RECOGNIZER, variant_names

__all__ = ["Engines"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Engines:
    default: Engine  # the model's own weights
    variants: Mapping[str, Engine] = field(default_factory=dict)  # variant name -> Engine

    @classmethod
    def load(cls, model_dir: Path | None = None, *, dtype: str = "float32") -> Engines:
        """The model and every variant stored beside it (each a full copy of the weights in
        memory: ~90 MB in float32 for the bundled model, a quarter in int8)."""
        folder = Path(model_dir) if model_dir is not None else default_model_dir()
        folder = folder if folder.is_dir() else folder.parent
        default = Engine.load(model_dir, dtype=dtype)
        names = variant_names(folder)
        variants = {n: Engine.load(model_dir, dtype=dtype, variant=n) for n in names}
        return cls(default, variants)

    def for_input(self, kind: str) -> Engine:
        """The Engine for a session whose words look like `kind` ("text" or "recognizer");
        recognizer input falls back to the model's own weights when it has no such variant
        (the model saw that view in training too)."""
        if kind == RECOGNIZER:
            return self.variants.get(RECOGNIZER, self.default)
        if kind != "text":
            raise ValueError(f"input {kind!r}: expected 'text' or 'recognizer'")
        return self.default
