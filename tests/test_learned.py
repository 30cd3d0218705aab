"""The learned policy: oracle generation, network training, the policy and its guarantees."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from simulmt.policies import Action, ModelSignals, Observation, PolicyError, Signal, load_policy
from simulmt.policies.learned import LearnedPolicy
from simulmt.policies.learned_net import (
    NetConfig,
    PolicyNet,
    attention_features,
    policy_features,
    save_policy,
)
from simulmt.policies.learned_train import FitConfig, evaluate, fit, pos_weight
from simulmt.policies.oracle import (
    OracleConfig,
    OracleData,
    OraclePair,
    OracleRule,
    generate_oracle,
    make_pairs,
    unit_ok,
    walk_column,
    within_top,
)

from simulmt.data.vocab import BOS_ID, EOS_ID
from simulmt.engine import Engine
from simulmt.model.layers import KV, unstack_kv
from simulmt.model.transformer import SimulTransformer, StepOutput
from simulmt.search.options import SearchOptions, WriteUnit
from simulmt.search.signals import word_attention
from simulmt.session import Session
from simulmt.train.tiny import tiny_pairs as _tiny_pairs

torch.set_num_threads(1)
R, W = Action.READ, Action.WRITE


@functools.cache
def engine() -> Engine:
    return Engine.tiny(0)


@functools.cache
def pairs(unit: WriteUnit = WriteUnit.WORD) -> list[OraclePair]:
    return make_pairs(engine().tokenizer, _tiny_pairs(), max_len=100, unit=unit)


@functools.cache
def oracle(rule: OracleRule = OracleRule.GAIN, r: int = 2, attention: bool = True) -> OracleData:
    return generate_oracle(engine().model, pairs(),
                           OracleConfig(r=r, rule=rule, max_positions=96, attention=attention))


def train_policy_file(folder: Path, *, attention: bool) -> Path:
    """A policy trained on the tiny model's oracle states (a few seconds)."""
    data = oracle(attention=attention)
    torch.manual_seed(0)
    cfg = engine().model.cfg
    net = PolicyNet(NetConfig(d_state=cfg.d_model, vocab_size=cfg.vocab_size, dropout=0.0,
                              attention=attention))
    net.set_normalization(data.features)
    fit(net, data, data, FitConfig(epochs=30, batch_size=64))
    path = folder / "policy.pt"
    save_policy(path, net, meta={"model": "tiny-0"})
    return path


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """With the cross-attention features (`simulmt train-policy --attention`)."""
    return train_policy_file(tmp_path_factory.mktemp("policy"), attention=True)


