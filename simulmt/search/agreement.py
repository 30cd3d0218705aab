"""The commit rule of re-translation (LocalAgreement, Liu et al. 2020; Polák et al. 2022).

After every re-decoding of the source prefix, the search commits the longest prefix that the
last n hypotheses agree on, cut back to a word boundary (a committed word is never extended).
n is the policy's to declare (`AgreementPolicy.agreement`; LocalAgreement's `n`), and so is
how many source words it reads between re-decodings (`ChunkedPolicy.chunk`).
"""

from __future__ import annotations

from collections.abc import Sequence

from simulmt.data.tokenizer import Tokenizer
from simulmt.policies.base import DEFAULT_AGREEMENT, AgreementPolicy, ChunkedPolicy, Policy


def agreement(policy: Policy) -> int:
    """Consecutive hypotheses that must agree on a prefix before it is committed."""
    return policy.agreement if isinstance(policy, AgreementPolicy) else DEFAULT_AGREEMENT


def chunk(policy: Policy) -> int:
    """Source words a re-translation policy reads between re-decodings (1 unless it says)."""
    return policy.chunk if isinstance(policy, ChunkedPolicy) else 1


def agreed_prefix(history: Sequence[tuple[int, ...]], n: int, tok: Tokenizer) -> int:
    """Tokens that the last `n` hypotheses of `history` agree on, ending on a word boundary
    in all of them (0 while fewer than n hypotheses exist)."""
    if len(history) < n:
        return 0
    return _agreed_words(list(history[-n:]), tok)


def _agreed_words(hyps: list[tuple[int, ...]], tok: Tokenizer) -> int:
    """Tokens of the longest common prefix of `hyps` that ends on a word boundary in all of them."""
    lcp = 0
    while all(len(h) > lcp for h in hyps) and len({h[lcp] for h in hyps}) == 1:
        lcp += 1
    if all(len(h) > lcp and tok.is_word_start(h[lcp]) for h in hyps):
        return lcp
    while lcp > 0 and not tok.is_word_start(hyps[0][lcp - 1]):
        lcp -= 1
    return max(lcp - 1, 0) if lcp > 0 else 0
