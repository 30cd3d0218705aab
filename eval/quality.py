"""Translation quality: sacreBLEU's corpus BLEU and chrF, each with its signature."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF

__all__ = ["QualityConfig", "QualityScores", "corpus_quality"]


@dataclass(frozen=True)
class QualityConfig:
    tokenize: str = "13a"  # sacreBLEU's default BLEU tokenizer (WMT standard)
    lowercase: bool = False  # case-sensitive, like sacreBLEU's default


@dataclass(frozen=True)
class QualityScores:
    bleu: float
    chrf: float
    bleu_signature: str  # e.g. nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0
    chrf_signature: str
    bleu_detail: str  # the full sacreBLEU line: n-gram precisions, BP, lengths


def corpus_quality(
    hypotheses: Sequence[str], references: Sequence[str], *, config: QualityConfig | None = None
) -> QualityScores:
    """Corpus BLEU and chrF of detokenized ``hypotheses`` against one reference each.

    Empty hypotheses stay in (they score zero matches); lines are stripped of surrounding
    whitespace (a trailing newline would otherwise reach the tokenizer).
    """
    if len(hypotheses) != len(references):
        raise ValueError(
            f"{len(hypotheses)} hypotheses but {len(references)} references: need one each"
        )
    if not hypotheses:
        raise ValueError("no sentences to score")
    config = config or QualityConfig()
    hyps = [h.strip() for h in hypotheses]
    refs = [[r.strip() for r in references]]
    bleu = BLEU(tokenize=config.tokenize, lowercase=config.lowercase)
    chrf = CHRF(lowercase=config.lowercase)
    b = bleu.corpus_score(hyps, refs)
    c = chrf.corpus_score(hyps, refs)
    return QualityScores(
        bleu=b.score,
        chrf=c.score,
        bleu_signature=str(bleu.get_signature()),
        chrf_signature=str(chrf.get_signature()),
        bleu_detail=str(b),
    )
