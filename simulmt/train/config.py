"""Training configuration: a frozen dataclass, loadable from TOML, overridable per field."""

from __future__ import annotations

import dataclasses
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulmt.model.config import ModelConfig


@dataclass(frozen=True)
class TrainConfig:
    data: Path = Path("cache/corpus")  # folder with {train,dev}.{src,tgt} and spm.model
    out: Path = Path("runs/default")  # checkpoints, logs and the effective config go here
    src: str = "de"
    tgt: str = "en"
    model: ModelConfig = field(default_factory=ModelConfig)
    # warm start: weights of a model folder (`simulmt export`) or checkpoint to begin from, with a
    # fresh optimizer and schedule (continue a released model, fine-tune on new data); --resume
    # of an existing run takes precedence. Architecture and tokenizer must match.
    init_from: Path | None = None
    # multi-path wait-k (Elbayad et al. 2020): k drawn per batch; 0 = full sentence (twice, so
    # the full-sentence path that anchors quality gets ~1/6 of the batches)
    wait_k: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 9, 11, 0, 0)
    # schedule unit of the masks: target words (as the engine writes, every token of target word i
    # sees g(i) source words) or target tokens (the first release's training)
    target_words: bool = True
    # share of training sentences whose source is given in its recognizer view (lowercase, no
    # punctuation; simulmt.data.asr), drawn anew per step; the target keeps case and punctuation
    asr_rate: float = 0.0
    # subword regularization (Kudo 2018): > 0 re-segments every training pair anew each epoch
    # (both sides and the recognizer view), each word's split drawn among its 16 best with
    # probability ~ P(split)^alpha (Tokenizer.sample; smaller = more fragmented: 0.3 re-splits a
    # fifth of the words, +16% tokens); 0 = the one deterministic segmentation the engine uses
    subword_alpha: float = 0.0
    # sequence-level knowledge distillation (Kim & Rush 2016): a file of teacher translations, one
    # per line of train.{src} (scripts/distill.sh), used as the training targets instead of
    # train.{tgt}; None = the references
    distill: Path | None = None
    # per-source repeat factors for the training split (`{split}.source` names each line's source,
    # as `simulmt data build` writes it): {"europarl": 4} gives each Europarl pair four times an
    # epoch, 0 leaves a source out; sources not named keep factor 1. Changing it on --resume
    # starts a new epoch (the batches are rebuilt).
    upsample: dict[str, int] = field(default_factory=dict)
    max_tokens: int = 6000  # padded source+target tokens per batch (CPU-friendly)
    max_len: int = 100  # training pairs longer than this (tokens, either side) are skipped
    lr: float = 1e-3  # peak learning rate after warm-up (small model, short schedule)
    warmup: int = 1000  # linear warm-up steps, then inverse square root decay
    # the last `cooldown` steps before max_steps take the learning rate linearly down to 0 (set
    # both to end a run; 0 = no cooldown). The schedule is a function of the step, so it may be
    # set on --resume.
    cooldown: int = 0
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.98)  # Transformer defaults
    label_smoothing: float = 0.1
    clip: float = 1.0  # gradient norm clipping
    max_steps: int = 100_000
    max_minutes: float = 0.0  # stop (and save) after this wall time; 0 = no limit
    eval_every: int = 1000  # steps between dev BLEU evaluations
    save_every: int = 500  # steps between checkpoints (last.pt + step-N.pt)
    log_every: int = 50  # steps per progress line in the log when stderr is no terminal
    keep_last: int = 5  # step checkpoints kept for averaging
    dev_sentences: int = 300  # dev sentences decoded for the periodic BLEU
    seed: int = 1
    threads: int = 0  # torch intra-op threads; 0 = torch's default
    # auto: cuda if available, else cpu; cuda takes this process's GPU (LOCAL_RANK under torchrun)
    device: str = "auto"
    # bfloat16 autocast for matmuls, fp32 master weights, where the device computes in bf16
    # (GPUs, AMX/AVX512-BF16 CPUs); other CPUs would emulate it many times slower, so they train
    # in float32 and log it (simulmt.train.device.use_bf16)
    bf16: bool = True
    # torch.compile the model for training: fewer, fused kernels (pays on GPUs, where a small
    # model's step is launch-bound); off by default because compiling takes minutes
    compile: bool = False

    def __post_init__(self) -> None:
        if self.subword_alpha < 0:
            raise ValueError(f"subword_alpha={self.subword_alpha} must be >= 0 (0: off; 0.1-1 "
                             "samples segmentations, smaller more fragmented)")
        if not 0 <= self.cooldown <= self.max_steps:
            raise ValueError(f"cooldown={self.cooldown} must be between 0 and max_steps="
                             f"{self.max_steps}: it is the last part of the run")

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["data"], d["out"] = str(self.data), str(self.out)
        d["init_from"] = str(self.init_from) if self.init_from else None
        d["distill"] = str(self.distill) if self.distill else None
        d["wait_k"], d["betas"] = list(self.wait_k), list(self.betas)
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        data = dict(data)
        model = ModelConfig.from_dict(dict(data.pop("model", {})))
        return _build(cls, data, model=model)

    @classmethod
    def from_toml(cls, path: Path) -> TrainConfig:
        with open(path, "rb") as f:
            return cls.from_dict(tomllib.load(f))

    def override(self, assignments: list[str]) -> TrainConfig:
        """Apply `key=value` / `model.key=value` strings (values parsed by the field's type)."""
        top: dict[str, Any] = {}
        model: dict[str, Any] = {}
        for item in assignments:
            key, sep, value = item.partition("=")
            if not sep:
                raise ValueError(f"override {item!r} must look like key=value or model.key=value")
            target, cls_ = (model, ModelConfig) if key.startswith("model.") else (top, TrainConfig)
            name = key.removeprefix("model.").replace("-", "_")
            target[name] = parse_value(cls_, name, value)
        new_model = dataclasses.replace(self.model, **model)
        return dataclasses.replace(self, model=new_model, **top)


