"""The model signals a policy asks for (`Policy.needs`), cut from a decoder step's result.

Only what the policy lists is filled in; the search asks the step for cross-attention only
when the coverage penalty or a policy needs it (`wants_attention`).
"""

from __future__ import annotations

import torch

from simulmt.model.state import SourceState
from simulmt.policies.base import ModelSignals, Policy, Signal
from simulmt.search.options import SearchOptions
from simulmt.search.step import StepResult


def wants_attention(policy: Policy, opts: SearchOptions) -> bool:
    """Whether decoder steps must return cross-attention weights."""
    return opts.needs_attention or Signal.ATTENTION in policy.needs


def word_attention(attention: torch.Tensor, ends: list[int], words: int) -> torch.Tensor:
    """attention: (S,) weights over source tokens -> (words,) their sum per source word.

    `ends[w]` is the number of source tokens up to the end of word w (SourceState.ends). The
    weights beyond the first `words` words are zero (the decoder could not see them), so the
    result sums to the row's total mass (1 for a softmax row).
    """
    if words < 1:
        return attention.new_zeros(0)  # (0,)
    bounds = torch.tensor(ends[:words], dtype=torch.long).view(1, words)  # (1, W)
    return per_word_attention(attention.view(1, 1, -1), bounds).view(words)  # (W,)


def per_word_attention(attention: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """attention (A, T, S) over source tokens, ends (A, W) tokens through each of the first W
    words of row a -> (A, T, W) the mass per word. Batched `word_attention` (the policy
    oracle records what the search gives a policy, many states at once)."""
    cum = torch.cumsum(attention.double(), dim=-1)  # (A, T, S)
    index = (ends - 1).unsqueeze(1).expand(-1, attention.shape[1], -1)  # (A, T, W)
    totals = cum.gather(-1, index)  # (A, T, W) mass up to the end of each word
    first = totals.new_zeros(*totals.shape[:2], 1)  # (A, T, 1)
    return torch.diff(totals, dim=-1, prepend=first).float()  # (A, T, W)


def model_signals(
    policy: Policy, res: StepResult, source: SourceState, words_read: int
) -> ModelSignals:
    """The signals of the best hypothesis (row 0) that `policy.needs`."""
    needs = policy.needs
    attention = None
    if Signal.ATTENTION in needs:
        attn = res.attention  # (Bm, S)
        if attn is None:
            raise ValueError("the policy needs Signal.ATTENTION but the step returned none")
        attention = word_attention(attn[0], source.ends, words_read)  # (W,)
    return ModelSignals(
        log_probs=res.log_probs[0] if Signal.DISTRIBUTION in needs else None,
        peek_log_probs=res.peek_log_probs,
        decoder_state=res.state[0] if Signal.DECODER_STATE in needs else None,
        attention=attention,
    )