@pytest.fixture(scope="module")
def plain_policy_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Without them: the default, and every policy trained before they existed."""
    return train_policy_file(tmp_path_factory.mktemp("plain"), attention=False)


# ---- oracle --------------------------------------------------------------------------
@pytest.mark.parametrize(("ok", "start", "n", "end"), [
    ([True, True, False, True], 0, 4, 2),  # WRITE twice, then READ
    ([False, True, True], 0, 3, 0),  # READ at once
    ([False, True, True], 1, 3, 3),  # everything written: the next token is EOS -> READ
    ([True, True, True, True], 2, 3, 3),  # ok[3] is EOS's: never written before the source ends
    ([True], 1, 1, 1),
])
def test_walk_column(ok: list[bool], start: int, n: int, end: int) -> None:
    assert walk_column(ok, start, n) == end


def test_a_word_writes_only_if_all_its_tokens_pass() -> None:
    """Hand-built: word 1 is tokens 1-2 and its second token fails, so the word walk stops
    before word 1 although the token walk would write token 1 first."""
    ok, bounds = [True, True, False, True, True], (0, 1, 3, 5)
    assert unit_ok(ok, bounds) == [True, False, True]
    assert walk_column(unit_ok(ok, bounds), 0, 3) == 1  # one word written, then READ
    assert walk_column(ok, 0, 5) == 2  # per token: two written
    assert unit_ok(ok, (0, 1, 2, 3, 4, 5)) == ok  # token bounds: every token is a unit


def test_word_end_needs_the_next_words_first_token() -> None:
    """Hand-built: word 0 passes alone, but the token that would end it (word 1's first
    token) fails, so with word_end word 0 is a READ; the last word has no look-ahead."""
    ok, bounds = [True, False, True, True], (0, 1, 3, 4)
    assert unit_ok(ok, bounds) == [True, False, True]
    assert unit_ok(ok, bounds, word_end=True) == [False, False, True]
    assert unit_ok([True, True, True, False], (0, 1, 3, 4), word_end=True) == [True, False, False]


@st.composite
def tokens_in_words(draw: st.DrawFn) -> tuple[list[bool], tuple[int, ...]]:
    """Per-token oracle conditions and word bounds (0, first tokens of words 1.., len)."""
    ok = draw(st.lists(st.booleans(), min_size=1, max_size=20))
    cuts = draw(st.sets(st.integers(1, len(ok) - 1), max_size=len(ok) - 1)
                if len(ok) > 1 else st.just(set()))
    return ok, (0, *sorted(cuts), len(ok))


@settings(max_examples=200, deadline=None)
@given(tokens_in_words())
def test_word_end_labels_are_the_plain_ones_and_the_look_ahead(
        case: tuple[list[bool], tuple[int, ...]]) -> None:
    ok, bounds = case
    plain, ended = unit_ok(ok, bounds), unit_ok(ok, bounds, word_end=True)
    n = len(plain)
    assert ended == [plain[u] and (u == n - 1 or ok[bounds[u + 1]]) for u in range(n)]
    assert walk_column(ended, 0, n) <= walk_column(plain, 0, n)  # never writes further


@settings(max_examples=200, deadline=None)
@given(tokens_in_words())
def test_word_walk_stops_at_the_word_of_the_first_failing_token(
        case: tuple[list[bool], tuple[int, ...]]) -> None:
    ok, bounds = case
    words = unit_ok(ok, bounds)
    assert words == [all(ok[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]
    end, token_end = walk_column(words, 0, len(words)), walk_column(ok, 0, len(ok))
    assert bounds[end] <= token_end  # whole words only, never past a failing token
    if end < len(words):
        assert bounds[end] <= token_end < bounds[end + 1]  # the failing word holds it


def test_word_units_are_the_reference_words() -> None:
    """Each word-level unit decodes to one whitespace word of the reference."""
    tok = engine().tokenizer
    multi = 0
    for pair in pairs():
        b = pair.bounds
        units = [tok.decode(pair.tgt[x:y]) for x, y in zip(b, b[1:], strict=False)]
        assert units == tok.decode(pair.tgt).split()
        multi += sum(1 for x, y in zip(b, b[1:], strict=False) if y - x > 1)
        assert pairs(WriteUnit.TOKEN)[pairs().index(pair)].bounds == (*range(len(pair.tgt)),
                                                                       len(pair.tgt))
    assert multi > 0  # some words are several tokens


def test_within_top_counts_ties_for_the_gold_token() -> None:
    logits = torch.tensor([[[3.0, 1.0, 3.0, 0.0], [0.0, 1.0, 2.0, 3.0]]])  # (1, 2, 4)
    gold = torch.tensor([[2, 0]])
    assert within_top(logits, gold, 1).tolist() == [[True, False]]
    assert within_top(logits, gold, 3).tolist() == [[True, False]]
    assert within_top(logits, gold, 4).tolist() == [[True, True]]


def first_ranks(pair: OraclePair, visible: int) -> torch.Tensor:
    """Logits of the first target token given `visible` source tokens: (V,)."""
    model = engine().model
    memory, _ = model.encode(torch.tensor([pair.src]))  # (1, S, D)
    with torch.no_grad():
        return model.decode(torch.tensor([[BOS_ID]]), model.cross_kv(memory),
                            torch.tensor([[visible]]))[0, 0]


def with_first(pair: OraclePair, token: int) -> OraclePair:
    return OraclePair(pair.src, (token, *pair.tgt[1:]), pair.ends)


def path_of(pair: OraclePair, rule: OracleRule, r: int = 1) -> list[tuple[int, int, bool]]:
    return generate_oracle(engine().model, [pair], OracleConfig(r=r, rule=rule)).path(0)


def test_oracle_writes_the_models_best_token_and_reads_for_a_bad_one() -> None:
    pair = pairs()[0]
    logits = first_ranks(pair, pair.ends[0])  # (V,) after reading one word
    best, worst = int(logits.argmax()), int(logits.argmin())
    assert path_of(with_first(pair, best), OracleRule.TOP_R)[0] == (1, 0, True)
    read = path_of(with_first(pair, worst), OracleRule.TOP_R)
    assert read[0] == (1, 0, False) and read[1][:2] == (2, 0)
    # the worst token is no better with the whole source: waiting cannot help, GAIN writes it
    full = first_ranks(pair, len(pair.src))
    assert int((full > full[worst]).sum()) >= 1
    assert path_of(with_first(pair, worst), OracleRule.GAIN)[0] == (1, 0, True)


def greedy_full(pair: OraclePair, limit: int = 30) -> tuple[int, ...]:
    """The model's greedy translation of the whole source (EOS excluded)."""
    model = engine().model
    memory, _ = model.encode(torch.tensor([pair.src]))  # (1, S, D)
    cross = model.cross_kv(memory)
    out: list[int] = []
    while len(out) < limit:
        tgt_in = torch.tensor([[BOS_ID, *out]])  # (1, T)
        with torch.no_grad():
            logits = model.decode(tgt_in, cross, torch.full_like(tgt_in, len(pair.src)))
        token = int(logits[0, -1].argmax())
        if token == EOS_ID:
            break
        out.append(token)
    return tuple(out)


