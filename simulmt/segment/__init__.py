"""Online sentence-boundary detection for endless word streams (with or without punctuation).

seg = Segmenter.load(path, lookahead=2)
for decision in seg.push(word): ...   # boundary after word `decision.index`?
seg.cut_point(words)                  # where to cut an over-long sentence
"""

from simulmt.segment.model import SegmenterError, SegmenterNet, load_segmenter, save_segmenter
from simulmt.segment.stream import Decision, Segmenter, cut_point
from simulmt.segment.views import SourceStyle, apply_style, recognizer_view

__all__ = [
    "Decision",
    "Segmenter",
    "SegmenterError",
    "SegmenterNet",
    "SourceStyle",
    "apply_style",
    "cut_point",
    "load_segmenter",
    "recognizer_view",
    "save_segmenter",
]
