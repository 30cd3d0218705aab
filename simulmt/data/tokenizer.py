"""Joint sentencepiece tokenizer: training on the corpus and a small typed wrapper for the model.

Models are trained with identity normalization (the corpus is NFC already), a word-boundary marker
`▁` on every word (add_dummy_prefix) and pieces that never cross whitespace (split_by_whitespace),
so a sentence's tokens could be the concatenation of its words' tokens. Raw sentencepiece breaks
ties between equal-score segmentations differently inside a sentence and alone (on the real dev
set "Edit...." at a sentence end: 1 of 10,156 sentences), so `Tokenizer.encode` *defines* the
tokens of a text as the concatenation of `encode_word` over its space-separated words, which makes
`encode(s) == [i for w in s.split(" ") if w for i in encode_word(w)]` hold for every text whose only
whitespace is the ASCII space (sentencepiece treats other whitespace, e.g. tabs, as characters).
Runs of spaces and leading/trailing spaces vanish, as in sentencepiece. With byte fallback
(default for vocabularies of 1024 and more) characters unseen in training become byte pieces, so
`decode(encode(s)) == s` holds for every normalized string (NFC, single spaces, stripped); without
it they become UNK and decode to " ⁇ ".
"""

from __future__ import annotations

import enum
import hashlib
import io
import itertools
import json
import logging
import math
import os
import random
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import sentencepiece as spm

from simulmt.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID

logger = logging.getLogger(__name__)

WORD_START = "\u2581"  # ▁, sentencepiece's word-boundary marker
MODEL_FILE = "spm.model"
SETTINGS_FILE = "spm.json"
BYTE_FALLBACK_MIN_VOCAB = 1024  # 256 byte pieces only pay off in a vocabulary this large
MAX_THREADS = 2  # the machines have two cores
WORD_MEMO_SIZE = 1 << 16  # words whose tokens are remembered (cleared when full)
SAMPLE_NBEST = 16  # splits per word that subword sampling draws among (64 adds little)


class ModelType(enum.Enum):
    UNIGRAM = "unigram"
    BPE = "bpe"


class TokenizerError(RuntimeError):
    """A tokenizer model is missing, corrupt, or not one this project trains."""


