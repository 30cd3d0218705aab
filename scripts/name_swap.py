"""A corpus with extra training pairs whose names are swapped for unseen ones (copy augmentation).

python scripts/name_swap.py --corpus cache/corpus --words WORDLIST --out cache/corpus-names

News is full of names the model never saw, and it mangles them ("Karratha" -> "Karrathas",
"Tel Aviv" -> "Tel Avivivity"): on newstest2013 (every 10th line) the bundled model writes only
69 of the 190 capitalised source words that the reference repeats unchanged (greedy, int8). Its
corpus repeats a few thousand names many times ("Tom" 10,922 times), so it learnt those names
rather than to copy.
For every training pair of the named-entity-rich sources in which a capitalised, non-initial
German word recurs unchanged in the English side, this appends `--copies` variants in which each
such word is replaced, on both sides and consistently (German genitive -s kept), by a name drawn
from an English word list's proper nouns or made up from their letters (a character trigram
chain), so that the pieces the model must copy vary. Only the training split is read; dev and
test are copied unchanged. WORDLIST is `usr/share/dict/american-english-large` of Debian's
`wamerican-large` package (SCOWL; permissive licence).
"""

from __future__ import annotations

import argparse
import random
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

from simulmt.data.extend import extend_corpus
from simulmt.data.names import WORD, copied_words

NAMED_SOURCES = ("tatoeba", "bible", "wesnoth", "europarl")


def proper_nouns(words: Iterable[str]) -> list[str]:
    """Capitalised single words of a word list that are names: not also a lowercase word
    ("This", "Christianity" is kept, "Visa" goes) and not a plural of another entry."""
    listed = {w.strip() for w in words}
    lower = {w for w in listed if w.islower()}
    names = [w for w in listed if re.fullmatch(r"[A-Z][a-z]{2,11}", w)]
    return sorted(w for w in names if w.lower() not in lower
                  and not (w.endswith("s") and w[:-1] in listed))


class NameMaker:
    """Draws names: half real proper nouns, half made up by a character trigram chain trained
    on them (new letter sequences, so new subword splits), never a word of `avoid`."""

    def __init__(self, names: Sequence[str], *, rng: random.Random, avoid: set[str]) -> None:
        if not names:
            raise ValueError("the word list has no proper nouns")
        self.names, self.rng, self.avoid = list(names), rng, avoid
        self.next: dict[str, list[str]] = defaultdict(list)
        for name in names:
            padded = "^^" + name.lower() + "$"
            for i in range(len(padded) - 2):
                self.next[padded[i:i + 2]].append(padded[i + 2])

    def made_up(self) -> str:
        for _ in range(100):
            state, out = "^^", ""
            while len(out) < 12:
                c = self.rng.choice(self.next[state])
                if c == "$":
                    break
                out += c
                state = state[1] + c
            if 3 <= len(out) <= 11:
                return out.capitalize()
        return self.rng.choice(self.names)

    def draw(self) -> str:
        while True:
            name = self.rng.choice(self.names) if self.rng.random() < 0.5 else self.made_up()
            if name not in self.avoid and name.lower() not in self.avoid:
                return name


def swap(de: str, en: str, names: dict[str, str]) -> tuple[str, str]:
    """Both sides with each word of `names` replaced; the German genitive "Toms" follows."""
    for old, new in names.items():
        de = re.sub(rf"(?<![\w-]){re.escape(old)}(s?)(?![\w-])", rf"{new}\1", de)
        en = re.sub(rf"(?<![\w-]){re.escape(old)}(?![\w-])", new, en)
    return de, en


def augmented(pairs: Iterable[tuple[str, str, str]], maker: NameMaker,
              copies: int) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for de, en, source in pairs:
        if source not in NAMED_SOURCES:
            continue
        found = copied_words(de, en)
        for _ in range(copies if found else 0):
            chosen: dict[str, str] = {}
            for word in found:
                name = maker.draw()
                while name in chosen.values():
                    name = maker.draw()
                chosen[word] = name
            out.append(swap(de, en, chosen))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--words", type=Path, required=True,
                        help="an English word list, one word a line (wamerican-large's)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--copies", type=int, default=2, help="variants per pair (default 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--package", default="wamerican-large=2020.12.07-2")
    args = parser.parse_args()
    read = (args.corpus / f"train.{ext}" for ext in ("de", "en", "source"))
    de, en, source = (p.read_text(encoding="utf-8").splitlines() for p in read)
    corpus_words = {w for line in en for w in WORD.findall(line)}
    maker = NameMaker(proper_nouns(args.words.read_text(encoding="utf-8").splitlines()),
                      rng=random.Random(args.seed), avoid=corpus_words)
    pairs = augmented(zip(de, en, source, strict=True), maker, args.copies)
    extend_corpus(args.corpus, args.out, pairs, source="namecopy", package=args.package,
                  licence="derived from the training pairs above; names from SCOWL (permissive)",
                  note="training pairs with their names swapped (scripts/name_swap.py)")
    print(f"{len(pairs)} name-swapped pairs added to {args.out}/train.* "
          f"({len(maker.names)} proper nouns in the word list)")


if __name__ == "__main__":
    main()