def test_gain_oracle_reads_where_more_source_helps() -> None:
    """With the model's own full-source translation as the reference, every token is its best
    with the whole source, so GAIN READs exactly where TOP_R (r=1) does: where the prefix
    read so far does not make it the best yet."""
    reads = 0
    for pair in pairs()[:10]:
        tgt = greedy_full(pair)
        if not tgt:
            continue
        ref = OraclePair(pair.src, tgt, pair.ends)
        gain, top = path_of(ref, OracleRule.GAIN), path_of(ref, OracleRule.TOP_R)
        assert gain == top
        reads += sum(1 for _, i, write in gain if not write and i < len(tgt))
    assert reads > 0  # some tokens needed more source


@pytest.mark.parametrize(("rule", "r"), [(OracleRule.TOP_R, 1), (OracleRule.GAIN, 2)])
def test_oracle_paths_are_monotone_walks(rule: OracleRule, r: int) -> None:
    data = oracle(rule, r)
    assert data.features.shape == (len(data), engine().model.cfg.d_model + 6 + 5)
    for k, pair in enumerate(pairs()):
        path = path_of(pair, rule, r)
        assert path == data.path(k)  # batching does not change a pair's path
        assert path[0][:2] == (1, 0)
        for (j, i, write), (j2, i2, _) in zip(path, path[1:], strict=False):
            assert (j2, i2) == ((j, i + 1) if write else (j + 1, i))
        assert path[-1][0] == len(pair.ends) - 1 and not path[-1][2]  # READs into the last word
        words = len(pair.bounds) - 1  # decisions are per target word
        is_start = engine().tokenizer.is_word_start
        assert words == sum(1 for t, tok in enumerate(pair.tgt) if t == 0 or is_start(tok))
        assert all(i < words for _, i, write in path if write)
        assert not any(write for _, i, write in path if i == words)  # EOS waits


@pytest.mark.parametrize("unit", [WriteUnit.WORD, WriteUnit.TOKEN])
def test_oracle_features_match_incremental_decoding(unit: WriteUnit) -> None:
    """What the online search's decoder gives the policy along the oracle path, step by step
    with a key/value cache, equals the recorded features: at each decision, those of the next
    word's first token (of the next token with token writes)."""
    model = engine().model
    data = generate_oracle(model, pairs(unit), OracleConfig(max_positions=96, attention=True))
    for k in (0, 7):
        pair = pairs(unit)[k]
        bounds = pair.bounds
        rows = (data.pair == k).nonzero().flatten()
        memory, _ = model.encode(torch.tensor([pair.src]))  # (1, S, D)
        cross = model.cross_kv(memory)
        tokens = [BOS_ID, *pair.tgt]
        past: torch.Tensor | None = None

        for row, (j, i, write) in zip(rows.tolist(), data.path(k), strict=True):
            valid = (torch.arange(len(pair.src)) < pair.ends[j - 1]).unsqueeze(0)  # (1, S)
            out = _step(model, tokens, bounds[i], past, cross, valid, attention=True)
            assert out.attention is not None
            words = word_attention(out.attention[0], list(pair.ends), j)  # (j,) as the search
            feats = policy_features(out.state, out.log_probs, torch.tensor([j]),
                                    torch.tensor([i]), torch.tensor([0.0]), words.unsqueeze(0))
            torch.testing.assert_close(feats[0], data.features[row], atol=2e-4, rtol=1e-4)
            if write:  # the whole word is written on x<=j
                for t in range(bounds[i], bounds[i + 1]):
                    out = out if t == bounds[i] else _step(model, tokens, t, past, cross, valid)
                    past = out.self_kv if past is None else torch.cat([past, out.self_kv], 3)


