"""The prefix-to-prefix Transformer: a unidirectional encoder and a decoder whose step i
attends only to the first vis[i] source tokens (STACL, Ma et al. 2019).

The module holds weights only. Full (training) passes take padded batches; incremental
passes take caches that the caller owns (see `simulmt.model.state`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from simulmt.data.vocab import PAD_ID
from simulmt.model.attention import MultiHeadAttention, additive_mask
from simulmt.model.config import ModelConfig
from simulmt.model.layers import (
    KV,
    DecoderLayer,
    Dropout,
    EncoderLayer,
    Packing,
    stack_kv,
    unstack_kv,
)


def sinusoidal_table(max_len: int, d_model: int) -> torch.Tensor:
    pos = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)  # (L, 1)
    div = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model)
    )
    table = torch.zeros(max_len, d_model)  # (L, D)
    table[:, 0::2] = torch.sin(pos * div)
    table[:, 1::2] = torch.cos(pos * div)
    return table


@dataclass(frozen=True)
class StepOutput:
    """What one incremental decoder step gives for its N rows (hypotheses of any streams)."""

    log_probs: torch.Tensor  # (N, V) next-token log-probabilities
    self_kv: torch.Tensor  # the new position's K/V, all layers (stack_kv): (2L, N, H, 1, dh)
    state: torch.Tensor  # (N, D) top decoder layer output (a policy signal)
    attention: torch.Tensor | None  # (N, S) last layer's head-averaged cross-attention


class SimulTransformer(nn.Module):
    """The prefix-to-prefix Transformer (weights only): a causal encoder, so a READ encodes
    one new word, and a decoder whose steps see only the visible source prefix. Training runs
    `forward` over padded batches; streaming runs `encode`/`decode_step` with caches that the
    caller owns (`simulmt.model.state`, `simulmt.model.batch`)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=PAD_ID)
        nn.init.normal_(self.embed.weight, std=cfg.d_model**-0.5)
        self.register_buffer(
            "pos_table", sinusoidal_table(cfg.max_len, cfg.d_model), persistent=False
        )
        self.drop = Dropout(cfg.dropout)
        self.encoder = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.enc_layers))
        self.enc_ln = nn.LayerNorm(cfg.d_model)
        self.decoder = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.dec_layers))
        self.dec_ln = nn.LayerNorm(cfg.d_model)
        self.out_proj = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.out_proj.weight = self.embed.weight
        # every decoder layer's cross-attention K/V projection as one layer (`fuse_cross_kv`,
        # inference copies only): one product per encoder pass where there were dec_layers
        self.cross_kv_proj: nn.Module | None = None

    @property
    def dtype(self) -> torch.dtype:
        """The weights' dtype; caches and activations of incremental passes use it too."""
        return self.embed.weight.dtype

    # ---- embeddings -------------------------------------------------------------------
    def embed_tokens(
        self, ids: torch.Tensor, positions: torch.Tensor, *, last: int | None = None
    ) -> torch.Tensor:
        """ids, positions: (B, T) -> (B, T, D). `last`: the largest position where the caller
        knows it, which spares reading it back from the device (a GPU sync per forward pass)."""
        top = int(positions.max()) if last is None else last
        if top >= self.cfg.max_len:
            raise ValueError(f"sequence longer than the model's max_len={self.cfg.max_len} tokens")
        pos_table: torch.Tensor = self.pos_table  # type: ignore[assignment]
        x = self.embed(ids) * math.sqrt(self.cfg.d_model) + pos_table[positions]  # (B, T, D)
        return self.drop(x)

    # ---- encoder ----------------------------------------------------------------------
    def encode(
        self, src: torch.Tensor, *, past: list[KV] | None = None, start: int = 0
    ) -> tuple[torch.Tensor, list[KV]]:
        """Encode positions start..start+T-1 of src (B, T) given cached K/V of positions < start.

        Causal self-attention: position j sees positions <= j, so earlier outputs never change.
        Returns memory (B, T, D) after the final LayerNorm and the grown per-layer K/V cache.
        """
        b, t = src.shape
        positions = torch.arange(start, start + t, device=src.device).expand(b, t)  # (B, T)
        x = self.embed_tokens(src, positions, last=start + t - 1)
        keys = torch.arange(start + t, device=src.device)  # (P+T,)
        mask = (keys.unsqueeze(0) <= positions[:1].T).view(1, 1, t, start + t)  # (1, 1, T, P+T)
        mask = additive_mask(mask, x.dtype)  # once for every layer
        new_past: list[KV] = []
        for i, layer in enumerate(self.encoder):
            x, kv = layer(x, past[i] if past is not None else None, mask)
            new_past.append(kv)
        return self.enc_ln(x), new_past

    def encode_packed(self, ids: torch.Tensor, past: list[KV], packing: Packing) -> torch.Tensor:
        """Encode the new tokens of B streams at once, each with its own cache length.

        ids: (M,) the new tokens of every stream, packed as `packing` says (no padding; it
        also has their positions); past: per layer (B, H, W, dh), the caches zero-padded to
        W (`Packing`), into which the new tokens' K/V is written in place.
        Returns memory (M, D). Every linear layer sees the M real tokens as one matrix, so a
        turn where streams bring 1, 2 or 5 tokens is one pass with no padded rows."""
        x = self.embed_tokens(ids.unsqueeze(0), packing.positions.unsqueeze(0))[0]  # (M, D)
        layers: list[EncoderLayer] = list(self.encoder)  # type: ignore[arg-type]
        for i, layer in enumerate(layers):
            x = layer.forward_packed(x, past[i], packing)
        return self.enc_ln(x)

    def cross_kv(self, memory: torch.Tensor) -> list[KV]:
        """memory (B, S, D) -> per decoder layer cross-attention K/V, (B, H, S, dh) each."""
        if self.cross_kv_proj is not None:
            return unstack_kv(self.cross_kv_block(memory))
        layers: list[DecoderLayer] = list(self.decoder)  # type: ignore[arg-type]
        return [layer.cross_attn.project_kv(memory) for layer in layers]

    def cross_kv_block(self, memory: torch.Tensor) -> torch.Tensor:
        """memory (B, S, D) -> the cross-attention K/V of all decoder layers as one block
        (2L_dec, B, H, S, dh), as `stack_kv` lays it out; a view of one product once fused."""
        if self.cross_kv_proj is None:
            return stack_kv(self.cross_kv(memory))
        b, s, _ = memory.shape
        cfg = self.cfg
        kv = self.cross_kv_proj(memory)  # (B, S, L * 2D): layer, then keys|values, then heads
        return kv.view(b, s, 2 * cfg.dec_layers, cfg.n_heads, cfg.head_dim).permute(2, 0, 3, 1, 4)

    def fuse_cross_kv(self) -> None:
        """Replace the decoder layers' cross-attention K/V projections by one layer with all
        their weights (in place, for an inference copy; before quantizing). They all project
        the same memory, so its outputs are theirs, column by column."""
        layers: list[DecoderLayer] = list(self.decoder)  # type: ignore[arg-type]
        kvs = [layer.cross_attn.kv_proj for layer in layers]
        if not all(isinstance(kv, nn.Linear) for kv in kvs):
            raise TypeError(
                "fuse_cross_kv wants the float nn.Linear layers (fuse before quantizing)"
            )
        first = kvs[0]
        fused = nn.Linear(first.in_features, sum(kv.out_features for kv in kvs),
                          bias=first.bias is not None, device=first.weight.device,
                          dtype=first.weight.dtype)  # fmt: skip
        with torch.no_grad():
            fused.weight.copy_(torch.cat([kv.weight for kv in kvs]))  # (L * 2D, D)
            if fused.bias is not None:
                fused.bias.copy_(torch.cat([kv.bias for kv in kvs]))
        self.cross_kv_proj = fused
        for layer in layers:
            del layer.cross_attn.kv_proj

    def fuse_projections(self) -> None:
        """What an int8 copy fuses before quantizing: fewer, larger matrix products, each
        with the outputs of the layers it replaces (`fuse_self_attention`, `fuse_cross_kv`)."""
        self.fuse_self_attention()
        self.fuse_cross_kv()

    # ---- decoder ----------------------------------------------------------------------
    def decode(self, tgt_in: torch.Tensor, cross: list[KV], vis: torch.Tensor) -> torch.Tensor:
        """Teacher-forced pass. tgt_in: (B, T) (BOS + y); vis: (B, T) source tokens visible to
        input position t (which predicts target token t+1). Returns logits (B, T, V)."""
        h, _ = self._decode_hidden(tgt_in, cross, vis, attention=False)
        return self.out_proj(h)  # (B, T, V)

    def decode_signals(
        self, tgt_in: torch.Tensor, cross: list[KV], vis: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`decode` plus what a policy reads at each position, as `decode_step` gives it:
        logits (B, T, V), the top layer's output after its LayerNorm (B, T, D), and the
        head-averaged last-layer cross-attention (B, T, S). For oracle walks of the policy."""
        h, attn = self._decode_hidden(tgt_in, cross, vis, attention=True)
        assert attn is not None
        return self.out_proj(h), h, attn.float()

    def _decode_hidden(
        self, tgt_in: torch.Tensor, cross: list[KV], vis: torch.Tensor, *, attention: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(B, T) -> the decoder's output after dec_ln (B, T, D) and, with `attention`, the
        last layer's head-averaged cross-attention (B, T, S)."""
        b, t = tgt_in.shape
        s = cross[0][0].shape[2]
        positions = torch.arange(t, device=tgt_in.device).expand(b, t)  # (B, T)
        x = self.embed_tokens(tgt_in, positions, last=t - 1)
        causal = torch.ones(t, t, dtype=torch.bool, device=tgt_in.device).tril()
        self_mask = causal.view(1, 1, t, t)  # (1, 1, T, T)
        src_pos = torch.arange(s, device=tgt_in.device)  # (S,)
        cross_mask = src_pos.view(1, 1, s) < vis.clamp(min=1).unsqueeze(-1)  # (B, T, S)
        cross_mask = cross_mask.unsqueeze(1)  # (B, 1, T, S)
        last = len(self.decoder) - 1
        weights = None
        for i, layer in enumerate(self.decoder):
            x, _, w = layer(x, None, self_mask, cross[i], cross_mask,
                            return_weights=attention and i == last)
            weights = w if w is not None else weights
        return self.dec_ln(x), weights

    def decode_step(
        self,
        last: torch.Tensor,
        positions: torch.Tensor,
        past: list[KV] | None,
        past_valid: torch.Tensor | None,
        cross: list[KV],
        cross_valid: torch.Tensor,
        *,
        return_attention: bool = False,
        write_at: torch.Tensor | None = None,
    ) -> StepOutput:
        """One decoder step for N hypotheses (from any number of streams).

        last: (N,) token fed now; positions: (N,) its position; past: per layer (N, H, P, dh)
        self-attention cache; past_valid: (N, P) which cached positions are real (padding
        between streams of different lengths is False); cross: per layer (N, H, S, dh);
        cross_valid: (N, S) which source tokens this step may attend to (at least one True).
        The cache grows one of two ways: without `write_at`, the new K/V is concatenated to
        past (a cache the caller grows itself); with `write_at` (N,), past is a buffer
        (N, H, W, dh) whose row n takes its new K/V at position write_at[n], in place (a view
        of a cache pool, or a gathered batch with a free last position), and past_valid (N, W)
        must include those new positions.
        """
        n = last.shape[0]
        x = self.embed_tokens(last.view(n, 1), positions.view(n, 1))  # (N, 1, D)
        if write_at is not None:
            if past is None or past_valid is None:
                raise ValueError("write_at needs a past buffer and its validity mask")
            valid = past_valid  # (N, P), new positions included
        else:
            ones = torch.ones(n, 1, dtype=torch.bool, device=last.device)
            valid = ones if past_valid is None else torch.cat([past_valid, ones], dim=1)
        self_mask = additive_mask(valid.view(n, 1, 1, -1), x.dtype)  # (N, 1, 1, P+1)
        cross_mask = additive_mask(cross_valid.view(n, 1, 1, -1), x.dtype)  # (N, 1, 1, S)
        new_kv: list[KV] = []
        weights = None
        last_layer = len(self.decoder) - 1
        for i, layer in enumerate(self.decoder):
            x, kv, w = layer(
                x,
                past[i] if past is not None else None,
                self_mask,
                cross[i],
                cross_mask,
                return_weights=return_attention and i == last_layer,
                write_at=write_at,
            )
            new_kv.append(kv)  # (N, H, 1, dh) each
            weights = w if w is not None else weights
        h = self.dec_ln(x)[:, 0]  # (N, D)
        log_probs = torch.log_softmax(self.out_proj(h).float(), dim=-1)  # (N, V)
        attn = weights[:, 0].float() if weights is not None else None  # (N, S)
        return StepOutput(
            log_probs=log_probs, self_kv=stack_kv(new_kv), state=h.float(), attention=attn
        )

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor, vis: torch.Tensor) -> torch.Tensor:
        """Training pass: src (B, S), tgt_in (B, T), vis (B, T) -> logits (B, T, V)."""
        memory, _ = self.encode(src)
        return self.decode(tgt_in, self.cross_kv(memory), vis)

    def fuse_self_attention(self) -> None:
        """Every self-attention's query and key/value projections as one layer (in place, for
        an inference copy: `MultiHeadAttention.fuse_qkv`). Cross-attention projects its
        queries and its keys from different inputs, so it stays as it is."""
        for layer in (*self.encoder, *self.decoder):
            attn = layer.attn if isinstance(layer, EncoderLayer) else layer.self_attn
            assert isinstance(attn, MultiHeadAttention)
            attn.fuse_qkv()

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def prefill_kv(
    model: SimulTransformer, tokens: torch.Tensor, cross: list[KV], visible: int
) -> list[KV]:
    """Self-attention K/V of teacher-forced tokens (N, T) against `visible` source tokens:
    what T incremental steps would have cached. Returns per layer (N, H, T, dh)."""
    n, t = tokens.shape
    positions = torch.arange(t).expand(n, t)  # (N, T)
    x = model.embed_tokens(tokens, positions)
    self_mask = torch.ones(t, t, dtype=torch.bool).tril().view(1, 1, t, t)  # (1, 1, T, T)
    s = cross[0][0].shape[2]
    cross_mask = (torch.arange(s) < visible).view(1, 1, 1, s).expand(n, 1, t, s)  # (N, 1, T, S)
    kvs: list[KV] = []
    for i, layer in enumerate(model.decoder):
        k, v = cross[i]
        x, kv, _ = layer(
            x, None, self_mask, (k.expand(n, -1, -1, -1), v.expand(n, -1, -1, -1)), cross_mask
        )
        kvs.append(kv)
    return kvs
