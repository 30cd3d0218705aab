"""Shared test setup: one torch thread (deterministic, and fast for tiny models on 2 cores)."""

from __future__ import annotations

import torch

torch.set_num_threads(1)
