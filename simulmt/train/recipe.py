"""One short GPU run, end to end (`scripts/gpu-train.sh`): unpack the corpus, train, evaluate on
the news dev set, and leave in OUT what must come back: a log, the scores, and either the
teacher's translations of the training sources (stage `teacher`) or the student's weights in
pieces of at most 16 MiB (stage `student`). `join` turns the pieces back into a model folder.

Built for a machine that has torch, sentencepiece, sacrebleu and numpy and nothing else, runs
under a hard wall-clock limit and keeps nothing between runs: every stage watches the clock and
writes what it has before its time is up, and nothing it needs later (optimizer state) is left
behind on the machine.

    python -m simulmt.train.recipe teacher --pack cache/corpus-pack --out $OUT [--minutes 8.5]
    python -m simulmt.train.recipe student --pack cache/corpus-pack --out $OUT \
        --distill cache/gpu/train.distill.en.xz [--init-from MODEL_DIR|PIECES_DIR]
    python -m simulmt.train.recipe join PIECES_DIR --out MODEL_DIR
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import lzma
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sacrebleu
import torch

from simulmt.data.corpus import iter_split_side, read_parallel
from simulmt.data.pack import unpack_corpus
from simulmt.data.tokenizer import Tokenizer
from simulmt.input.words import FULL
from simulmt.model.transformer import SimulTransformer
from simulmt.train import dev
from simulmt.train.config import TrainConfig
from simulmt.train.flops import H100_BF16_TFLOPS, step_flops
from simulmt.train.pieces import find_index, join_pieces, split_file

log = logging.getLogger("simulmt.recipe")

DEV_SET = "newstest2013"  # the news dev set, packed beside the corpus (`data pack --extra`)
DISTILL_FILE = "train.distill.en"
# sentences per greedy batch when distilling on a GPU: each decoder step costs a few hundred
# kernel launches and one read-back whatever the batch, so larger batches finish sooner
DISTILL_GPU_BATCH = 2048
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
CONFIGS = {"teacher": Path("configs/gpu-teacher.toml"), "student": Path("configs/gpu-student.toml")}


@dataclass(frozen=True)
class RecipeConfig:
    stage: str  # teacher | student
    pack: Path  # the packed corpus (`simulmt data pack`)
    out: Path  # what comes back: log, scores, translations or weight pieces
    work: Path = Path("/tmp/simulmt-gpu")  # unpacked corpus and run folders (left behind)
    config: Path | None = None  # training config (default: CONFIGS[stage])
    overrides: tuple[str, ...] = ()  # `--set key=value` for the training config
    # wall minutes for the whole stage: a 10-minute run less 1.5 for Python, torch and CUDA to
    # start, the last checkpoint and the files to be collected
    minutes: float = 8.5
    eval_minutes: float = 0.5  # kept free at the end for the dev-set evaluation
    distill_minutes: float = 2.0  # teacher: kept free for translating the training sources
    export_minutes: float = 0.3  # student: kept free for writing the weights
    distill: Path | None = None  # student: the teacher's translations (.xz or text)
    init_from: Path | None = None  # student: begin from a model folder or its pieces
    name: str = "simulmt-de-en-gpu"  # the exported model's name


class Clock:
    """The stage's deadline and the seconds each step took."""

    def __init__(self, minutes: float) -> None:
        self.start = time.time()
        self.deadline = self.start + minutes * 60
        self.seconds: dict[str, float] = {}
        self._mark = self.start

    def left(self) -> float:
        """Seconds until the deadline."""
        return self.deadline - time.time()

    def done(self, step: str) -> None:
        now = time.time()
        self.seconds[step] = round(now - self._mark, 1)
        self._mark = now
        log.info("%s done in %.1f s (%.1f s left)", step, self.seconds[step], self.left())


def training_config(rc: RecipeConfig, corpus: Path, extra: list[str]) -> TrainConfig:
    path = rc.config or CONFIGS[rc.stage]
    cfg = TrainConfig.from_toml(path)
    return cfg.override([f"data={corpus}", f"out={rc.work / rc.stage}", *extra, *rc.overrides])


def train(rc: RecipeConfig, cfg: TrainConfig, clock: Clock, reserve_minutes: float) -> Any:
    """Train until the config's max_steps or the stage's clock less `reserve_minutes`."""
    from simulmt.train.loop import Trainer  # after the corpus is there

    trainer = Trainer(cfg)
    clock.done("tokenize+build")
    budget = max(clock.left() / 60 - reserve_minutes, 0.05)
    if cfg.max_minutes:
        budget = min(budget, cfg.max_minutes)
    trainer.cfg = dataclasses.replace(trainer.cfg, max_minutes=budget)
    log.info("training for at most %.2f minutes (%d steps)", budget, cfg.max_steps)
    progress = trainer.run()
    clock.done("train")
    log.info("trained %d steps, %d epochs, %.0f s", progress.step, progress.epoch,
             progress.seconds)
    return trainer


