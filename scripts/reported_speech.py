"""A corpus with extra training pairs of reported speech (quotation augmentation).

python scripts/reported_speech.py --corpus cache/corpus-all --words WORDLIST \
    --out cache/corpus-quotes [--pairs 30000]

News quotes people in every other sentence ('"Wir werden das prüfen", sagte er.' → '"We will
look into it," he said.'), and a speech recognizer drops the quotation marks: on newstest2015
the bundled model's recognizer-view outputs carry 20 of the reference's 747 quotation marks
(its written-view outputs 585), which costs half a BLEU point of the gap between the two
views. The training corpus has few such frames (1% of its English side has a quotation mark,
mostly Bible and software help), so the model has not learnt that "… sagte er" at the end of
an unpunctuated source means the words before it were a quotation.
This appends pairs built from the corpus's own single-sentence conversational pairs (Tatoeba,
Europarl), each wrapped in a reporting frame on both sides: the quotation first and the
speaker after it ("…", sagte er. / "…," he said.), or the speaker first with a colon (Die
Ministerin sagte: "…" / The minister said: "…"); speakers are pronouns, roles or names from an
English word list's proper nouns (as scripts/name_swap.py draws them). Only the training split
is read; dev and test are copied unchanged. WORDLIST is `usr/share/dict/american-english-large`
of Debian's `wamerican-large` package (SCOWL; permissive licence).
"""

from __future__ import annotations

import argparse
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from name_swap import proper_nouns

from simulmt.data.extend import extend_corpus

SOURCES = ("tatoeba", "europarl")


@dataclass(frozen=True)
class Speaker:
    de: str  # nominative, lowercase article ("der Sprecher", "er", "Herr Lawson")
    en: str  # ("the spokesman", "he", "Mr Lawson")
    pronoun: bool  # English puts a pronoun before the verb ("he said"), a noun either side


PRONOUNS = (Speaker("er", "he", True), Speaker("sie", "she", True))
ROLES = tuple(
    Speaker(de, en, False)
    for de, en in (
        ("der Sprecher", "the spokesman"), ("die Sprecherin", "the spokeswoman"),
        ("ein Polizeisprecher", "a police spokesman"), ("der Minister", "the minister"),
        ("die Ministerin", "the minister"), ("der Bürgermeister", "the mayor"),
        ("die Bürgermeisterin", "the mayor"), ("der Präsident", "the president"),
        ("die Präsidentin", "the president"), ("ein Zeuge", "a witness"),
        ("der Trainer", "the coach"), ("die Polizei", "the police"),
        ("der Abgeordnete", "the MP"), ("die Kanzlerin", "the Chancellor"),
        ("ein Anwohner", "a resident"), ("die Ärztin", "the doctor"),
    )
)
# German past tense, English past tense; "fragte" only for questions
VERBS = (("sagte", "said"), ("erklärte", "explained"), ("betonte", "stressed"),
         ("meinte", "said"), ("berichtete", "reported"))
ASKED = ("fragte", "asked")
QUOTES = (('"', '"'), ('"', '"'), ('"', '"'), ("„", "“"))  # news writes straight quotes most


def usable(de: str, en: str) -> bool:
    """One sentence, 3–30 words, no quotation marks yet, the same final mark on both sides."""
    if any(q in s for s in (de, en) for q in '"„“”«»‚‘'):  # not ’ or ': apostrophes
        return False
    if not 3 <= len(de.split()) <= 30 or de[-1:] not in ".!?" or de[-1] != en[-1:]:
        return False
    return not re.search(r"[.!?]\s", de[:-1])  # one sentence


def speaker(rng: random.Random, names: Sequence[str]) -> Speaker:
    kind = rng.random()
    if kind < 0.4:
        return rng.choice(PRONOUNS)
    if kind < 0.75:
        return rng.choice(ROLES)
    name = rng.choice(names)
    title = rng.choice((("Herr ", "Mr "), ("Frau ", "Ms "), ("", "")))
    return Speaker(title[0] + name, title[1] + name, False)


def cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def frame(de: str, en: str, who: Speaker, rng: random.Random) -> tuple[str, str]:
    """The pair as reported speech, in one of three frames chosen at random."""
    mark = de[-1]
    verb_de, verb_en = ASKED if mark == "?" else rng.choice(VERBS)
    open_de, close_de = rng.choice(QUOTES)
    kind = rng.random()
    if kind < 0.3:  # Die Ministerin sagte: "…" / The minister said: "…"
        return (f"{cap(who.de)} {verb_de}: {open_de}{de}{close_de}",
                f'{cap(who.en)} {verb_en}: "{en}"')
    # the quotation first: a statement's full stop becomes a comma inside the quotes
    body_de = de[:-1] if mark == "." else de
    body_en = en[:-1] + "," if mark == "." else en
    if kind < 0.45 and not who.pronoun and mark != "?":  # "…", so der Sprecher. / "…," said …
        return (f"{open_de}{body_de}{close_de}, so {who.de}.",
                f'"{body_en}" said {who.en}.')
    # "…", sagte er. / "…," he said. ("said the minister" half the time for a noun)
    en_tail = (f"{verb_en} {who.en}" if not who.pronoun and rng.random() < 0.5
               else f"{who.en} {verb_en}")
    return f"{open_de}{body_de}{close_de}, {verb_de} {who.de}.", f'"{body_en}" {en_tail}.'


def reported_pairs(
    pairs: Sequence[tuple[str, str]], *, count: int, names: Sequence[str], rng: random.Random
) -> list[tuple[str, str]]:
    """`count` framed pairs, each from another usable line of `pairs` (fewer if too few)."""
    chosen = [p for p in pairs if usable(*p)]
    rng.shuffle(chosen)
    return [frame(de, en, speaker(rng, names), rng) for de, en in chosen[:count]]


def read_training_pairs(corpus: Path) -> list[tuple[str, str]]:
    de = (corpus / "train.de").read_text(encoding="utf-8").splitlines()
    en = (corpus / "train.en").read_text(encoding="utf-8").splitlines()
    src = (corpus / "train.source").read_text(encoding="utf-8").splitlines()
    return [(d.strip(), e.strip()) for d, e, s in zip(de, en, src, strict=True) if s in SOURCES]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--words", type=Path, required=True,
                        help="an English word list (speakers' names are its proper nouns)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--pairs", type=int, default=30000, help="pairs to add (default 30000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--package", default="wamerican-large=2020.12.07-2")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    names = proper_nouns(args.words.read_text(encoding="utf-8").splitlines())
    pairs = reported_pairs(read_training_pairs(args.corpus), count=args.pairs, names=names,
                           rng=rng)
    extend_corpus(args.corpus, args.out, pairs, source="reported", package=args.package,
                  licence="the corpus's pairs' licences (Tatoeba CC-BY 2.0 FR, Europarl); "
                  "names from SCOWL (permissive)",
                  note="quotation frames around single-sentence Tatoeba and Europarl pairs "
                  "(scripts/reported_speech.py)")
    print(f"added {len(pairs)} reported-speech pairs; wrote {args.out}")


if __name__ == "__main__":
    main()
