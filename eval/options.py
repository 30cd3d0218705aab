"""Options of a test-set simulation (no heavy imports: the CLI reads its defaults)."""

from __future__ import annotations

from dataclasses import dataclass

from simulmt.defaults import SEGMENT_LOOKAHEAD
from simulmt.input.kinds import InputKind
from simulmt.input.sentences import Segmentation
from simulmt.search.options import PrematureStops, Scoring, SearchOptions, WriteUnit

__all__ = ["RunConfig"]


@dataclass(frozen=True)
class RunConfig:
    beam: int = 1  # greedy, the usual simultaneous setting; >1 runs the online beam search
    # lines in flight together (per job): amortizes per-step overhead; 160-384 measured equal,
    # 512 15% slower (a wider pool to grow and scan; bench/RESULTS.md)
    batch_size: int = 256
    jobs: int = 1  # worker processes, each simulating every jobs-th line on one thread (fork)
    scoring: Scoring = SearchOptions.scoring  # how the beam ranks hypotheses of different length
    alpha: float = SearchOptions.alpha  # GNMT length-normalization exponent
    beta: float = SearchOptions.beta  # GNMT coverage penalty weight (0: off)
    # speculative beam search: commit once the beam agrees or is this many tokens deep
    speculate: int = SearchOptions.speculate
    unit: WriteUnit = SearchOptions.unit  # what one WRITE writes: a word (default) or a token
    # ban 3rd copies of token cycles up to this long (0: off)
    loop_guard: int = SearchOptions.loop_guard
    # a sentence end before the source sentence is finished (simulmt.search.stops)
    premature_stops: PrematureStops = SearchOptions.premature_stops
    # the bonus for the source's name pieces (simulmt.search.names; 0: off)
    copy_bonus: float = SearchOptions.copy_bonus
    # what ends a sentence inside a line or document: punctuation keeps sentence-level results
    # comparable with earlier runs; auto (the boundary detector) is for unpunctuated streams
    segmentation: Segmentation = Segmentation.PUNCTUATION
    # auto: words the detector reads past a boundary before deciding
    segment_lookahead: int = SEGMENT_LOOKAHEAD
    # hesitation sounds ("äh", "hm") never reach the model, as in `serve`; delays still count
    # them (they are input words the speaker took time to say)
    drop_fillers: bool = True
    # numbers copied in the source's notation are written in the target's ("2.100" -> "2,100"),
    # as in `serve`
    localise_numbers: bool = True
    # recognizer: the source lines are recognizer words, restored (case, commas) before the
    # model reads them, each word once `restore_lookahead` more have arrived (None: 2 for the
    # full-sentence policy, where waiting costs nothing, else 0; `make_restorer`)
    input_kind: InputKind = InputKind.TEXT
    restore_lookahead: int | None = None

    def search_options(self) -> SearchOptions:
        return SearchOptions(
            beam=self.beam, scoring=self.scoring, alpha=self.alpha, beta=self.beta,
            speculate=self.speculate, unit=self.unit,
            loop_guard=self.loop_guard, premature_stops=self.premature_stops,
            copy_bonus=self.copy_bonus,
        )

    def __post_init__(self) -> None:
        if self.segment_lookahead < 0:
            raise ValueError(f"segment_lookahead must be >= 0, got {self.segment_lookahead}")
        if self.restore_lookahead is not None and self.restore_lookahead < 0:
            raise ValueError(f"restore_lookahead must be >= 0, got {self.restore_lookahead}")
        for name in ("beam", "batch_size", "jobs"):
            value = getattr(self, name)
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if self.loop_guard < 0:
            raise ValueError(f"loop_guard must be >= 0 (0 = off), got {self.loop_guard}")
        if self.speculate < 1:
            raise ValueError(f"speculate must be >= 1 (1: commit the best next token), got "
                             f"{self.speculate}")
        if self.beta < 0:
            raise ValueError(f"the coverage penalty weight must be >= 0 (0 = off), got {self.beta}")