@pytest.mark.parametrize(("rule", "r"), [(OracleRule.TOP_R, 1), (OracleRule.GAIN, 2)])
def test_word_labels_need_every_token_of_the_word(rule: OracleRule, r: int) -> None:
    """Recomputed independently along each oracle path: a state WRITEs iff every token of the
    next reference word, decoded incrementally on x<=j as a word write would, ranks < r (or,
    with GAIN, would not with the whole source either); the last state of a column READs."""
    data = oracle(rule, r)
    for k in range(len(pairs())):
        moves = [i2 > i for (_, i, _), (_, i2, _) in zip(data.path(k), data.path(k)[1:],
                                                          strict=False)]
        assert moves == [w for _, _, w in data.path(k)[:-1]]  # oracle paths follow the labels
    assert check_labels(data, rule, r) > 0  # a first-token-only rule would be wrong there


def confident(features: torch.Tensor) -> torch.Tensor:
    """A driver unlike the oracle: WRITE iff the next token's top probability >= 0.2."""
    return features[:, engine().model.cfg.d_model + 1] >= 0.2


@pytest.mark.parametrize(("rule", "r"), [(OracleRule.TOP_R, 1), (OracleRule.GAIN, 2)])
def test_dagger_rollouts_follow_the_driver_with_oracle_labels(rule: OracleRule, r: int) -> None:
    """With a driver the walk goes where the driver says (checked on the recorded features)
    and every visited state still carries the oracle's label, recomputed independently."""
    model = engine().model
    data = generate_oracle(model, pairs(), OracleConfig(r=r, rule=rule, max_positions=96),
                           driver=confident)
    off_path = 0
    for k, pair in enumerate(pairs()):
        path = data.path(k)
        rows = (data.pair == k).nonzero().flatten()
        wants = confident(data.features[rows]).tolist()
        words = len(pair.bounds) - 1
        for (j, i, label), (j2, i2, _), want in zip(path, path[1:], wants, strict=False):
            assert (j2, i2) == ((j, i + 1) if want and i < words else (j + 1, i))
            off_path += label != (want and i < words)
        assert path[0][:2] == (1, 0) and path[-1][0] == len(pair.ends) - 1
    assert off_path > 0  # the driver disagrees with the oracle somewhere: new states
    check_labels(data, rule, r)
    # a driver that never writes visits (j, 0) only: the oracle's first-word labels per j
    never = generate_oracle(model, pairs(), OracleConfig(r=r, rule=rule),
                            driver=lambda f: torch.zeros(len(f), dtype=torch.bool))
    for k, pair in enumerate(pairs()):
        assert [(j, i) for j, i, _ in never.path(k)] == [(j, 0) for j in range(1, len(pair.ends))]
    check_labels(never, rule, r)


def check_labels(data: OracleData, rule: OracleRule, r: int,
                 walked: list[OraclePair] | None = None) -> int:
    """Assert every row's label is the word-level oracle rule, recomputed by incremental
    decoding along the recorded path (a move to i+1 is a word write on x<=j). Returns how
    many states had a passing first token but a failing later one. `walked`: the pairs
    the oracle walked (default: pairs())."""
    model = engine().model
    mixed = 0
    for k, pair in enumerate(pairs() if walked is None else walked):
        bounds, tokens = pair.bounds, [BOS_ID, *pair.tgt]
        memory, _ = model.encode(torch.tensor([pair.src]))  # (1, S, D)
        cross = model.cross_kv(memory)
        with torch.no_grad():
            full = model.decode(torch.tensor([tokens]), cross,
                                torch.full((1, len(tokens)), len(pair.src)))[0]  # (T, V)
        gold = [*pair.tgt, EOS_ID]
        past: torch.Tensor | None = None
        path = data.path(k)
        for n, (j, i, write) in enumerate(path):
            if i == len(bounds) - 1:  # next is EOS: never written before the source ends
                assert not write
                continue
            valid = (torch.arange(len(pair.src)) < pair.ends[j - 1]).unsqueeze(0)  # (1, S)
            word_past, passes = past, []
            for t in range(bounds[i], bounds[i + 1]):
                out = _step(model, tokens, t, word_past, cross, valid)
                rank = int((out.log_probs[0] > out.log_probs[0, gold[t]]).sum())
                hopeless = int((full[t] > full[t, gold[t]]).sum()) >= r
                passes.append(rank < r or (rule is OracleRule.GAIN and hopeless))
                word_past = out.self_kv if word_past is None else torch.cat(
                    [word_past, out.self_kv], 3)
            assert write == all(passes)
            mixed += passes[0] and not all(passes)
            if n + 1 < len(path) and path[n + 1][1] == i + 1:  # the walk wrote word i+1
                past = word_past
    return mixed


