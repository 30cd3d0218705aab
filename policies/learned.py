"""A learned adaptive policy: a small network trained on oracle actions decides READ/WRITE.

    load_policy("learned:threshold=0.5")             # the policy shipped with the default model
    load_policy("learned:threshold=0.3,path=my.pt")  # one trained by `simulmt train-policy`

The network (`simulmt.policies.learned_net`) reads the decoder state of the best hypothesis,
the next-token entropy and top probability, the words read, the target units written (words
with word writes, tokens with `--unit token`: train the policy with the same `--unit`, as its
oracle walks that unit), whether the source is finished and, if it was trained with them, the
next token's cross-attention features (AlignAtt's signal), and gives P(WRITE). The policy
WRITEs when P(WRITE) >= threshold, so one network spans the latency range: a low threshold
writes early, a high one waits.
Like the other adaptive policies it WRITEs once the source is finished and READs before
`k_min` words; `k_max` > 0 bounds the lag: it WRITEs whenever wait-k_max would
(src_read >= k_max + tgt_written); `lag_min` bounds it from below: it READs whenever
wait-lag_min would (src_read < lag_min + tgt_written). With both, the network only chooses
within the band between wait-lag_min and wait-k_max. A policy checkpoint belongs to the
translation model it was trained with; one that does not fit the model's signals (state
size, vocabulary) is refused.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import torch
from simulmt.policies.base import (
    Action,
    Observation,
    PolicyError,
    Signal,
    lag_bounds,
)
from simulmt.policies.learned_net import (
    TRAIN_HINT,
    PolicyNet,
    net_from_checkpoint,
    policy_features,
    read_policy_file,
)
from simulmt.policies.spec import BasePolicy

POLICY_FILE = "policy.pt"  # the policy shipped beside a model's model.pt
DEFAULT_PATH = "default"  # spec value meaning POLICY_FILE in the default model folder


def resolve_path(path: str) -> Path:
    """The checkpoint file a `path=` argument names ("default": the default model's policy)."""
    if path == DEFAULT_PATH:
        from simulmt.engine import default_model_dir

        return default_model_dir() / POLICY_FILE
    return Path(path).expanduser()


@functools.lru_cache(maxsize=8)
def _load(path: str, mtime_ns: int, size: int) -> PolicyNet:
    """Keyed by the file's identity, so a retrained checkpoint is reloaded."""
    return net_from_checkpoint(Path(path), read_policy_file(Path(path)))


def load_net(path: Path) -> PolicyNet:
    """The network of a policy checkpoint, loaded once per file version (shared, eval mode)."""
    try:
        stat = path.stat()
    except OSError:
        raise PolicyError(f"no policy checkpoint at {path}; {TRAIN_HINT}") from None
    return _load(str(path.resolve()), stat.st_mtime_ns, stat.st_size)


@dataclass(frozen=True)
class LearnedPolicy(BasePolicy):
    """WRITE when a network trained on oracle READ/WRITE actions gives P(WRITE) >= threshold.

    Its signals: the decoder state and the distribution, plus the cross-attention (instance
    `needs`) when the checkpoint was trained with attention features (`simulmt train-policy
    --attention`).
    """

    name: ClassVar[str] = "learned"
    needs: ClassVar[frozenset[Signal]] = frozenset({Signal.DISTRIBUTION, Signal.DECODER_STATE})
    needs_note: ClassVar[str] = "+ attention with a checkpoint trained on attention features"
    paper: ClassVar[str] = ("Zheng, Zheng, Ma & Huang 2019, Simpler and Faster Learning of "
                            "Adaptive Policies for Simultaneous Translation, EMNLP "
                            "(arXiv:1909.01559); word-level oracle, GAIN and word-end rules "
                            "are ours")

    # 0.5: the net is trained class-balanced, so 0.5 is its unbiased boundary; sweep it
    threshold: float = field(default=0.5, metadata={
        "help": "minimum P(WRITE) to WRITE (0 < p < 1); higher waits longer"})
    k_min: int = field(default=1, metadata={
        "help": "source words always read before the first write (>= 1)"})
    k_max: int = field(default=0, metadata={  # 0: the network alone decides
        "help": "maximum lag: WRITE whenever src_read >= k_max + tgt_written (0: no bound)"})
    # 1: never ahead of wait-1 (word i needs i source words), as alignatt. On dev (README,
    # "Adaptive policies at word level") it raised ΔBLEU against wait-k at matched AL by 0.7
    # to 1.6 at every threshold tried: alone the network sometimes writes on (hallucinates)
    # well ahead of the source
    lag_min: int = field(default=1, metadata={
        "help": "minimum lag: READ whenever src_read < lag_min + tgt_written, i.e. never run "
                "ahead of wait-lag_min (0: no bound)"})
    path: str = field(default=DEFAULT_PATH, metadata={
        "help": f"policy checkpoint from `simulmt train-policy` ({DEFAULT_PATH}: "
                f"{POLICY_FILE} in the default model folder)"})
    net: PolicyNet | None = field(default=None, init=False, repr=False, compare=False)

    def validate(self) -> None:
        if not 0 < self.threshold < 1:
            raise PolicyError(f"threshold must be in (0, 1) (got {self.threshold})")
        if self.k_min < 1:
            raise PolicyError(f"k_min must be >= 1 (got {self.k_min})")
        if self.k_max != 0 and self.k_max < self.k_min:
            raise PolicyError(f"k_max must be 0 (no bound) or >= k_min={self.k_min} "
                              f"(got {self.k_max})")
        if self.lag_min < 0:
            raise PolicyError(f"lag_min must be >= 0 (0: no bound) (got {self.lag_min})")
        if self.k_max and self.lag_min > self.k_max:
            raise PolicyError(f"lag_min must be <= k_max={self.k_max} (got {self.lag_min})")
        net = load_net(resolve_path(self.path))
        object.__setattr__(self, "net", net)
        if net.cfg.attention:  # per instance: only such a net makes the search return attention
            object.__setattr__(self, "needs", type(self).needs | {Signal.ATTENTION})

    def decide(self, obs: Observation) -> Action:
        bound = lag_bounds(obs, k_min=self.k_min, k_max=self.k_max, lag_min=self.lag_min)
        if bound is not None:
            return bound
        return Action.WRITE if self.write_prob(obs) >= self.threshold else Action.READ

    def write_prob(self, obs: Observation) -> float:
        """The network's P(WRITE) for an observation that carries the signals it needs."""
        net = self.net
        assert net is not None  # set by validate()
        state, log_probs, attention = _signals(obs, net)
        feats = policy_features(
            state.unsqueeze(0), log_probs.unsqueeze(0), torch.tensor([obs.src_read]),
            torch.tensor([obs.tgt_written]), torch.tensor([float(obs.source_finished)]),
            None if attention is None else attention.unsqueeze(0),
        )  # (1, F)
        return float(net.write_prob(feats)[0])


def _signals(
    obs: Observation, net: PolicyNet
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(decoder_state (D,), log_probs (V,), word attention (W,) if the net reads it), checked
    against what the network was trained on."""
    signals = obs.signals
    if signals is None or signals.log_probs is None or signals.decoder_state is None:
        raise PolicyError("policy 'learned' needs Signal.DISTRIBUTION and Signal.DECODER_STATE, "
                          "but the observation lacks signals.log_probs or signals.decoder_state; "
                          "the search must compute policy.needs")
    state, log_probs = signals.decoder_state, signals.log_probs
    cfg = net.cfg
    if tuple(state.shape) != (cfg.d_state,) or tuple(log_probs.shape) != (cfg.vocab_size,):
        raise PolicyError(
            f"policy 'learned': the checkpoint was trained for a model with decoder states of "
            f"size {cfg.d_state} and {cfg.vocab_size} tokens, but got decoder_state "
            f"{tuple(state.shape)} and log_probs {tuple(log_probs.shape)}; pass path= to a "
            f"policy trained for this model ({TRAIN_HINT})")
    if not cfg.attention:
        return state, log_probs, None
    attention = signals.attention
    if attention is None or tuple(attention.shape) != (obs.src_read,) or obs.src_read < 1:
        raise PolicyError("policy 'learned': this checkpoint reads cross-attention, so it needs "
                          "Signal.ATTENTION of shape (src_read,) with src_read >= 1, got "
                          f"{None if attention is None else tuple(attention.shape)} at src_read="
                          f"{obs.src_read}; the search must compute policy.needs")
    return state, log_probs, attention
