"""Train the learned read/write policy on oracle actions of a model (`simulmt train-policy`).

    simulmt train-policy --model MODEL_DIR --data CORPUS_DIR --out policy.pt

Steps: sample `--pairs` training pairs (and `--dev-pairs` dev pairs) of the corpus, walk them
with the model to get oracle READ/WRITE states (simulmt.policies.oracle; progress bar; saved
in chunks to OUT.oracle.pt so `--resume` continues), train the network (class-balanced BCE;
a line per epoch with dev accuracy; the checkpoint OUT is written after every epoch so
`--resume` continues), then delete the oracle cache. Use it with `learned:path=OUT`.

One DAgger round (Ross et al. 2011): `--dagger PREV.pt` adds the states a trained policy
visits on the same training pairs, labelled by the oracle (`generate_oracle(driver=...)`), to
the oracle-path states. The oracle paths alone never show the network the states its own
READ/WRITE mistakes lead to.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from simulmt.policies.base import PolicyError
from simulmt.policies.learned_net import (
    NetConfig,
    PolicyNet,
    read_policy_file,
    save_policy,
)
from simulmt.policies.learned_train import FitConfig, FitState, fit
from simulmt.policies.oracle import (
    Driver,
    OracleConfig,
    OracleData,
    OraclePair,
    OracleRule,
    generate_oracle,
    make_pairs,
    n_features,
    with_model_targets,
)
from tqdm import tqdm

from simulmt.data.tokenizer import TokenizerError
from simulmt.search.options import WriteUnit

log = logging.getLogger(__name__)
CACHE_FORMAT = "simulmt-oracle-v2"  # v2: word-level decision points
CHUNK_PAIRS = 500  # oracle pairs between cache saves (what an interruption can lose)


@dataclass(frozen=True)
class JobConfig:
    """Everything that determines the oracle data; a resumed run must match it."""

    model: str  # fingerprint of the translation model's weights
    data: str  # corpus folder
    src: str
    tgt: str
    pairs: int  # training pairs sampled
    dev_pairs: int  # dev pairs sampled
    max_len: int  # longest pair side in tokens
    r: int
    rule: str
    seed: int
    unit: str = WriteUnit.WORD.value  # the decision points: per target word (or token)
    dagger: str = ""  # sha256 of the policy file whose rollouts are added ("": none)
    dagger_threshold: float = 0.5  # its P(WRITE) threshold while rolling out
    attention: bool = False  # the states' features include the cross-attention ones
    targets: str = "reference"  # walk the references, or the model's own translations
    word_end: bool = False  # a WRITE label also needs the next word's first token (oracle)


# The shipped policy's oracle, the CLI's defaults (README, "Adaptive policies"): the model's own
# translations, top-1, with the word-end look-ahead. OracleConfig's own defaults are Zheng et
# al.'s rule on the references, as earlier releases trained.
RECIPE = OracleConfig(r=1, rule=OracleRule.TOP_R, word_end=True)
RECIPE_TARGETS = "model"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", type=Path, default=None,
                        help="model folder or model.pt (default: the bundled de-en model)")
    parser.add_argument("--data", type=Path, required=True,
                        help="corpus folder with train.SRC/TGT and dev.SRC/TGT")
    parser.add_argument("--out", type=Path, required=True, help="policy checkpoint to write")
    parser.add_argument("--src", help="source language (default: the model's)")
    parser.add_argument("--tgt", help="target language (default: the model's)")
    parser.add_argument("--pairs", type=int, default=4000, help="training pairs (default 4000)")
    parser.add_argument("--dev-pairs", type=int, default=300, help="dev pairs (default 300)")
    parser.add_argument("--max-len", type=int, default=100,
                        help="skip pairs with a side longer than this many tokens (default 100)")
    parser.add_argument("--r", type=int, default=RECIPE.r,
                        help="oracle rank bound: WRITE if the target token is in the model's "
                             f"top r (default {RECIPE.r})")
    parser.add_argument("--oracle", choices=[r.value for r in OracleRule],
                        default=RECIPE.rule.value,
                        help="oracle rule: top-r (Zheng et al. 2019; default) or gain (READ "
                             "only where the whole source would bring the token into the top r)")
    parser.add_argument("--unit", choices=[u.value for u in WriteUnit],
                        default=WriteUnit.WORD.value,
                        help="decision points of the oracle: per target word, as the search "
                             "decides (default), or per token (for --unit token evaluation)")
    parser.add_argument("--dagger", type=Path, default=None, metavar="PREV.pt",
                        help="one DAgger round: also train on the states this policy (trained "
                             "for the same model) visits on the training pairs, labelled by "
                             "the oracle")
    parser.add_argument("--dagger-threshold", type=float, default=0.5,
                        help="P(WRITE) threshold of the --dagger policy's rollouts (default 0.5)")
    parser.add_argument("--attention", action=argparse.BooleanOptionalAction, default=False,
                        help="also give the network the cross-attention features (AlignAtt's "
                             "signal); off by default: on the bundled model they made the "
                             "oracle easier to predict but the policy no better (README), "
                             "and they cost the search an attention pass per decision")
    parser.add_argument("--state", action=argparse.BooleanOptionalAction, default=True,
                        help="give the network the decoder state (default: yes; --no-state: "
                             "the scalar and attention features only)")
    parser.add_argument("--word-end", action=argparse.BooleanOptionalAction,
                        default=RECIPE.word_end,
                        help="word units: label a word WRITE only if the next word's first "
                             "token passes the rule too (the search ends a word there), so a "
                             "word whose end the prefix cannot tell is a READ (default: on)")
    parser.add_argument("--targets", choices=["reference", "model"], default=RECIPE_TARGETS,
                        help="what the oracle walks: the model's own full-sentence greedy "
                             "translations (default; with --r 1: WRITE once the prefix predicts "
                             "what the whole sentence would), or the corpus's references")
    parser.add_argument("--epochs", type=int, default=FitConfig.epochs,
                        help=f"passes over the oracle states (default {FitConfig.epochs})")
    parser.add_argument("--batch-size", type=int, default=FitConfig.batch_size,
                        help=f"states per update (default {FitConfig.batch_size})")
    parser.add_argument("--lr", type=float, default=FitConfig.lr,
                        help=f"AdamW learning rate (default {FitConfig.lr})")
    parser.add_argument("--hidden", type=int, default=64, help="hidden units (default 64)")
    parser.add_argument("--seed", type=int, default=0,
                        help="pair sampling, initialization and shuffling (default 0)")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    parser.add_argument("--resume", action="store_true",
                        help="continue an interrupted run (oracle cache and/or epochs)")
    parser.add_argument("--keep-oracle", action="store_true",
                        help="keep OUT.oracle.pt (the oracle states) after training")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except (PolicyError, ValueError, OSError, TokenizerError) as e:
        print(f"simulmt train-policy: {e}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    from simulmt.engine import Engine

    if args.pairs < 1 or args.dev_pairs < 0 or args.max_len < 2:
        raise ValueError(f"--pairs must be >= 1, --dev-pairs >= 0 and --max-len >= 2 (got "
                         f"{args.pairs}, {args.dev_pairs}, {args.max_len})")
    oracle_cfg = OracleConfig(r=args.r, rule=OracleRule(args.oracle), attention=args.attention,
                              word_end=args.word_end)
    fit_cfg = FitConfig(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                        seed=args.seed)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    engine = Engine.load(args.model)
    if args.dagger is not None and not 0 < args.dagger_threshold < 1:
        raise ValueError(f"--dagger-threshold must be in (0, 1) (got {args.dagger_threshold})")
    job = JobConfig(model=fingerprint(engine.model), data=str(args.data.resolve()),
                    src=args.src or engine.info.src, tgt=args.tgt or engine.info.tgt,
                    pairs=args.pairs, dev_pairs=args.dev_pairs, max_len=args.max_len,
                    r=oracle_cfg.r, rule=oracle_cfg.rule.value, seed=args.seed,
                    unit=args.unit,
                    dagger=file_hash(args.dagger) if args.dagger is not None else "",
                    dagger_threshold=args.dagger_threshold, attention=args.attention,
                    targets=args.targets, word_end=args.word_end)
    resume = _resume_data(args, job)  # checked before the (long) oracle generation
    start = time.perf_counter()
    driver = dagger_driver(args.dagger, job, engine) if args.dagger is not None else None
    train, dev = oracle_data(engine, job, oracle_cfg, cache_path(args.out),
                             resume=args.resume, quiet=args.no_progress, driver=driver)
    minutes = (time.perf_counter() - start) / 60
    print(f"oracle: {len(train)} training states ({share(train):.1%} WRITE) from "
          f"{job.pairs} pairs{' and their --dagger rollouts' if driver else ''}, "
          f"{len(dev)} dev states, {minutes:.1f} min")
    _train(args, engine, job, fit_cfg, (train, dev), resume)
    if not args.keep_oracle:
        cache_path(args.out).unlink(missing_ok=True)
    return 0


def dagger_driver(path: Path, job: JobConfig, engine: Any) -> Driver:
    """The rollout decisions of a trained policy: P(WRITE) >= threshold on the features."""
    from simulmt.policies.learned import load_net

    net = load_net(path)
    cfg = engine.model.cfg
    if (net.cfg.d_state, net.cfg.vocab_size) != (cfg.d_model, cfg.vocab_size):
        raise ValueError(f"--dagger {path} was trained for another model (decoder state "
                         f"{net.cfg.d_state}, {net.cfg.vocab_size} tokens)")
    if net.cfg.attention and not job.attention:
        raise ValueError(f"--dagger {path} reads the cross-attention features: train this "
                         "round with --attention too")
    cols = net.cfg.n_features  # a net without attention reads the leading columns only
    return lambda features: net.write_prob(features[:, :cols]) >= job.dagger_threshold


def file_hash(path: Path) -> str:
    """sha256 of a file (a resumed --dagger run must roll out the same policy)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    except OSError as e:
        raise ValueError(f"--dagger {path}: {e}") from None