def throughput(trainer: Any) -> dict[str, float]:
    """Real tokens/s and model FLOPs/s of the run, from the mean over an epoch's batches (the
    run trains on a uniform draw of them) and the loop's wall time; MFU against the H100/H200
    dense bf16 peak on a GPU."""
    lengths = [(len(e.src), len(e.tgt) + 1) for e in trainer.train]  # written source's length
    batches = max(len(trainer.batches), 1)
    steps, seconds = trainer.progress.step, max(trainer.progress.seconds, 1e-9)
    tokens = sum(s + t for s, t in lengths) / batches * steps
    flops = step_flops(trainer.cfg.model, lengths) / batches * steps
    out = {"tokens_per_s": round(tokens / seconds), "model_tflops_per_s":
           round(flops / seconds / 1e12, 3), "seconds": round(seconds, 1)}
    if trainer.device.type == "cuda":
        out["mfu_vs_989_tflops"] = round(flops / seconds / (H100_BF16_TFLOPS * 1e12), 4)
    log.info("throughput %s", out)
    return out


def evaluate(model: SimulTransformer, tok: Tokenizer, corpus: Path) -> dict[str, Any]:
    """Greedy full-sentence and wait-3 BLEU on the news dev set (or the corpus's dev split if
    the pack has no news set), with sacrebleu's signature."""
    name = DEV_SET if (corpus / f"{DEV_SET}.de").is_file() else "dev"
    pairs = list(zip(read_side(corpus, name, "de"), read_side(corpus, name, "en"), strict=True))
    refs = [[t for _, t in pairs]]
    scores: dict[str, Any] = {"set": name, "sentences": len(pairs)}
    for label, k in (("full", FULL), ("wait3", 3)):
        started = time.time()
        hyps = dev.translate(model, tok, [s for s, _ in pairs], k=k)
        metric = sacrebleu.BLEU()
        score = metric.corpus_score(hyps, refs)
        scores[label] = {"bleu": round(score.score, 2), "signature": str(metric.get_signature()),
                         "seconds": round(time.time() - started, 1)}
        log.info("%s %s: BLEU %.2f (%s)", name, label, score.score, metric.get_signature())
    return scores


def read_side(corpus: Path, name: str, lang: str) -> list[str]:
    """Lines of corpus/NAME.LANG for any NAME (the packed news set as well as the splits)."""
    if name in ("train", "dev", "test"):
        return list(iter_split_side(corpus, name, lang))
    return (corpus / f"{name}.{lang}").read_text(encoding="utf-8").removesuffix("\n").split("\n")


def distill(model: SimulTransformer, tok: Tokenizer, corpus: Path, out: Path,
            clock: Clock, *, reserve_s: float = 30.0, chunk: int = 20_000) -> int:
    """The teacher's full-sentence translation of every training source, one line each, written
    to `out` as one xz stream per chunk of lines as each is done (a run cut off by its time
    limit still returns the chunks before); sources the clock leaves no time for stay empty
    (the student keeps their references). Returns the number translated."""
    sources = [s for s, _ in read_parallel(corpus, "train", "de", "en")]
    on_gpu = next(model.parameters()).device.type == "cuda"
    batch = DISTILL_GPU_BATCH if on_gpu else None  # None: translate's own default
    done, per_chunk = 0, 0.0
    with open(out, "wb") as f:
        for start in range(0, len(sources), chunk):
            if clock.left() < per_chunk + reserve_s:  # the last chunk's time would overrun
                break
            began = time.time()
            part = sources[start : start + chunk]
            hyps = dev.translate(model, tok, part, k=FULL, batch=batch)
            text = "".join(hyp.replace("\n", " ") + "\n" for hyp in hyps)
            f.write(lzma.compress(text.encode("utf-8"), preset=9))  # it must travel back
            f.flush()
            done += len(part)
            per_chunk = time.time() - began
            log.info("distilled %d of %d sources (%.0f s for the last %d)", done, len(sources),
                     per_chunk, len(part))
        if done < len(sources):  # the rest keep their references
            f.write(lzma.compress(b"\n" * (len(sources) - done), preset=9))
    clock.done("distill")
    return done


def read_distill(path: Path, lines: int) -> str:
    """The teacher's translations (.xz, as the teacher stage writes them, or text) for a
    training split of `lines` lines; a file cut short by its run's time limit is padded with
    empty lines (their references stay)."""
    data = path.read_bytes()
    if path.suffix == ".xz":
        decompressor = lzma.LZMADecompressor()
        text, rest = b"", data
        while rest:  # one stream per chunk; a truncated last stream gives what it holds
            try:
                text += decompressor.decompress(rest)
            except lzma.LZMAError:
                break
            rest = decompressor.unused_data
            if not decompressor.eof:
                break
            decompressor = lzma.LZMADecompressor()
        text = text[: text.rfind(b"\n") + 1]  # whole lines only
        data = text
    got = data.decode("utf-8").splitlines()
    if len(got) < lines:
        log.warning("%s has %d of %d lines (its run was cut short): the rest keep their "
                    "references", path, len(got), lines)
        got += [""] * (lines - len(got))
    return "".join(line + "\n" for line in got)


