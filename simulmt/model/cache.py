"""`DecoderCache`: the decoder self-attention K/V of one beam, wherever it lives.

The search sees one interface and nothing of where the K/V is kept (OpenNMT-py's split: the
decoding strategy hands back the parents of the surviving hypotheses, the model reorders its
own state):

    cache.length           positions cached per hypothesis (T)
    cache.view()           (2L, Bm, H, T, dh), or None while empty; valid until the next change
    cache.append(new)      append positions (2L, Bm, H, n, dh) to every hypothesis (a prefill)
    cache.extend(parents)  after a decoder step: every hypothesis gets the position the step fed
                           (the step staged it here), then row i continues hypothesis parents[i]
    cache.select(parents)  keep rows `parents` (Bm',) in that order (pruning), no new position
    cache.truncate(n)      keep the first n positions (tentative tokens dropped)

A step's new K/V is staged, not appended, because the search may drop the step (its policy
READs on the step's signals): the cache is then as before, and the next step, `select` or
`truncate` discards what was staged.

The batched decoder step (`simulmt.model.batch`) is the only other caller: it stages each
step's new K/V (`stage`) and may place a one-hypothesis cache in its stream's pool slot
(`place_in`). There the cache lives in the slot's target plane (its *home*): a step over streams
in consecutive slots reads all their caches as one view of the pool and writes each new
position in place, so no cache is gathered or concatenated. Anything that needs a tensor of the
beam's own (more hypotheses, a prefill, a cache too long for the pool, another beam over the
same slot) takes the cache back out of the slot first (`_unhome`).
"""

from __future__ import annotations

import torch

from simulmt.model.pool import KVSlot


class StepKV:
    """The new positions' K/V of a whole batched step, (2L, N, H, 1, dh): filled in once the
    forward pass is done, shared by every cache the step staged."""

    __slots__ = ("kv",)

    def __init__(self, kv: torch.Tensor | None = None) -> None:
        self.kv = kv


class DecoderCache:
    """K/V of tokens[:, :-1] of a beam's hypotheses: a tensor of its own or a pool slot's
    target plane (while the beam is one hypothesis and batched steps read it from the pool)."""

    __slots__ = ("__weakref__", "_home", "_own", "_staged")

    def __init__(self, kv: torch.Tensor | None = None) -> None:
        self._own = kv  # (2L, Bm, H, T, dh), or None: empty or at home
        self._home: KVSlot | None = None  # the slot whose target plane holds the K/V
        # the last step's rows: (its K/V, first row, rows, already written at home?)
        self._staged: tuple[StepKV, int, int, bool] | None = None

    # ---- reading -------------------------------------------------------------------------
    @property
    def length(self) -> int:
        if self._home is not None:
            return self._home.target_length
        return 0 if self._own is None else int(self._own.shape[3])

    @property
    def pooled(self) -> bool:
        """Whether the K/V lives in a pool slot (then `view` is a view of the pool)."""
        return self._home is not None

    def view(self) -> torch.Tensor | None:
        """(2L, Bm, H, T, dh) or None if empty; a view of the pool if pooled, valid until the
        pool next changes."""
        if self._home is not None:
            return self._home.target() if self._home.target_length else None
        return self._own

    # ---- the search's operations -----------------------------------------------------------
    def append(self, new: torch.Tensor) -> None:
        """Append positions (2L, Bm, H, n, dh) to every hypothesis, into a tensor of its own."""
        self._staged = None
        self._unhome()
        self._own = new if self._own is None else torch.cat([self._own, new], dim=3)

    def extend(self, parents: list[int]) -> None:
        """After a decoder step: append the position it fed (staged), then keep rows `parents`
        in that order (e.g. [0, 0, 2]: two children of hypothesis 0, one of 2; [] ends all)."""
        staged = self._staged
        if staged is None:
            raise ValueError("DecoderCache.extend: no decoder step staged its K/V here")
        self._staged = None
        step, start, rows, written = staged
        assert step.kv is not None
        home = self._home
        if home is not None:
            if parents == [0]:  # one hypothesis kept: its cache stays in the slot
                n = home.target_length
                if written:  # the step wrote it in place already
                    home.set_target_length(n + 1)
                    return
                if home.pool.fits(n + 1):
                    home.pool.write_target(home.index, n, step.kv[:, start : start + 1])
                    return
            self._unhome()  # more (or no) hypotheses, or too long for the pool
        new = step.kv[:, start : start + rows]  # (2L, Bm, H, 1, dh)
        kv = new if self._own is None else torch.cat([self._own, new], dim=3)  # (2L,Bm,H,T+1,dh)
        n = len(parents)
        if parents == list(range(n)):  # survivors in place (always so for greedy): no gather
            self._own = kv[:, :n]
        else:
            self._own = kv.index_select(1, torch.tensor(parents, dtype=torch.long))  # (2L,Bm',..)

    def select(self, parents: torch.Tensor) -> None:
        """Keep rows `parents` (Bm',) in that order; a staged step is dropped."""
        self._staged = None
        if self._home is not None:
            if parents.shape == (1,) and int(parents[0]) == 0:
                return  # the one hypothesis stays where it is
            self._unhome()
        if self._own is not None:
            self._own = self._own.index_select(1, parents)  # (2L, Bm', H, T, dh)

    def truncate(self, n: int) -> None:
        """Keep the first n positions; a staged step is dropped."""
        self._staged = None
        if self._home is not None:
            self._home.truncate_target(n)
        elif self._own is not None:
            self._own = self._own[:, :, :, :n]  # (2L, Bm, H, n, dh)

    # ---- the batched step's operations ----------------------------------------------------
    def stage(self, step: StepKV, start: int, rows: int, *, written: bool = False) -> None:
        """Rows start..start+rows-1 of `step` are the new positions of this cache's hypotheses
        (`written`: row `start` is in the home slot already, at position `length`); `extend`
        takes them, anything else drops them."""
        self._staged = (step, start, rows, written)

    def place_in(self, slot: KVSlot) -> None:
        """Move this one-hypothesis cache into `slot`'s target plane (a pooled step reads it
        there and writes the new position in place). A beam of its own there is moved out."""
        if self._home is slot and slot.held_by(self):
            return
        if self._own is not None and self._own.shape[1] != 1:
            raise ValueError(f"only a one-hypothesis cache fits a slot, not {self._own.shape[1]}")
        self._unhome()
        slot.adopt(self, self._own)
        self._own = None
        self._home = slot

    def vacate(self) -> None:
        """The slot is needed elsewhere (or released): take the K/V back into a tensor."""
        self._unhome()

    def _unhome(self) -> None:
        slot = self._home
        if slot is None:
            return
        self._home = None
        if slot.held_by(self):
            kv = slot.target()  # (2L, 1, H, T, dh)
            self._own = kv.clone() if kv.shape[3] else None
            slot.disown()
