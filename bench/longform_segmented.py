"""Long-form evaluation with the sentence-boundary detector driving the session's sentence
ends from outside (a preview of `segmentation=auto` until the session offers it).

    .venv/bin/python bench/longform_segmented.py --source docs.de --reference docs.en \\
        --segmenter cache/segmenter/gru.pt --lookahead 2 --policy wait-k:k=3 \\
        --source-style asr [--limit 4]

Word j is given to the session as soon as the detector has decided whether a sentence ends
after word j-1 (that is when word j-1+lookahead arrives); a boundary ends the session's
sentence (`flush`). A written word's delay counts the words *spoken* so far (given to the
detector), so the lookahead's waiting is charged. Scored like `simulmt eval --long-form`
(mweralign resegmentation, BLEU/chrF, StreamLAAL; no CA figures here).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import deque
from pathlib import Path

import torch
from simulmt.eval.corpus import LatencyConfig, SentenceStats
from simulmt.eval.documents import Document, read_documents
from simulmt.eval.longform import score_documents

from simulmt.engine import Engine
from simulmt.segment import Decision, Segmenter, SourceStyle
from simulmt.session import Session
from simulmt.updates import Update


def stream_document(engine: Engine, seg: Segmenter, doc: Document, policy: str) -> SentenceStats:
    session = Session(engine, policy=policy, tentative=False)
    words = doc.words
    queue: deque[str] = deque()
    committed: list[str] = []
    delays: list[int] = []
    spoken = fed = 0
    decided = -1  # words 0..decided have their boundary decision

    def take(updates: list[Update]) -> None:
        for u in updates:
            new = u.committed_delta.split()
            committed.extend(new)
            delays.extend([max(1, spoken)] * len(new))

    def feed_allowed() -> None:  # word j may go in once the decision after word j-1 is made
        nonlocal fed
        while queue and fed <= decided + 1:
            take(session.push(queue.popleft()))
            fed += 1

    def apply(decisions: list[Decision]) -> None:
        nonlocal decided
        for d in decisions:
            feed_allowed()
            if d.boundary and d.index < len(words) - 1:
                take(session.flush())
            decided = d.index
        feed_allowed()

    for w in words:
        spoken += 1
        queue.append(w)
        feed_allowed()
        apply(seg.push(w))
    apply(seg.finish())
    decided = len(words)
    feed_allowed()
    take(session.finish())
    return SentenceStats(
        0,
        len(words),
        " ".join(doc.references),
        " ".join(committed),
        tuple(delays),
        source=" ".join(words),
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--source", type=Path, required=True)
    p.add_argument("--reference", type=Path, required=True)
    p.add_argument("--segmenter", type=Path, required=True)
    p.add_argument("--lookahead", type=int, default=2)
    p.add_argument("--policy", default="wait-k:k=3")
    p.add_argument("--source-style", choices=["text", "asr"], default="asr")
    p.add_argument("--model", type=Path, default=None)
    p.add_argument("--limit", type=int, default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    docs = read_documents(
        args.source, args.reference, style=SourceStyle(args.source_style), limit=args.limit
    )
    engine = Engine.load(args.model)
    seg = Segmenter.load(args.segmenter, lookahead=args.lookahead)
    t = time.perf_counter()
    stats = [stream_document(engine, seg, d, args.policy) for d in docs]
    result, _ = score_documents(args.policy, docs, stats, LatencyConfig())
    out = {k: v for k, v in result.as_dict().items() if k != "wall_s"}
    out.update(
        wall_s=time.perf_counter() - t,
        lookahead=args.lookahead,
        segmenter=str(args.segmenter),
        source_style=args.source_style,
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
