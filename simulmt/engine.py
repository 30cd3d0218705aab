"""The engine: one model + tokenizer shared by all sessions (weights only, no stream state)."""

from __future__ import annotations

import copy
import functools
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import torch

from simulmt.data.tokenizer import Tokenizer
from simulmt.model import attention as attention_module
from simulmt.model import graphs
from simulmt.model.calibration import RANGES_FILE, load_ranges
from simulmt.model.checkpoint import CheckpointError, load_checkpoint, model_from_checkpoint
from simulmt.model.devices import DeviceError, resolve_device
from simulmt.model.int8 import FbgemmInt8Linear, Int8Linear, StaticInt8Linear, quantize_linears
from simulmt.model.layers import Packing, Scratch, append_kv, pack_kv
from simulmt.model.pool import KVPool, PoolShape
from simulmt.model.precision import TURN_STREAMS, choose_precision
from simulmt.model.runtime import AUTO_DTYPE, DTYPE_NAMES
from simulmt.model.state import SourceState
from simulmt.model.transformer import SimulTransformer
from simulmt.restore.model import RestorerNet, load_restorer
from simulmt.search.step import StepRequest, StepResult, run_step
from simulmt.segment.model import SegmenterNet, load_segmenter

log = logging.getLogger(__name__)
MODEL_FILE = "model.pt"
TOKENIZER_FILE = "spm.model"
SEGMENTER_FILE = "segmenter.pt"  # optional: the sentence-boundary detector (segmentation auto)
RESTORER_FILE = "restorer.pt"  # optional: case and comma restoration of recognizer input


def default_model_dir() -> Path:
    """The bundled de→en model shipped inside the package."""
    return Path(str(resources.files("simulmt") / "models" / "de-en"))


@dataclass(frozen=True)
class ModelInfo:
    name: str
    src: str
    tgt: str
    parameters: int


def model_checkpoint(model_dir: str | Path | None) -> Path:
    """The weight file of model folder `model_dir` (None: the bundled model's), or a
    CheckpointError saying what a model folder holds: checked before slow work starts."""
    folder = Path(model_dir) if model_dir is not None else default_model_dir()
    ckpt = folder / MODEL_FILE if folder.is_dir() else folder
    if not ckpt.exists():
        raise CheckpointError(
            f"no model at {folder}: expected a folder with {MODEL_FILE} and {TOKENIZER_FILE}"
        )
    return ckpt


