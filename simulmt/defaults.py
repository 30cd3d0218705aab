"""Session defaults that belong to no one options class, each defined here once.

`Session`, `RunConfig` (eval), `ServerConfig` (serve), the command lines (`simulmt.cli.options`)
and the protocol read them from here. The search's defaults live in `SearchOptions`, the input
limits in `SessionLimits` and the server's `Limits`. No torch here: clients import it.
"""

from __future__ import annotations

__all__ = ["DEFAULT_POLICY", "SEGMENT_LOOKAHEAD"]

# the policy of a session that names none: wait-3 is the usual captioning trade-off (about
# three words behind the speaker; docs/results.md)
DEFAULT_POLICY = "wait-k:k=3"
# `segmentation=auto`: words the boundary detector reads past a possible boundary before it
# decides: each word adds its wait to every delay, and boundary F1 gains little past 2
# (docs/SEGMENTER.md)
SEGMENT_LOOKAHEAD = 2
