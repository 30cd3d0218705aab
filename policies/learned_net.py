"""The learned policy's network: features from the decoder, a small MLP, and its checkpoint file.

The same `policy_features` builds the input at training time (from oracle states, see
`simulmt.policies.oracle`) and at inference (from the search's `ModelSignals`), so the two
can never drift apart. Features of one decision (F = D + N_SCALARS [+ N_ATTENTION]):

- the top decoder layer's output for the best hypothesis (D values, after its LayerNorm),
- the next-token entropy (nats) and top probability,
- log(1 + source words read), log(1 + target tokens written), their difference in raw counts
  (the lag; words minus tokens, as the wait-k schedules of this project count),
- 1.0 if the source is finished else 0.0 (always 0.0 in training and at decisions: once the
  source is finished every policy WRITEs by rule, without asking the network),
- with `NetConfig.attention` (`simulmt train-policy --attention`), AlignAtt's signal: the
  next token's last-layer cross-attention mass on the last 1, 2 and 3 source words read, how
  many words before the end its most-attended word lies (log1p), and the attention's entropy
  over the words read. Attention says *where* the model looks for the next word; the
  distribution says *how sure* it is of it: a word aligned to the source's edge is a reason to
  wait that confidence alone does not show (Papi et al. 2023).

The network standardizes its input with the training set's mean/std (stored as buffers) and
outputs one logit: log-odds of WRITE.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch
from simulmt.policies.base import PolicyError
from torch import nn

from simulmt.model.torchfile import load_checked, save_atomic

FORMAT = "simulmt-policy-v1"
N_SCALARS = 6  # entropy, top prob, log1p(read), log1p(written), lag, source finished
SCALAR_NAMES = ("entropy", "top_prob", "log_read", "log_written", "lag", "finished")
N_ATTENTION = 5  # mass on the last 1/2/3 words, log1p(argmax's distance from the end), entropy
ATTENTION_NAMES = ("att_last1", "att_last2", "att_last3", "att_argmax_back", "att_entropy")
TRAIN_HINT = ("train one with `simulmt train-policy --model MODEL_DIR --data CORPUS_DIR "
              "--out FILE`")


def policy_features(
    state: torch.Tensor,
    log_probs: torch.Tensor,
    src_read: torch.Tensor,
    tgt_written: torch.Tensor,
    finished: torch.Tensor,
    word_attention: torch.Tensor | None = None,
) -> torch.Tensor:
    """state (N, D), log_probs (N, V), src_read/tgt_written/finished (N,), word_attention
    (N, W) or None -> features (N, D+6), or (N, D+6+5) with attention (`attention_features`)."""
    log_probs = log_probs.float()
    probs = log_probs.exp()  # (N, V)
    entropy = torch.special.entr(probs).sum(dim=-1)  # (N,) entr(0) = 0, so -inf log-probs are safe
    top = probs.max(dim=-1).values  # (N,)
    read, written = src_read.float(), tgt_written.float()
    scalars = torch.stack(
        [entropy, top, torch.log1p(read), torch.log1p(written), read - written, finished.float()],
        dim=-1,
    )  # (N, 6)
    parts = [state.float(), scalars]
    if word_attention is not None:
        parts.append(attention_features(word_attention, src_read))  # (N, 5)
    return torch.cat(parts, dim=-1)


def attention_features(word_attention: torch.Tensor, src_read: torch.Tensor) -> torch.Tensor:
    """word_attention (N, W): the next token's cross-attention summed per source word (row n's
    first src_read[n] words; zeros beyond), src_read (N,) >= 1 -> (N, 5): the mass on the last
    1, 2, 3 words read, log1p(src_read - 1 - most attended word), the entropy over words."""
    att = word_attention.float()
    w = att.shape[1]
    back = src_read.view(-1, 1) - 1 - torch.arange(w).view(1, -1)  # (N, W) words before the end
    inside = back >= 0  # (N, W) words read
    att = att * inside
    masses = [(att * (inside & (back < m))).sum(dim=-1) for m in (1, 2, 3)]  # 3 x (N,)
    argmax = torch.where(inside, att, torch.full_like(att, -1.0)).argmax(dim=-1)  # (N,)
    dist = (src_read - 1 - argmax).clamp(min=0).float()  # (N,)
    entropy = torch.special.entr(att).sum(dim=-1)  # (N,)
    return torch.stack([*masses, torch.log1p(dist), entropy], dim=-1)  # (N, 5)


@dataclass(frozen=True)
class NetConfig:
    d_state: int  # decoder state size D of the translation model it was trained with
    vocab_size: int  # the translation model's vocabulary (checked against log_probs)
    hidden: int = 64  # small: the decision is mostly entropy/lag; 64 leaves room for the state
    layers: int = 2  # hidden layers
    dropout: float = 0.1  # oracle labels are noisy; a little dropout keeps the net smooth
    # reads the cross-attention features too (False: checkpoints from before they existed)
    attention: bool = False
    # reads the decoder state (D values); without it only the scalars (and attention) decide:
    # far fewer inputs for tens of thousands of oracle states, which the state overfits
    state: bool = True

    def __post_init__(self) -> None:
        for name in ("d_state", "vocab_size", "hidden", "layers"):
            if getattr(self, name) < 1:
                raise ValueError(f"NetConfig.{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"NetConfig.dropout must be in [0, 1), got {self.dropout}")

    @property
    def n_features(self) -> int:
        return self.d_state + N_SCALARS + (N_ATTENTION if self.attention else 0)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NetConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown net config keys {sorted(unknown)}; "
                             f"accepted: {sorted(known)}")
        return cls(**data)


class PolicyNet(nn.Module):
    """features (N, F) -> WRITE logits (N,). Holds weights only."""

    mean: torch.Tensor  # (F,) buffer: training-set feature means
    std: torch.Tensor  # (F,) buffer: training-set feature standard deviations

    def __init__(self, cfg: NetConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.register_buffer("mean", torch.zeros(cfg.n_features))
        self.register_buffer("std", torch.ones(cfg.n_features))
        layers: list[nn.Module] = []
        width = cfg.n_features - (0 if cfg.state else cfg.d_state)
        for _ in range(cfg.layers):
            layers += [nn.Linear(width, cfg.hidden), nn.GELU(), nn.Dropout(cfg.dropout)]
            width = cfg.hidden
        layers.append(nn.Linear(width, 1))
        self.mlp = nn.Sequential(*layers)

    def set_normalization(self, features: torch.Tensor) -> None:
        """Standardize inputs with the mean/std of `features` (N, F), the training set."""
        self.mean.copy_(features.mean(dim=0))
        self.std.copy_(features.std(dim=0).clamp(min=1e-4))  # constant features stay finite

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        x = (features - self.mean) / self.std  # (N, F)
        if not self.cfg.state:
            x = x[:, self.cfg.d_state:]  # (N, F - D) the scalars (and attention) only
        return self.mlp(x).squeeze(-1)  # (N,)

    @torch.no_grad()
    def write_prob(self, features: torch.Tensor) -> torch.Tensor:
        """P(WRITE) for features (N, F) -> (N,). Loaded nets are in eval mode (no dropout)."""
        return torch.sigmoid(self(features))


def save_policy(path: Path, net: PolicyNet, *, meta: dict[str, Any],
                resume: dict[str, Any] | None = None) -> None:
    """Write a policy checkpoint atomically: a dict of tensors and primitives, loadable with
    torch.load(weights_only=True)."""
    payload: dict[str, Any] = {"format": FORMAT, "net_config": asdict(net.cfg),
                               "net": net.state_dict(), "meta": meta}
    if resume is not None:
        payload["resume"] = resume
    save_atomic(path, payload)


def read_policy_file(path: Path) -> dict[str, Any]:
    """Load and check a policy checkpoint dict; PolicyError saying what is wrong otherwise."""
    return load_checked(path, fmt=FORMAT, keys=("net_config", "net", "meta"), error=PolicyError,
                        what="policy checkpoint", kind="learned-policy checkpoint", hint=TRAIN_HINT)


def net_from_checkpoint(path: Path, data: dict[str, Any] | None = None) -> PolicyNet:
    """Build the network a policy checkpoint describes and load its weights (eval mode)."""
    data = data if data is not None else read_policy_file(path)
    try:
        net = PolicyNet(NetConfig.from_dict(dict(data["net_config"])))
        net.load_state_dict(data["net"])
    except (TypeError, ValueError, RuntimeError) as e:
        raise PolicyError(f"policy checkpoint {path} does not describe a valid network: {e}; "
                          f"{TRAIN_HINT}") from None
    return net.eval()
