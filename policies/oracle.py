"""Oracle READ/WRITE sequences from a trained translation model (Zheng et al. 2019).

"Simpler and faster learning of adaptive policies for simultaneous translation": walk each
training pair (x, y) with the model; in state (j source words read, i reference tokens
written) WRITE when the model, given x≤j and the reference prefix y≤i, ranks the reference's
next token y_{i+1} within its top r, else READ. Once the source is finished everything is
written (no decision is recorded there). The reference's end (EOS) cannot be written before
the source ends (the search forbids it), so a state whose next reference token is EOS is a
READ. Rules (`OracleRule`):

- TOP_R — Zheng et al.'s rule as above.
- GAIN — READ only when reading can help: the reference token is outside the top r now but
  inside it with the whole source; WRITE otherwise (a token the model cannot predict even
  from the full sentence is not worth waiting for).

Units: the walk decides where the search does (`WriteUnit`). With word writes (the default)
i counts reference *words*: a WRITE writes all tokens of word i+1, and the oracle WRITEs iff
every one of them passes the rule (with GAIN: is ranked < r now, or could not be with the
whole source either); the state's features are those of the word's first token, the signal
the search decides on at a word boundary. With `word_end` the first token of word i+2 must
pass too: the search only commits a word once it picks a token that opens the next one. With
token writes every token is a word.

Efficiently: the walk goes column by column (j = 1, 2, …) for a batch of pairs at once. For
each j one teacher-forced decoder pass over the whole reference gives the ranks at every i.
Its visibility is what the online search's decoder sees along the oracle path: tokens written
earlier keep the visibility of their own WRITE (their cached keys/values), the rest see x≤j.
So the features recorded at each visited state — the decoder state, the next-token
distribution and the cross-attention — are exactly those an incremental decode of the
reference along that path gives the policy at inference (`simulmt.search.online`).

DAgger-style rollouts (Ross et al. 2011): with a `driver` (a trained policy's decision on the
features), the walk follows the driver instead of the oracle, and every state it visits is
labelled with the oracle's decision there. A policy trained only on oracle paths never sees
the states its own mistakes lead to (having read too little or too much); these rows teach
it what to do there. The path is then the driver's: a row's label no longer says where the
walk went next.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from simulmt.policies.learned_net import N_ATTENTION, N_SCALARS, policy_features

from simulmt.data.tokenizer import Tokenizer
from simulmt.data.vocab import BOS_ID, EOS_ID
from simulmt.input.words import word_ends
from simulmt.model.transformer import SimulTransformer
from simulmt.search.offline import greedy_decode, pad_batch
from simulmt.search.options import WriteUnit
from simulmt.search.signals import per_word_attention


class OracleRule(enum.Enum):
    TOP_R = "top-r"  # Zheng et al. 2019: WRITE iff the reference token ranks < r now
    GAIN = "gain"  # READ iff it ranks >= r now but < r with the whole source


@dataclass(frozen=True)
class OracleConfig:
    r: int = 2  # 2 rather than 1: tolerates near-ties of a small model without reading on
    rule: OracleRule = OracleRule.GAIN  # reads only where more source helps (see module doc)
    max_positions: int = 1024  # pairs x target positions per decoder pass (x V logits in memory)
    attention: bool = False  # record the cross-attention features too (NetConfig.attention)
    # word units: a word is WRITE only if the next word's first token passes too. The search
    # writes a word's tokens until it picks a token that opens a new word; without this a word
    # whose pieces rank well but whose end the prefix cannot tell ("His" + "ss") is labelled
    # WRITE after one source word, and the policy learns to start like wait-1.
    word_end: bool = False

    def __post_init__(self) -> None:
        if self.r < 1:
            raise ValueError(f"oracle r must be >= 1 (got {self.r})")
        if self.max_positions < 1:
            raise ValueError(f"max_positions must be >= 1 (got {self.max_positions})")


@dataclass(frozen=True)
class OraclePair:
    src: tuple[int, ...]  # source token ids
    tgt: tuple[int, ...]  # reference token ids (no BOS/EOS)
    ends: tuple[int, ...]  # source tokens after each word (simulmt.input.words.word_ends)
    # index of each reference word's first token (word writes); () = every token is a word
    tgt_starts: tuple[int, ...] = ()

    @property
    def bounds(self) -> tuple[int, ...]:
        """The token index where each decision unit (word or token) starts, then len(tgt)."""
        return (*(self.tgt_starts or range(len(self.tgt))), len(self.tgt))


@dataclass(frozen=True)
class OracleData:
    """The states visited along the oracle paths, one row each."""

    features: torch.Tensor  # (N, F) policy_features of the state
    labels: torch.Tensor  # (N,) 1.0 = WRITE, 0.0 = READ
    pair: torch.Tensor  # (N,) index of the pair the state belongs to
    src_read: torch.Tensor  # (N,) j
    tgt_written: torch.Tensor  # (N,) i (words, or tokens with token writes)

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    @classmethod
    def cat(cls, parts: Sequence[OracleData], n_features: int) -> OracleData:
        if not parts:
            long = torch.zeros(0, dtype=torch.long)
            return cls(torch.zeros(0, n_features), torch.zeros(0), long, long, long)
        return cls(*(torch.cat([getattr(p, name) for p in parts]) for name in
                     ("features", "labels", "pair", "src_read", "tgt_written")))

    def to_dict(self) -> dict[str, torch.Tensor]:
        return {"features": self.features, "labels": self.labels, "pair": self.pair,
                "src_read": self.src_read, "tgt_written": self.tgt_written}

    def path(self, pair: int) -> list[tuple[int, int, bool]]:
        """(j, i, WRITE?) of every recorded state of one pair, in walk order."""
        rows = (self.pair == pair).nonzero().flatten().tolist()
        return [(int(self.src_read[r]), int(self.tgt_written[r]), bool(self.labels[r] > 0.5))
                for r in rows]


def make_pairs(tokenizer: Tokenizer, texts: Sequence[tuple[str, str]], *,
               max_len: int, unit: WriteUnit = WriteUnit.WORD) -> list[OraclePair]:
    """Tokenize; keep pairs with >= 2 source words (one word leaves no decision), a non-empty
    reference and at most max_len tokens on each side. `unit`: what one WRITE writes."""
    out = []
    for src_text, tgt_text in texts:
        src, tgt = tokenizer.encode(src_text), tokenizer.encode(tgt_text)
        ends = word_ends(src, tokenizer.is_word_start)
        if len(ends) >= 2 and tgt and len(src) <= max_len and len(tgt) <= max_len:
            starts: tuple[int, ...] = ()
            if unit is WriteUnit.WORD:
                starts = tuple(t for t, tok in enumerate(tgt)
                               if t == 0 or tokenizer.is_word_start(tok))
            out.append(OraclePair(tuple(src), tuple(tgt), tuple(ends), starts))
    return out


@torch.no_grad()
def with_model_targets(model: SimulTransformer, pairs: Sequence[OraclePair],
                       is_word_start: Callable[[int], bool], *, batch: int = 64
                       ) -> list[OraclePair]:
    """The pairs with each reference replaced by the model's own full-sentence greedy
    translation (pairs it translates to nothing are dropped).

    Walked with the top-r rule at r=1, the oracle then WRITEs a word once the model's
    prediction on the prefix is what it would write with the whole sentence: the labels
    describe the words the policy's own search will write, not a reference it never sees
    (Zhang et al. 2020's meaningful units, from the full-sentence translation)."""
    out: list[OraclePair] = []
    for start in range(0, len(pairs), batch):
        group = pairs[start:start + batch]
        hyps = greedy_decode(model, [p.src for p in group], [p.ends for p in group])
        for pair, hyp in zip(group, hyps, strict=True):
            if not hyp:
                continue
            starts: tuple[int, ...] = ()
            if pair.tgt_starts:  # word units: recompute them on the new target
                starts = tuple(t for t, tok in enumerate(hyp) if t == 0 or is_word_start(tok))
            out.append(OraclePair(pair.src, tuple(hyp), pair.ends, starts))
    return out


def walk_column(ok: Sequence[bool], start: int, n_units: int) -> int:
    """Walk one source prefix: from `start` units (words or tokens) written, WRITE while the
    oracle condition `ok[i]` holds for the next unit; stop at n_units (next is EOS: READ).
    Returns the units written when the walk READs."""
    i = start
    while i < n_units and ok[i]:
        i += 1
    return i


def unit_ok(ok: Sequence[bool], bounds: Sequence[int], *, word_end: bool = False) -> list[bool]:
    """Per-token oracle conditions -> per unit: every token of the unit passes; with
    `word_end`, also the first token of the next unit (the look-ahead that ends the word in
    the search), except after the last unit."""
    n = len(bounds) - 1
    return [all(ok[bounds[u]:bounds[u + 1] + int(word_end and u < n - 1)]) for u in range(n)]


def within_top(logits: torch.Tensor, gold: torch.Tensor, r: int) -> torch.Tensor:
    """logits (B, T, V), gold (B, T) -> (B, T) bool: the gold token ranks < r (ties count
    for it)."""
    gold_logit = logits.gather(-1, gold.unsqueeze(-1))  # (B, T, 1)
    rth = logits.topk(r, dim=-1).values[..., -1:]  # (B, T, 1) the r-th largest logit
    return (gold_logit >= rth).squeeze(-1)  # fewer than r logits above gold's


def n_features(model: SimulTransformer, cfg: OracleConfig) -> int:
    """Columns of the recorded features (NetConfig.n_features of a net trained on them)."""
    return model.cfg.d_model + N_SCALARS + (N_ATTENTION if cfg.attention else 0)


Driver = Callable[[torch.Tensor], torch.Tensor]  # features (N, F) -> WRITE? (N,) bool


@torch.no_grad()
def oracle_batch(model: SimulTransformer, pairs: Sequence[OraclePair],
                 cfg: OracleConfig, driver: Driver | None = None) -> OracleData:
    """Oracle paths and the features of their states for a batch of pairs (pair = index);
    with a driver, the driver's paths with the oracle's labels (see the module doc)."""
    memory, _ = model.encode(pad_batch([p.src for p in pairs]))  # (B, S, D), causal: pad is inert
    cross = model.cross_kv(memory)  # per layer (B, H, S, dh)
    tgt_in = pad_batch([(BOS_ID, *p.tgt) for p in pairs])  # (B, T)
    gold = pad_batch([(*p.tgt, EOS_ID) for p in pairs])  # (B, T)
    t = tgt_in.shape[1]
    always = torch.zeros_like(gold, dtype=torch.bool)  # (B, T) WRITE whatever the ranks
    if cfg.rule is OracleRule.GAIN:
        full = torch.tensor([len(p.src) for p in pairs]).unsqueeze(1).expand(-1, t)  # (B, T)
        always = ~within_top(model.decode(tgt_in, cross, full), gold, cfg.r)
    written_vis = torch.zeros_like(gold)  # (B, T) visibility each written token was computed with
    bounds = [p.bounds for p in pairs]
    pos = [0] * len(pairs)  # reference units (words or tokens) written per pair
    parts = []
    for j in range(1, max(len(p.ends) for p in pairs)):
        active = [k for k, p in enumerate(pairs) if len(p.ends) > j]
        idx = torch.tensor(active)  # (A,)
        e = torch.tensor([pairs[k].ends[j - 1] for k in active])  # (A,) visible tokens at x<=j
        written = torch.tensor([bounds[k][pos[k]] for k in active])  # (A,) tokens written
        done = torch.arange(t).unsqueeze(0) < written.unsqueeze(1)  # (A, T)
        vis = torch.where(done, written_vis[idx], e.unsqueeze(1))  # (A, T)
        sub = [(kk.index_select(0, idx), vv.index_select(0, idx)) for kk, vv in cross]
        # (A, T, V), (A, T, D), (A, T, S): what the search's decoder step gives the policy
        logits, states, attn = model.decode_signals(tgt_in[idx], sub, vis)
        words = None
        if cfg.attention:
            ends = torch.tensor([pairs[k].ends[:j] for k in active])  # (A, j)
            words = per_word_attention(attn, ends)  # (A, T, j)
        sig = (logits, states, words)
        ok = (within_top(logits, gold[idx], cfg.r) | always[idx]).tolist()
        rows: list[tuple[int, int, int, int, int]] = []  # (batch row, pair, i, token, write)
        for a, k in enumerate(active):
            b, n = bounds[k], len(bounds[k]) - 1
            units = unit_ok(ok[a], b, word_end=cfg.word_end and bool(pairs[k].tgt_starts))
            if driver is None:
                end = walk_column(units, pos[k], n)
            else:  # the driver decides at every state the column could reach
                cand = [(a, k, i, b[i], 0) for i in range(pos[k], n)]
                writes = driver(_record(cand, j, sig).features).tolist() if cand else []
                end = pos[k] + walk_column(writes, 0, n - pos[k])
            rows += [(a, k, i, b[i], int(i < n and units[i])) for i in range(pos[k], end + 1)]
            written_vis[k, b[pos[k]]:b[end]] = e[a]
            pos[k] = end
        parts.append(_record(rows, j, sig))
    return OracleData.cat(parts, n_features(model, cfg))


Signals = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]  # logits, states, word attention


