"""The special token ids every part of the project agrees on (one place, no imports).

The tokenizer is trained with these ids (`simulmt.data.tokenizer` checks them on load); the
model pads with PAD_ID, the decoder starts from BOS_ID, and the search ends hypotheses at EOS_ID.
"""

from __future__ import annotations

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
NEVER = [PAD_ID, UNK_ID, BOS_ID]  # ids a decoder never writes (a list: it indexes tensors)