def _train(args: argparse.Namespace, engine: Any, job: JobConfig, fit_cfg: FitConfig,
           data: tuple[OracleData, OracleData], resume: dict[str, Any] | None) -> None:
    """Fit the network on the oracle states, saving OUT after every epoch."""
    train, dev = data
    torch.manual_seed(fit_cfg.seed)
    net = PolicyNet(NetConfig(d_state=engine.model.cfg.d_model,
                              vocab_size=engine.model.cfg.vocab_size, hidden=args.hidden,
                              attention=job.attention, state=args.state))
    state = None
    if resume is not None:
        state = FitState.from_dict(resume, net)  # the interrupted run's weights, into net
        print(f"resuming training after epoch {state.epoch}")
    else:
        net.set_normalization(train.features)
    meta = {"model": engine.info.name, "job": asdict(job), "fit": asdict(fit_cfg),
            "train_states": len(train), "write_share": share(train)}

    def save(st: FitState) -> None:
        best = PolicyNet(net.cfg)
        best.load_state_dict(st.best or net.state_dict())
        last = st.history[-1]
        tqdm.write(f"epoch {last.epoch}/{fit_cfg.epochs}: train loss {last.train_loss:.4f}, "
                   f"dev loss {last.dev_loss:.4f}, dev accuracy {last.dev_accuracy:.1%} "
                   f"(balanced {last.dev_balanced:.1%})")
        save_policy(args.out, best, meta={**meta, "history": [asdict(h) for h in st.history]},
                    resume=st.to_dict(net))

    total = len(train) * (fit_cfg.epochs - (state.epoch if state else 0))
    with tqdm(total=total, unit="state", disable=args.no_progress, desc="training") as bar:
        final = fit(net, train, dev, fit_cfg, state=state, on_epoch=save, progress=bar.update)
    best = min(final.history, key=lambda h: h.dev_loss)
    print(f"best epoch {best.epoch}: dev accuracy {best.dev_accuracy:.1%} (balanced "
          f"{best.dev_balanced:.1%}); saved {args.out}; use it as learned:path={args.out}")