class Tokenizer:
    """A loaded sentencepiece model with the project's special ids (pad 0, unk 1, bos 2, eos 3)."""

    def __init__(self, processor: spm.SentencePieceProcessor, proto: bytes, origin: str) -> None:
        expected = {"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID}
        actual = {"pad": processor.pad_id(), "unk": processor.unk_id(),
                  "bos": processor.bos_id(), "eos": processor.eos_id()}
        if actual != expected:
            raise TokenizerError(f"{origin}: special ids {actual}, expected {expected}; "
                                 "train it with `simulmt data tokenizer`")
        self._sp = processor
        self._proto = proto
        self._words: dict[str, tuple[int, ...]] = {}  # encode_word memo (speech repeats words)
        # sample's memo: (word, alpha) -> its likely splits and cumulative weights
        self._nbest: dict[tuple[str, float], tuple[tuple[tuple[int, ...], ...],
                                                   tuple[float, ...]]] = {}
        self._word_start = [processor.id_to_piece(i).startswith(WORD_START)
                            and not processor.is_control(i)
                            for i in range(processor.get_piece_size())]

    @classmethod
    def load(cls, path: Path) -> Tokenizer:
        """Load `spm.model`; TokenizerError if it is missing or not a sentencepiece model."""
        path = Path(path)
        if not path.is_file():
            raise TokenizerError(f"tokenizer model {path} does not exist; "
                                 "train one with `simulmt data tokenizer --data DIR`")
        return cls._from_proto(path.read_bytes(), str(path))

    @classmethod
    def from_bytes(cls, model_proto: bytes) -> Tokenizer:
        return cls._from_proto(model_proto, "model bytes")

    @classmethod
    def _from_proto(cls, proto: bytes, origin: str) -> Tokenizer:
        processor = spm.SentencePieceProcessor()
        try:
            processor.LoadFromSerializedProto(proto)
        except (RuntimeError, OSError, TypeError) as err:
            raise TokenizerError(f"{origin} is not a valid sentencepiece model: {err}") from err
        return cls(processor, proto, origin)

    def to_bytes(self) -> bytes:
        return self._proto

    @property
    def vocab_size(self) -> int:
        return int(self._sp.get_piece_size())

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, without BOS/EOS: its space-separated words encoded one by one,
        each through the word memo (most words repeat: 40x faster than sentencepiece's batch
        call, which starts a thread pool per call; 148 s -> a few s for the 282k-pair corpus)."""
        out: list[int] = []
        for word in text.split(" "):
            if word:
                out += self._word_ids(word)
        return out

    def _word_ids(self, word: str) -> tuple[int, ...]:
        ids = self._words.get(word)
        if ids is None:
            if len(self._words) >= WORD_MEMO_SIZE:
                self._words.clear()
            ids = self._words[word] = tuple(self._sp.encode(word, out_type=int))
        return ids

    def encode_word(self, word: str, *, first: bool) -> list[int]:
        """Tokens of one whitespace-free word as it appears in running text (with the `▁` marker).

        `first` is accepted for symmetry: every word, the first included, carries the marker.
        """
        del first  # the dummy prefix gives the first word the same marker as any other
        if not word or any(ch.isspace() for ch in word):
            raise ValueError(f"encode_word takes one non-empty word without whitespace: {word!r}")
        return list(self._word_ids(word))

    def sample(self, text: str, *, alpha: float, rng: random.Random) -> list[int]:
        """One segmentation of `text` drawn at random (subword regularization, Kudo 2018):
        training on varied splits of a word teaches the model the pieces of words it rarely
        sees whole (names, compounds). Each word's split is drawn from its SAMPLE_NBEST best
        splits with probability proportional to P(split)^alpha under the unigram model (Kudo's
        n-best sampling; smaller alpha is flatter: at 0.3 a fifth of the training words are
        re-split, +16% tokens). The draws come from `rng`, so a seed repeats them in any process
        (sentencepiece's own sampler does not: its draws differed between two processes with
        the same seed). Word by word, as `encode`, so decode(sample(s)) == decode(encode(s))."""
        if alpha <= 0:
            raise ValueError(f"alpha={alpha}: sampling needs alpha > 0 (use encode for the "
                             "deterministic segmentation)")
        out: list[int] = []
        for word in text.split(" "):
            if word:
                splits, cumulative = self._splits(word, alpha)
                out += (splits[0] if len(splits) == 1
                        else rng.choices(splits, cum_weights=cumulative)[0])
        return out

    def _splits(self, word: str, alpha: float) -> tuple[tuple[tuple[int, ...], ...],
                                                        tuple[float, ...]]:
        """A word's likely splits and their cumulative sampling weights (memoised: a training
        corpus has ~500k distinct words, each split once)."""
        hit = self._nbest.get((word, alpha))
        if hit is None:
            splits = [tuple(ids) for ids in
                      self._sp.nbest_encode(word, out_type=int, nbest_size=SAMPLE_NBEST)]
            logp = [sum(self._sp.get_score(i) for i in ids) for ids in splits]
            best = max(logp)
            weights = [math.exp(alpha * (lp - best)) for lp in logp]
            kept = [(ids, w) for ids, w in zip(splits, weights, strict=True) if w >= 1e-3]
            hit = (tuple(ids for ids, _ in kept),
                   tuple(itertools.accumulate(w for _, w in kept)))
            self._nbest[(word, alpha)] = hit
        return hit

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._sp.decode(list(ids)))

    def is_word_start(self, token_id: int) -> bool:
        """True if the piece begins with `▁` (starts a new word)."""
        return 0 <= token_id < len(self._word_start) and self._word_start[token_id]

    def piece(self, token_id: int) -> str:
        return str(self._sp.id_to_piece(token_id))


def _trainer_options(vocab_size: int, model_type: str, character_coverage: float,
                     byte_fallback: bool) -> dict[str, Any]:
    return {
        "vocab_size": vocab_size,
        "model_type": model_type,
        "character_coverage": character_coverage,
        "normalization_rule_name": "identity",  # corpus is NFC; keep text byte-exact
        "add_dummy_prefix": True,
        "split_by_whitespace": True,
        "byte_fallback": byte_fallback,
        "hard_vocab_limit": False,  # tiny corpora cannot fill a large vocabulary
        "pad_id": PAD_ID, "unk_id": UNK_ID, "bos_id": BOS_ID, "eos_id": EOS_ID,
        "num_threads": MAX_THREADS,
        "input_sentence_size": 0,  # use every sentence: no sampling, so no randomness
        "shuffle_input_sentence": False,
        "max_sentence_length": 8192,
        "minloglevel": 2,
    }


def train_tokenizer(texts: Iterable[str], out_dir: Path, *, vocab_size: int = 8000,
                    model_type: str = "unigram", character_coverage: float = 1.0,
                    seed: int = 0, byte_fallback: bool | None = None) -> Path:
    """Train a sentencepiece model on `texts`; writes out_dir/spm.model and spm.json (settings).

    Deterministic for the same texts and options. `byte_fallback=None` enables byte pieces when
    `vocab_size >= 1024`. Returns the path of spm.model.
    """
    kind = ModelType(model_type).value
    if vocab_size < 8:
        raise ValueError(f"vocab_size must be at least 8 (4 special ids + pieces): {vocab_size}")
    if not 0.0 < character_coverage <= 1.0:
        raise ValueError(f"character_coverage must be in (0, 1], got {character_coverage}")
    lines = [t for t in texts if t.strip()]
    if not lines:
        raise ValueError("no training text: every line is empty")
    use_bytes = vocab_size >= BYTE_FALLBACK_MIN_VOCAB if byte_fallback is None else byte_fallback
    options = _trainer_options(vocab_size, kind, character_coverage, use_bytes)
    spm.set_random_generator_seed(seed)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model, **options)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / MODEL_FILE
    tmp = out_dir / (MODEL_FILE + ".tmp")
    tmp.write_bytes(model.getvalue())
    os.replace(tmp, path)  # a reader never sees a half-written model
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    settings = {**options, "seed": seed, "training_lines": len(lines),
                "training_text_sha256": digest,
                "actual_vocab_size": Tokenizer.load(path).vocab_size,
                "model_sha256": hashlib.sha256(model.getvalue()).hexdigest()}
    (out_dir / SETTINGS_FILE).write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n",
                                         encoding="utf-8")
    logger.info("trained %s model with %d pieces on %d lines", kind, settings["actual_vocab_size"],
                len(lines))
    return path


def round_trip_count(model: Path, texts: Iterable[str]) -> int:
    """How many texts satisfy decode(encode(s)) == s."""
    tok = Tokenizer.load(model)
    return sum(tok.decode(tok.encode(t)) == t for t in texts)
