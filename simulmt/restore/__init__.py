"""Case and comma restoration of speech-recognizer words, before the model reads them.

A recognizer sends lowercase words without punctuation; the translation model was trained
mostly on written text. The restorer gives each word back its case and a following comma,
after reading `lookahead` more words (notes/model-notes.md measures what that buys and costs):

    r = Restorer.load(path, lookahead=2)
    for word in r.push("die"): ...   # restored words that became due
    r.finish()                       # the rest, at the end of a sentence's source
"""

from simulmt.restore.labels import Case, Punct, label_words, restore_word
from simulmt.restore.model import (
    RestorerConfig,
    RestorerError,
    RestorerNet,
    load_restorer,
    save_restorer,
)
from simulmt.restore.stream import Restorer

__all__ = [
    "Case",
    "Punct",
    "Restorer",
    "RestorerConfig",
    "RestorerError",
    "RestorerNet",
    "label_words",
    "load_restorer",
    "restore_word",
    "save_restorer",
]