class Engine:
    """Holds the weights; all per-stream state lives in `StreamState`s owned by sessions.

    It also holds the memory the streams' decoder caches live in (`cache_pool`): each stream
    owns one slot of it (a `KVSlot` in its `SourceState`) holding its cross-attention K/V and,
    while its beam is one hypothesis, the beam's self-attention K/V (`DecoderCache`); so a
    decoder step over many streams reads their caches as views instead of copying them."""

    def __init__(
        self,
        model: SimulTransformer,
        tokenizer: Tokenizer,
        info: ModelInfo,
        *,
        segmenter: SegmenterNet | None = None,
        restorer: RestorerNet | None = None,
    ) -> None:
        """`segmenter`: the boundary network sessions share (read-only; each session wraps it
        in its own `Segmenter` state); None: `segmentation=auto` is unavailable.
        `restorer`: the case and comma network recognizer sessions share (each wraps it in its
        own `Restorer` state); None: `input=recognizer` is unavailable."""
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.info = info
        self._encode_scratch = Scratch()  # the packed encoder pass's padded caches
        self.segmenter = segmenter.eval() if segmenter is not None else None
        self.restorer = restorer.eval() if restorer is not None else None
        self.compute_ms = 0.0  # total model time spent by this engine
        self.precision = precision_of(self.model)  # what runs: float32, bfloat16 or int8
        self._cache_pool: KVPool | None = None
        self.device = torch.device("cpu")  # where the networks are (`to`)

    @property
    def cache_pool(self) -> KVPool:
        """The pool of the decoder's K/V caches, cross- and self-attention (made at first use,
        so a process forked before it keeps its own)."""
        if self._cache_pool is None:
            cfg = self.model.cfg
            shape = PoolShape(2 * cfg.dec_layers, cfg.n_heads, cfg.head_dim, self.model.dtype)
            self._cache_pool = KVPool(shape)
        return self._cache_pool

    # ---- loading ---------------------------------------------------------------------
    @classmethod
    def load(
        cls,
        model_dir: Path | None = None,
        *,
        dtype: str = "float32",
        turn_streams: int = TURN_STREAMS,
        device: str = "cpu",
        trace: bool = True,
    ) -> Engine:
        """Load a model folder (model.pt + spm.model); None loads the bundled default.

        `dtype` "auto" times one batched turn in each precision this CPU runs natively and
        keeps the fastest, never one slower than float32 (`simulmt.model.precision`; the command
        lines' default). The library's default stays float32: its outputs do not depend on
        the machine or on a timing. `turn_streams`: how many streams one batched turn of this
        engine's work usually carries (a server's 8, one session's 1, an evaluation's batch),
        which is what "auto" times: the fastest precision depends on it.

        `dtype` "bfloat16" runs inference in bfloat16 (weights, activations and caches): on CPUs
        with AMX/AVX512-BF16 batched steps are several times faster; outputs can differ from
        float32 in rare near-ties (bench/RESULTS.md has the measured BLEU difference). "int8"
        quantizes the weights of every linear layer to int8 per output channel and their inputs
        per row, or on the calibrated ranges of the folder's int8_ranges.json where it has one
        (simulmt.model.int8, `simulmt calibrate`): either way a stream's output does not
        depend on what it is batched with; caches stay float32.

        `trace`: on the CPU, run the hot model calls as traced graphs (`Engine.trace`; the
        same outputs, faster); False keeps eager mode (for debugging the model code)."""
        target = resolve_device(device)  # a missing GPU is refused before the slow load
        folder = Path(model_dir) if model_dir is not None else default_model_dir()
        ckpt = model_checkpoint(folder)
        data = load_checkpoint(ckpt)
        model = model_from_checkpoint(ckpt, data)
        parameters = model.num_parameters()  # before quantizing (int8 weights are no Parameters)
        if target.type == "cuda":  # the precision timing and int8 kernels are the CPU's
            if dtype == "int8":
                raise DeviceError("int8 runs on CPUs; with --device cuda use --dtype float32 "
                                  "or bfloat16")
            dtype = "float32" if dtype == AUTO_DTYPE else dtype
        ranges_path = ckpt.parent / RANGES_FILE  # calibrated int8 input ranges, if any
        ranges = load_ranges(ranges_path) if ranges_path.is_file() else None
        convert = functools.partial(for_inference, ranges=ranges)
        model, _ = choose_precision(model, dtype, convert=convert, turn_streams=turn_streams)
        tok_path = ckpt.parent / TOKENIZER_FILE
        tokenizer = (
            Tokenizer.from_bytes(data["tokenizer"])
            if "tokenizer" in data
            else Tokenizer.load(tok_path)
        )
        if tokenizer.vocab_size != model.cfg.vocab_size:
            raise CheckpointError(
                f"{ckpt}: tokenizer has {tokenizer.vocab_size} pieces, "
                f"model expects {model.cfg.vocab_size}"
            )
        meta = dict(data.get("meta", {}))
        info = ModelInfo(
            name=str(meta.get("name", folder.name)),
            src=str(meta.get("src", "de")),
            tgt=str(meta.get("tgt", "en")),
            parameters=parameters,
        )
        log.info(
            "loaded %s (%s→%s, %.1fM parameters)",
            info.name,
            info.src,
            info.tgt,
            info.parameters / 1e6,
        )
        seg_path = ckpt.parent / SEGMENTER_FILE
        segmenter = load_segmenter(seg_path)[0] if seg_path.is_file() else None
        if segmenter is None:
            log.info("no %s beside the model: segmentation auto is unavailable", SEGMENTER_FILE)
        rest_path = ckpt.parent / RESTORER_FILE
        restorer = load_restorer(rest_path)[0] if rest_path.is_file() else None
        if restorer is None:
            log.info("no %s beside the model: input recognizer is unavailable", RESTORER_FILE)
        engine = cls(model, tokenizer, info, segmenter=segmenter, restorer=restorer).to(target)
        if trace:
            engine.trace()
        return engine

    def to(self, device: torch.device) -> Engine:
        """This engine with its networks on `device` (the thread that runs its model work
        makes it the default device: `simulmt.model.devices.use_device`)."""
        self.model.to(device)
        for net in (self.segmenter, self.restorer):
            if net is not None:
                net.to(device)
        if device.type != "cpu":
            graphs.attach(self.model, None)  # traced on the CPU's tensors
        self.device = device
        return self

    def trace(self) -> bool:
        """Run the model's hot calls as traced graphs from now on (`simulmt.model.graphs`:
        the same outputs, a fraction of the per-op overhead at a server's batch sizes).
        CPU only; returns whether the graphs are in use (if not, a warning said why)."""
        if self.device.type != "cpu":
            return False
        start = time.perf_counter()
        traced = graphs.trace(self.model)
        graphs.attach(self.model, traced)
        if traced is not None:
            log.info("traced the decoder step and the encoder pass in %.1f s",
                     time.perf_counter() - start)  # fmt: skip
        return traced is not None

    @classmethod
    def tiny(cls, seed: int = 0, *, train_steps: int = 60) -> Engine:
        """A small model with a tokenizer trained on a bundled toy corpus of 30 sentence pairs,
        itself trained for `train_steps` multi-path wait-k steps on it (so it writes words and
        ends sentences); deterministic for a seed. For tests and development only: its
        trainer (`simulmt.train.tiny`) is imported here, so inference never loads training."""
        from simulmt.train.tiny import tiny_model, tiny_tokenizer

        tokenizer = tiny_tokenizer()
        model = copy.deepcopy(tiny_model(seed, train_steps))  # callers may change their copy
        return cls(model, tokenizer, ModelInfo(f"tiny-{seed}", "de", "en", model.num_parameters()))

    # ---- model work (called from one thread at a time) -------------------------------
    def encode(self, source: SourceState, words: Sequence[str]) -> float:
        """Append `words` to one stream's source: `encode_many` for a batch of one."""
        return self.encode_many([source], [words])

    @torch.no_grad()
    def encode_many(self, sources: Sequence[SourceState], words: Sequence[Sequence[str]]) -> float:
        """Append each stream's `words` to its source: tokenize, run the causal encoder over only
        the new tokens (many streams in one batched pass) and grow the cross-attention K/V
        caches. The one encode path, a lone stream included; returns the time in ms."""
        start = time.perf_counter()
        spans = [self._tokenize(source, ws) for source, ws in zip(sources, words, strict=True)]
        todo = [i for i, (ids, _) in enumerate(spans) if ids]
        # all the model work first, then every source changes: a failure part-way (an
        # internal error) leaves all sources as they were, so a retry encodes each word once
        encoded = self._encode_rows([sources[i] for i in todo], [spans[i][0] for i in todo])
        for i, (enc, cross) in zip(todo, encoded, strict=True):
            self._extend(sources[i], spans[i][0], enc, cross)
        for source, (_, ends) in zip(sources, spans, strict=True):
            source.ends += ends
        ms = (time.perf_counter() - start) * 1000
        self.compute_ms += ms
        return ms

    def _extend(
        self, source: SourceState, new: list[int], enc: torch.Tensor, cross: torch.Tensor
    ) -> None:
        """Append encoded tokens to `source`: their encoder K/V (2L_enc, 1, H, n, dh) and
        cross-attention K/V (2L_dec, 1, H, n, dh). The one place an encode changes a source."""
        source.enc_kv = append_kv(source.enc_kv, enc)  # (2L_enc, 1, H, S+n, dh)
        source.append_cross(cross, self.cache_pool)
        source.ids += new

    def _tokenize(self, source: SourceState, words: Sequence[str]) -> tuple[list[int], list[int]]:
        """The new tokens of `words` and their word ends, checked against the model's length
        before anything changes, so a refused input leaves the source as it was."""
        new: list[int] = []
        ends: list[int] = []
        for w in words:
            new += self.tokenizer.encode_word(w, first=not source.ids and not new)
            ends.append(len(source.ids) + len(new))
        if len(source.ids) + len(new) > self.model.cfg.max_len:
            raise ValueError(f"sentence longer than {self.model.cfg.max_len} tokens")
        return new, ends

    def _encode_rows(
        self, sources: Sequence[SourceState], new_ids: Sequence[list[int]]
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """One encoder pass over the new tokens of `sources` (changes none of them): per
        source, its new tokens' encoder K/V (2L_enc, 1, H, n, dh) and cross-attention K/V
        (2L_dec, 1, H, n, dh). All go through `encode_packed`, their tokens packed into one
        matrix, a lone stream too (one path; a traced graph where the model has one:
        `simulmt.model.graphs`)."""
        if not sources:
            return []
        cfg = self.model.cfg
        # streams in order of cache length, so that each attention group (GROUP_ROWS streams)
        # reads about its own streams' widths (`Packing.groups`): half the positions one
        # group of all streams reads, in `simulmt eval`'s passes of ~100 streams
        order = sorted(range(len(sources)), key=lambda i: len(sources[i].ids))
        ordered = [sources[i] for i in order]
        counts = [len(new_ids[i]) for i in order]
        past_lengths = [len(source.ids) for source in ordered]
        packing = Packing.of(
            counts, past_lengths, dtype=self.model.dtype, group=attention_module.GROUP_ROWS
        )
        empty = torch.zeros(
            2 * cfg.enc_layers, 1, cfg.n_heads, 0, cfg.head_dim, dtype=self.model.dtype
        )
        # (2L_enc, B, H, W, dh): the caches padded to W (`Packing`) in a reused buffer (past a
        # row's positions, masked values of an earlier pass: `Scratch`); each stream's new
        # K/V are written right after its own cached positions
        caches = [empty if source.enc_kv is None else source.enc_kv for source in ordered]
        buf = pack_kv(caches, packing.keys, into=self._encode_scratch)
        ids = torch.tensor([tok for i in order for tok in new_ids[i]], dtype=torch.long)  # (M,)
        cross = graphs.encode(self.model, ids, buf, packing)  # (2L_dec, 1, H, M, dh)
        out: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        first = 0
        for r, (i, n, s) in enumerate(zip(order, counts, past_lengths, strict=True)):
            # stream i (row r) has its new K/V right after its own cached positions (`Packing`)
            out[i] = (buf[:, r : r + 1, :, s : s + n], cross[:, :, :, first : first + n])
            first += n
        return [out[i] for i in range(len(sources))]

    def step(self, requests: Sequence[StepRequest]) -> list[StepResult]:
        """One batched decoder step (`run_step`), its time counted in `compute_ms`."""
        start = time.perf_counter()
        out = run_step(self.model, requests)
        self.compute_ms += (time.perf_counter() - start) * 1000
        return out


# the dtype of activations and caches per precision (int8 keeps them float32)
DTYPES = dict(zip(DTYPE_NAMES, (torch.float32, torch.bfloat16, torch.float32), strict=True))


def inference_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}: accepted are {', '.join(DTYPES)}")
    return DTYPES[name]


def for_inference(
    model: SimulTransformer, name: str, *, ranges: Mapping[str, float] | None = None
) -> SimulTransformer:
    """`model` (float32) in precision `name` (see `Engine.load`); bfloat16 and int8 return a
    copy, so that `--dtype auto` can build and time each from one loaded model. `ranges`: the
    model folder's calibrated int8 input ranges (`simulmt.model.calibration`), if it has them."""
    dtype = inference_dtype(name)
    if dtype is not model.dtype:
        model = copy.deepcopy(model).to(dtype)
    if name == "int8":
        # per-row or calibrated activation scales (simulmt.model.int8), not torch.ao's dynamic
        # quantization: its one scale per batch tensor made a stream's output depend on the
        # other streams
        return quantize_linears(model, prepare=SimulTransformer.fuse_projections, ranges=ranges)
    return model


def precision_of(model: SimulTransformer) -> str:
    """The precision name `model` runs in (int8 when its linear layers are quantized)."""
    if any(isinstance(m, (Int8Linear, FbgemmInt8Linear, StaticInt8Linear))
           for m in model.modules()):
        return "int8"
    return {v: k for k, v in DTYPES.items() if k != "int8"}.get(model.dtype, str(model.dtype))