def _step(model: SimulTransformer, tokens: list[int], t: int, past: torch.Tensor | None,
          cross: list[KV], valid: torch.Tensor, *, attention: bool = False) -> StepOutput:
    """One incremental decoder step feeding tokens[t] at position t."""
    past_valid = None if past is None else torch.ones(1, past.shape[3], dtype=torch.bool)
    with torch.no_grad():
        return model.decode_step(torch.tensor([tokens[t]]), torch.tensor([t]),
                                 None if past is None else unstack_kv(past), past_valid, cross,
                                 valid, return_attention=attention)


# ---- training ------------------------------------------------------------------------
def test_training_reduces_the_loss() -> None:
    data = oracle()
    torch.manual_seed(1)
    cfg = engine().model.cfg
    net = PolicyNet(NetConfig(d_state=cfg.d_model, vocab_size=cfg.vocab_size, attention=True))
    net.set_normalization(data.features)
    weight = pos_weight(data.labels)
    before, _, balanced_before = evaluate(net, data, weight)
    state = fit(net, data, data, FitConfig(epochs=15, batch_size=64))
    after, _, balanced = evaluate(net, data, weight)
    assert after < 0.8 * before
    assert balanced > max(0.7, balanced_before)
    assert len(state.history) == 15 and state.history[-1].train_loss < state.history[0].train_loss


def test_pos_weight_balances_the_classes() -> None:
    assert float(pos_weight(torch.tensor([1.0, 0.0, 0.0, 0.0]))) == 3.0
    assert float(pos_weight(torch.tensor([1.0, 1.0]))) == 1.0


# ---- the policy ------------------------------------------------------------------------
def test_spec_round_trip(policy_file: Path) -> None:
    spec = f"learned:threshold=0.3,k_min=2,k_max=4,lag_min=1,path={policy_file}"
    policy = load_policy(spec)
    assert policy == LearnedPolicy(threshold=0.3, k_min=2, k_max=4, lag_min=1,
                                   path=str(policy_file))
    assert policy.spec() == spec
    assert load_policy(policy.spec()) == policy
    assert load_policy(f"learned:path={policy_file}").spec() == (
        f"learned:threshold=0.5,k_min=1,k_max=0,lag_min=1,path={policy_file}")