def init_model_folder(source: Path, work: Path) -> Path:
    """A model folder to warm-start from: `source` itself, or its pieces joined under work."""
    if (source / "model.pt").is_file() or source.is_file():
        return source
    return join_model(source, work / "init")


def join_model(pieces: Path, out: Path) -> Path:
    """A loadable model folder (model.pt, spm.model, config.json) from a folder of pieces."""
    from simulmt.model.checkpoint import load_checkpoint
    from simulmt.train.export import write_model_folder

    tmp = out / "joined"
    path = join_pieces(find_index(pieces), tmp)
    write_model_folder(out, load_checkpoint(path))
    shutil.rmtree(tmp)
    return out


def run_stage(rc: RecipeConfig) -> dict[str, Any]:
    clock = Clock(rc.minutes)
    rc.out.mkdir(parents=True, exist_ok=True)
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    log.info("stage %s on %s, torch %s, %.1f minutes", rc.stage, device, torch.__version__,
             rc.minutes)
    corpus = rc.work / "corpus"
    unpack_corpus(rc.pack, corpus)
    clock.done("unpack")
    extra: list[str] = []
    if rc.stage == "student" and rc.distill is not None:
        n = sum(1 for _ in iter_split_side(corpus, "train", "de"))
        if (corpus / "train.en").is_file():
            (corpus / DISTILL_FILE).write_text(read_distill(rc.distill, n), encoding="utf-8")
            extra.append(f"distill={corpus / DISTILL_FILE}")
        else:  # a pack without the references (less to carry): the teacher's are the targets
            (corpus / "train.en").write_text(read_distill(rc.distill, n), encoding="utf-8")
            log.info("the pack has no train.en: the teacher's translations are the targets")
    if rc.stage == "student" and rc.init_from is not None:
        extra.append(f"init_from={init_model_folder(rc.init_from, rc.work)}")
    reserve = rc.eval_minutes + (rc.distill_minutes if rc.stage == "teacher"
                                 else rc.export_minutes)
    trainer = train(rc, training_config(rc, corpus, extra), clock, reserve)
    result: dict[str, Any] = {"stage": rc.stage, "device": device, "torch": torch.__version__,
                              "steps": trainer.progress.step, "epochs": trainer.progress.epoch,
                              "parameters": trainer.model.num_parameters(),
                              "config": trainer.cfg.to_dict(),
                              "throughput": throughput(trainer)}

    def save() -> None:  # after each step: what is done comes back even if the run is cut off
        result["seconds"] = clock.seconds
        _write_json(rc.out / f"{rc.stage}.json", result)

    if rc.stage == "student":  # the weights before the evaluation
        from simulmt.train.export import export

        export(trainer.cfg.out, rc.work / "model", name=rc.name)
        result["pieces"] = [p.name for p in split_file(rc.work / "model" / "model.pt", rc.out)]
        clock.done("export")
        save()
    result["eval"] = evaluate(trainer.model, trainer.tok, corpus)
    clock.done("eval")
    save()
    if rc.stage == "teacher":
        result["distilled"] = distill(trainer.model, trainer.tok, corpus,
                                      rc.out / f"{DISTILL_FILE}.xz", clock)
        save()
    return result


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m simulmt.train.recipe", description=__doc__)
    sub = ap.add_subparsers(dest="stage", required=True)
    for stage in ("teacher", "student"):
        p = sub.add_parser(stage)
        p.add_argument("--pack", type=Path, required=True, help="packed corpus folder")
        p.add_argument("--out", type=Path, required=True, help="folder that comes back")
        p.add_argument("--work", type=Path, default=RecipeConfig.work)
        p.add_argument("--config", type=Path, help=f"training config (default {CONFIGS[stage]})")
        p.add_argument("--set", dest="overrides", action="append", default=[],
                       metavar="KEY=VALUE", help="override a training config field")
        p.add_argument("--minutes", type=float, default=RecipeConfig.minutes,
                       help="wall minutes for the whole stage")
        if stage == "student":
            p.add_argument("--distill", type=Path, help="the teacher stage's train.distill.en.xz")
            p.add_argument("--init-from", type=Path, help="model folder or pieces to begin from")
            p.add_argument("--name", default=RecipeConfig.name, help="the exported model's name")
    join = sub.add_parser("join", help="weight pieces -> a model folder")
    join.add_argument("pieces", type=Path)
    join.add_argument("--out", type=Path, required=True)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    if args.stage == "join":
        print(f"wrote {join_model(args.pieces, args.out)}")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(args.out / "recipe.log")
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    logging.getLogger().addHandler(handler)
    options = {k: v for k, v in vars(args).items() if v is not None}
    rc = RecipeConfig(**{**options, "overrides": tuple(args.overrides)})
    result = run_stage(rc)
    print(json.dumps({k: result[k] for k in ("stage", "steps", "eval", "seconds")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