def _build(cls: type[TrainConfig], data: dict[str, Any], **extra: Any) -> TrainConfig:
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"unknown train config keys {sorted(unknown)}; accepted: {sorted(known)}")
    hints = typing.get_type_hints(cls)
    conv = {k: _coerce(hints[k], v) for k, v in data.items()}
    return cls(**conv, **extra)


def _coerce(tp: Any, value: Any) -> Any:
    if tp is Path or tp == Path | None:
        return Path(value) if value is not None else None
    if typing.get_origin(tp) is dict:
        return check_factors(value)
    if typing.get_origin(tp) is tuple:
        return tuple(value)
    return value


def parse_value(cls: type, name: str, text: str) -> Any:
    hints = typing.get_type_hints(cls)
    if name not in hints:
        accepted = ", ".join(f.name for f in dataclasses.fields(cls))
        raise ValueError(f"{cls.__name__} has no field {name!r}; accepted: {accepted}")
    tp = hints[name]
    if tp is bool:
        if text.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"{name} takes true/false, got {text!r}")
        return text.lower() in ("true", "1")
    if typing.get_origin(tp) is dict:
        return parse_factors(name, text)
    if typing.get_origin(tp) is tuple:
        (elem, *_) = typing.get_args(tp)
        return tuple(elem(x) for x in text.split(",") if x)
    if isinstance(tp, types.UnionType):
        if type(None) in typing.get_args(tp) and text.lower() in ("", "none"):
            return None
        tp = typing.get_args(tp)[0]
    try:
        return tp(text)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name} takes {getattr(tp, '__name__', tp)}, got {text!r}") from e


def parse_factors(name: str, text: str) -> dict[str, int]:
    """`europarl:4,bible:2` (the `--set` form of a TOML table) as {name: factor}."""
    out: dict[str, int] = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        key, sep, value = item.partition(":")
        if not sep or not key.strip():
            raise ValueError(f"{name} takes source:factor pairs like europarl:4,bible:2; "
                             f"got {item!r}")
        try:
            out[key.strip()] = int(value)
        except ValueError as e:
            raise ValueError(f"{name}: the factor of {key.strip()!r} must be a whole number, "
                             f"got {value!r}") from e
    return check_factors(out)


def check_factors(value: Any) -> dict[str, int]:
    """A {source: factor} table with whole factors >= 0, or ValueError saying what is wrong."""
    if not isinstance(value, dict):
        raise ValueError(f"upsample takes a table of source = factor, got {value!r}")
    for key, factor in value.items():
        if not isinstance(factor, int) or isinstance(factor, bool) or factor < 0:
            raise ValueError(f"upsample: the factor of {key!r} must be a whole number >= 0 "
                             f"(0 leaves the source out), got {factor!r}")
    return {str(k): int(v) for k, v in value.items()}