def test_missing_checkpoints_say_how_to_train_one(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(PolicyError, match="no policy checkpoint at .*simulmt train-policy"):
        load_policy(f"learned:path={tmp_path / 'nothing.pt'}")
    import simulmt.engine

    monkeypatch.setattr(simulmt.engine, "default_model_dir", lambda: tmp_path / "de-en")
    with pytest.raises(PolicyError, match=r"de-en/policy\.pt; train one with `simulmt train-p"):
        load_policy("learned")


def test_corrupt_checkpoints_are_refused(tmp_path: Path, policy_file: Path) -> None:
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint at all")
    with pytest.raises(PolicyError, match="corrupt or truncated"):
        LearnedPolicy(path=str(garbage))
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(policy_file.read_bytes()[:500])
    with pytest.raises(PolicyError, match="corrupt or truncated"):
        LearnedPolicy(path=str(truncated))
    other = tmp_path / "other.pt"
    torch.save({"format": "something-else"}, other)
    with pytest.raises(PolicyError, match="not a learned-policy checkpoint"):
        LearnedPolicy(path=str(other))
    broken = tmp_path / "broken.pt"
    data = torch.load(policy_file, weights_only=True)
    data["net_config"]["hidden"] = 7
    torch.save(data, broken)
    with pytest.raises(PolicyError, match="does not describe a valid network"):
        LearnedPolicy(path=str(broken))


@pytest.mark.parametrize(("args", "message"), [
    ("threshold=0", "threshold must be in (0, 1) (got 0.0)"),
    ("threshold=1.5", "threshold must be in (0, 1)"),
    ("k_min=0", "k_min must be >= 1"),
    ("k_min=3,k_max=2", "k_max must be 0 (no bound) or >= k_min=3 (got 2)"),
    ("k_max=-1", "k_max must be 0"),
    ("lag_min=4,k_max=3", "lag_min must be <= k_max=3 (got 4)"),
    ("lag_min=-1", "lag_min must be >= 0 (0: no bound) (got -1)"),
])
def test_bad_arguments(policy_file: Path, args: str, message: str) -> None:
    with pytest.raises(PolicyError) as err:
        load_policy(f"learned:{args},path={policy_file}")
    assert message in str(err.value) and "policy 'learned' accepts:" in str(err.value)


def signals_for(seed: int, d: int, v: int, words: int = 3) -> ModelSignals:
    gen = torch.Generator().manual_seed(seed)
    return ModelSignals(log_probs=torch.log_softmax(torch.randn(v, generator=gen), dim=0),
                        decoder_state=torch.randn(d, generator=gen),
                        attention=torch.softmax(torch.randn(words, generator=gen), dim=0))


def test_decide_rules_and_threshold(policy_file: Path) -> None:
    cfg = engine().model.cfg
    sig = signals_for(0, cfg.d_model, cfg.vocab_size)
    policy = LearnedPolicy(path=str(policy_file), k_min=2, k_max=3)
    assert policy.decide(Observation(5, 0, True, 0, None)) is W  # finished: no signals needed
    assert policy.decide(Observation(1, 0, False, 3, None)) is R  # below k_min
    assert policy.decide(Observation(4, 1, False, 3, None)) is W  # lag 3 = k_max
    p = policy.write_prob(Observation(3, 1, False, 3, sig))
    assert 0 < p < 1
    low = LearnedPolicy(threshold=max(p - 1e-3, 1e-6), path=str(policy_file))
    high = LearnedPolicy(threshold=min(p + 1e-3, 1 - 1e-6), path=str(policy_file))
    assert low.decide(Observation(3, 1, False, 3, sig)) is W
    assert high.decide(Observation(3, 1, False, 3, sig)) is R
    eager = LearnedPolicy(threshold=1e-6, lag_min=1, k_max=3, path=str(policy_file))
    sig4 = signals_for(0, cfg.d_model, cfg.vocab_size, words=4)
    assert eager.decide(Observation(4, 3, False, 6, sig4)) is W  # lag 1: the network writes
    assert eager.decide(Observation(3, 3, False, 6, sig)) is R  # lag 0 < lag_min: never ahead
    assert LearnedPolicy(threshold=1e-6, path=str(policy_file)).decide(
        Observation(3, 3, False, 6, sig)) is R  # lag_min=1 by default
    assert LearnedPolicy(threshold=1e-6, lag_min=0, path=str(policy_file)).decide(
        Observation(3, 3, False, 6, sig)) is W  # without the bound it would have written
    with pytest.raises(PolicyError, match="needs Signal.DISTRIBUTION and Signal.DECODER_STATE"):
        policy.decide(Observation(3, 1, False, 3, None))
    with pytest.raises(PolicyError, match="decoder states of size 32 and 200 tokens"):
        policy.decide(Observation(3, 1, False, 3, signals_for(0, 16, cfg.vocab_size)))


SENTENCES = [src for src, _ in _tiny_pairs()]


def run_session(
    policy: LearnedPolicy, sentences: list[str], *, unit: WriteUnit = WriteUnit.WORD
) -> list[tuple[str, list[int], int]]:
    """(final text, delays, source words) per sentence, checking the streaming guarantees."""
    session = Session(engine(), policy=policy, options=SearchOptions(unit=unit))
    updates = [u for s in sentences for w in s.split() for u in session.push(w)]
    updates += session.finish()
    out = []
    for sid, sentence in enumerate(sentences):
        mine = [u for u in updates if u.sentence_id == sid]
        finals = [u for u in mine if u.final]
        assert len(finals) == 1 and finals[-1] is mine[-1]
        joined = "".join(u.committed_delta for u in mine)
        assert finals[0].text == joined  # committed text is never retracted
        delays = [d for u in mine for d in u.delays]
        assert len(delays) == len(joined.split()) == finals[0].committed_len
        n = len(sentence.split())
        assert delays == sorted(delays) and all(1 <= d <= n for d in delays)
        out.append((joined, delays, n))
    return out


@settings(max_examples=12, deadline=None)
@given(threshold=st.floats(0.02, 0.98), k_min=st.integers(1, 3), k_max=st.integers(0, 5),
       lag_min=st.integers(0, 3),
       picks=st.lists(st.integers(0, len(SENTENCES) - 1), min_size=1, max_size=3))
def test_session_guarantees(policy_file: Path, threshold: float, k_min: int, k_max: int,
                            lag_min: int, picks: list[int]) -> None:
    k_max = 0 if k_max < k_min else k_max
    lag_min = min(lag_min, k_max) if k_max else lag_min
    policy = LearnedPolicy(threshold=threshold, k_min=k_min, k_max=k_max, lag_min=lag_min,
                           path=str(policy_file))
    run_session(policy, [SENTENCES[i] for i in picks])


def test_threshold_spans_the_latency_range(policy_file: Path) -> None:
    """At word level, the unit its oracle walks."""
    def mean_delay(threshold: float) -> float:
        results = run_session(LearnedPolicy(threshold=threshold, path=str(policy_file)),
                              SENTENCES[:12])
        delays = [d / n for _, ds, n in results for d in ds]
        return sum(delays) / len(delays)

    eager, balanced, patient = mean_delay(0.02), mean_delay(0.5), mean_delay(0.98)
    assert eager <= balanced <= patient and eager < patient - 0.1


def test_usable_by_spec_in_a_session(policy_file: Path) -> None:
    session = Session(engine(), policy=f"learned:threshold=0.5,path={policy_file}")
    updates = session.push(SENTENCES[0]) + session.finish()
    assert updates[-1].final and updates[-1].text


# ---- cross-attention features ------------------------------------------------------------
def test_attention_features_values() -> None:
    att = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.6, 0.4, 0.0, 0.0]])  # (2, 4), row 1 read 2
    feats = attention_features(att, torch.tensor([4, 2]))  # (2, 5)
    entropy = [-sum(p * torch.log(torch.tensor(p)).item() for p in row if p > 0)
               for row in ([0.1, 0.2, 0.3, 0.4], [0.6, 0.4])]
    want = torch.tensor([[0.4, 0.7, 0.9, 0.0, entropy[0]],  # argmax = the last word
                         [0.4, 1.0, 1.0, float(torch.log1p(torch.tensor(1.0))), entropy[1]]])
    torch.testing.assert_close(feats, want)