def _record(rows: list[tuple[int, int, int, int, int]], j: int, sig: Signals) -> OracleData:
    """The states of `rows` (batch row, pair, units written i, token index of unit i+1,
    label) on x<=j: decided on the signals of the next unit's first token. sig: logits
    (A, T, V), states (A, T, D), per-word attention (A, T, j) or None."""
    logits, states, words = sig
    a, k, i, tok, w = (torch.tensor(col) for col in zip(*rows, strict=True))  # each (R,)
    log_probs = torch.log_softmax(logits[a, tok].float(), dim=-1)  # (R, V)
    read = torch.full_like(i, j)
    att = None if words is None else words[a, tok]  # (R, j)
    feats = policy_features(states[a, tok], log_probs, read, i, torch.zeros_like(i), att)
    return OracleData(feats, w.float(), k, read, i)  # feats (R, F)


def batches(pairs: Sequence[OraclePair], max_positions: int) -> list[list[int]]:
    """Pair indices grouped by length (little padding), each group's pairs x (longest
    reference + 1) <= max_positions (a longer pair goes alone). Deterministic."""
    order = sorted(range(len(pairs)), key=lambda k: (len(pairs[k].tgt), len(pairs[k].ends)))
    out: list[list[int]] = []
    cur: list[int] = []
    for k in order:
        width = len(pairs[k].tgt) + 1
        if cur and width * (len(cur) + 1) > max_positions:
            out.append(cur)
            cur = []
        cur.append(k)
    return out + ([cur] if cur else [])


def generate_oracle(model: SimulTransformer, pairs: Sequence[OraclePair], cfg: OracleConfig,
                    *, progress: Callable[[int], None] | None = None,
                    driver: Driver | None = None) -> OracleData:
    """Oracle data of all pairs (pair = index into `pairs`), rows ordered by pair and then along
    its path; `progress(n)` after each batch of pairs. `driver`: walk a policy's paths
    (DAgger), labelled by the oracle."""
    parts = []
    for group in batches(pairs, cfg.max_positions):
        data = oracle_batch(model, [pairs[k] for k in group], cfg, driver)
        remap = torch.tensor(group)  # (G,) batch position -> index into pairs
        parts.append(OracleData(data.features, data.labels, remap[data.pair], data.src_read,
                                data.tgt_written))
        if progress is not None:
            progress(len(group))
    data = OracleData.cat(parts, n_features(model, cfg))
    step = data.src_read + data.tgt_written  # (N,) grows by one along a path
    width = int(step.max()) + 1 if len(data) else 1
    order = torch.argsort(data.pair * width + step)  # (N,) by pair, then along the path
    return OracleData(*(getattr(data, name)[order] for name in
                        ("features", "labels", "pair", "src_read", "tgt_written")))