def _resume_data(args: argparse.Namespace, job: JobConfig) -> dict[str, Any] | None:
    """The training state of OUT to continue from, if --resume and OUT exists."""
    if not (args.resume and args.out.exists()):
        return None
    data = read_policy_file(args.out)
    if data["meta"].get("job") != asdict(job) or "resume" not in data:
        raise ValueError(f"{args.out} was trained with other settings or cannot be resumed; "
                         "run without --resume to start over")
    return dict(data["resume"])


def share(data: OracleData) -> float:
    return float(data.labels.mean()) if len(data) else 0.0


def fingerprint(model: torch.nn.Module) -> str:
    """A short hash of a model's weights (a policy belongs to the model it was trained on)."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().float().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def cache_path(out: Path) -> Path:
    return out.with_name(out.name + ".oracle.pt")


def sample_pairs(engine: Any, job: JobConfig, split: str, n: int) -> list[OraclePair]:
    """n usable pairs of a split, drawn at random (seeded) without replacement."""
    from simulmt.data.corpus import read_parallel

    texts = read_parallel(Path(job.data), split, job.src, job.tgt)
    order = list(range(len(texts)))
    random.Random(job.seed).shuffle(order)
    out: list[OraclePair] = []
    for k in order:
        if len(out) >= n:
            break
        out += make_pairs(engine.tokenizer, [texts[k]], max_len=job.max_len,
                          unit=WriteUnit(job.unit))
    if len(out) < n:
        log.warning("%s split: only %d usable pairs (asked for %d)", split, len(out), n)
    if job.targets == "model":
        out = with_model_targets(engine.model, out, engine.tokenizer.is_word_start)
    return out


def oracle_data(engine: Any, job: JobConfig, cfg: OracleConfig, cache: Path, *, resume: bool,
                quiet: bool, driver: Driver | None = None) -> tuple[OracleData, OracleData]:
    """Training and dev oracle states, generated in chunks saved to `cache` (resumable). With
    a driver the training pairs are walked twice: along the oracle's paths and along the
    driver's (pair indices len(pairs)… for the second walk); dev stays on the oracle's."""
    n_feats = n_features(engine.model, cfg)
    saved = _read_cache(cache, job) if resume and cache.exists() else None
    train_pairs = sample_pairs(engine, job, "train", job.pairs)
    dev_pairs = sample_pairs(engine, job, "dev", job.dev_pairs) if job.dev_pairs else []
    parts = [OracleData(**saved["train"])] if saved else []
    done = int(saved["done"]) if saved else 0
    model = engine.model
    walks = [None] if driver is None else [None, driver]
    with tqdm(total=len(train_pairs) * len(walks), initial=done, unit="pair", disable=quiet,
              desc="oracle") as bar:
        while done < len(train_pairs) * len(walks):
            walk, start = divmod(done, len(train_pairs))
            chunk = train_pairs[start:start + CHUNK_PAIRS]
            data = generate_oracle(model, chunk, cfg, progress=bar.update, driver=walks[walk])
            parts.append(OracleData(data.features, data.labels, data.pair + done,
                                    data.src_read, data.tgt_written))
            done += len(chunk)
            train = OracleData.cat(parts, n_feats)
            parts = [train]
            _write_cache(cache, job, train, done)
    train = OracleData.cat(parts, n_feats)
    dev = generate_oracle(model, dev_pairs, cfg) if dev_pairs else OracleData.cat([], n_feats)
    return train, dev


def _read_cache(path: Path, job: JobConfig) -> dict[str, Any]:
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # any unreadable cache: say which file and how to recover
        raise ValueError(f"oracle cache {path} is unreadable ({e}); delete it or run without "
                         "--resume") from None
    if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT:
        raise ValueError(f"{path} is not an oracle cache; delete it or run without --resume")
    if data.get("job") != asdict(job):
        raise ValueError(f"oracle cache {path} was made with other settings ({data.get('job')});"
                         " delete it or run without --resume")
    return data


def _write_cache(path: Path, job: JobConfig, train: OracleData, done: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"format": CACHE_FORMAT, "job": asdict(job), "train": train.to_dict(),
                "done": done}, tmp)
    tmp.replace(path)