def test_decode_signals_is_decode_with_what_the_policy_reads() -> None:
    model = engine().model
    pair = pairs()[3]
    memory, _ = model.encode(torch.tensor([pair.src]))
    cross = model.cross_kv(memory)
    tgt = torch.tensor([[BOS_ID, *pair.tgt]])  # (1, T)
    vis = torch.tensor([[pair.ends[min(t, len(pair.ends) - 1)] for t in range(tgt.shape[1])]])
    with torch.no_grad():
        logits, states, attn = model.decode_signals(tgt, cross, vis)
        torch.testing.assert_close(logits, model.decode(tgt, cross, vis))
    assert states.shape == (1, tgt.shape[1], model.cfg.d_model)
    torch.testing.assert_close(attn.sum(-1), torch.ones(1, tgt.shape[1]))  # (1, T) softmax rows
    src_pos = torch.arange(len(pair.src)).view(1, 1, -1)
    assert float(attn[src_pos.expand_as(attn) >= vis.unsqueeze(-1)].abs().sum()) == 0.0  # unseen


def test_a_policy_with_attention_asks_for_it_and_an_older_one_does_not(
        policy_file: Path, plain_policy_file: Path) -> None:
    with_att = LearnedPolicy(path=str(policy_file))
    plain = LearnedPolicy(path=str(plain_policy_file))
    assert Signal.ATTENTION in with_att.needs and Signal.ATTENTION not in plain.needs
    assert Signal.ATTENTION not in LearnedPolicy.needs  # per instance, not for the class
    cfg = engine().model.cfg
    sig = signals_for(0, cfg.d_model, cfg.vocab_size)
    assert 0 < plain.write_prob(Observation(3, 1, False, 3, sig)) < 1
    no_att = ModelSignals(log_probs=sig.log_probs, decoder_state=sig.decoder_state)
    assert 0 < plain.write_prob(Observation(3, 1, False, 3, no_att)) < 1
    with pytest.raises(PolicyError, match="reads cross-attention"):
        with_att.write_prob(Observation(3, 1, False, 3, no_att))
    with pytest.raises(PolicyError, match=r"shape \(src_read,\)"):
        with_att.write_prob(Observation(4, 1, False, 3, sig))  # 3 words of attention, 4 read
    for policy in (with_att, plain):  # both run in a session: the search fills what they need
        assert all(text for text, _, _ in run_session(policy, SENTENCES[:3]))


def test_attention_changes_the_decision_signal(policy_file: Path) -> None:
    """The trained net reads the attention columns: moving the attention from the first word
    to the last changes P(WRITE)."""
    cfg = engine().model.cfg
    sig = signals_for(0, cfg.d_model, cfg.vocab_size)
    policy = LearnedPolicy(path=str(policy_file))
    probs = []
    for att in ([0.9, 0.05, 0.05], [0.05, 0.05, 0.9]):
        obs = Observation(3, 1, False, 3, ModelSignals(
            log_probs=sig.log_probs, decoder_state=sig.decoder_state,
            attention=torch.tensor(att)))
        probs.append(policy.write_prob(obs))
    assert abs(probs[0] - probs[1]) > 1e-4


def test_dagger_driver_without_attention_reads_the_leading_columns(
        policy_file: Path, plain_policy_file: Path) -> None:
    from simulmt.policies.learned import load_net
    from simulmt.policies.train_policy import JobConfig, dagger_driver

    job = JobConfig(model="m", data="d", src="de", tgt="en", pairs=1, dev_pairs=0, max_len=100,
                    r=2, rule="gain", seed=0, attention=True)
    feats = oracle(attention=True).features  # (N, D + 6 + 5)
    drive = dagger_driver(plain_policy_file, job, engine())
    net = load_net(plain_policy_file)
    want = net.write_prob(feats[:, :net.cfg.n_features]) >= 0.5
    assert torch.equal(drive(feats), want)
    torch.testing.assert_close(feats[:, :net.cfg.n_features], oracle(attention=False).features)
    plain_job = JobConfig(**{**job.__dict__, "attention": False})
    with pytest.raises(ValueError, match="with --attention too"):
        dagger_driver(policy_file, plain_job, engine())


def test_a_net_without_the_state_ignores_it() -> None:
    cfg = engine().model.cfg
    torch.manual_seed(0)
    net = PolicyNet(NetConfig(d_state=cfg.d_model, vocab_size=cfg.vocab_size, attention=True,
                              state=False)).eval()
    data = oracle()
    net.set_normalization(data.features)
    feats = data.features[:20]
    other = feats.clone()
    other[:, :cfg.d_model] = torch.randn(20, cfg.d_model)  # another decoder state
    torch.testing.assert_close(net.write_prob(feats), net.write_prob(other))
    other[:, cfg.d_model + 1] += 0.5  # the top probability does count
    assert not torch.allclose(net.write_prob(feats), net.write_prob(other))
    with_state = PolicyNet(NetConfig(d_state=cfg.d_model, vocab_size=cfg.vocab_size))
    assert sum(p.numel() for p in with_state.parameters()) > sum(
        p.numel() for p in net.parameters())


def test_model_targets_are_the_models_full_sentence_translations() -> None:
    """--targets model: the oracle walks the model's own greedy translations, and its labels
    (top-r, r=1) are still the rule recomputed along each path: WRITE iff the prefix's
    argmax is the word the whole sentence gives."""
    from simulmt.policies.oracle import with_model_targets

    from simulmt.search.offline import greedy_decode

    model, tok = engine().model, engine().tokenizer
    walked = with_model_targets(model, pairs(), tok.is_word_start, batch=5)
    hyps = greedy_decode(model, [p.src for p in pairs()], [p.ends for p in pairs()])
    assert [p.tgt for p in walked] == [tuple(h) for h in hyps if h]
    for pair in walked:
        assert pair.tgt_starts == tuple(t for t, x in enumerate(pair.tgt)
                                        if t == 0 or tok.is_word_start(x))
    data = generate_oracle(model, walked, OracleConfig(r=1, rule=OracleRule.TOP_R,
                                                        max_positions=96))
    check_labels(data, OracleRule.TOP_R, 1, walked)
    assert 0 < float(data.labels.mean()) < 1
