"""Link decoders: a score (logit) for each node pair from the endpoints' embeddings.

Shapes:
    - src, dst: ``[P, D]`` embeddings of each pair's endpoints.
    - output: ``[P]`` logits (higher: more likely an edge).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from fleetgnn.nn.aggregator import Aggregator
from fleetgnn.nn.protocol import LayerwiseModule

DECODERS: tuple[str, ...] = ("dot", "mlp", "distmult")


class DotDecoder(nn.Module):
    r"""Inner product: :math:`s(u, v) = h_u^\top h_v` (GAE's decoder; no parameters)."""

    def forward(self, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        """Scores ``[P]`` of pairs ``(src[i], dst[i])``."""
        return (src * dst).sum(dim=-1)


class HadamardMLPDecoder(nn.Module):
    r"""An MLP on the Hadamard product: :math:`s(u, v) = \mathrm{MLP}(h_u \odot h_v)`.

    Args:
        dim: Embedding width ``D``.
        hidden: Hidden width of the MLP's one hidden layer (ReLU).
    """

    def __init__(self, dim: int, hidden: int | None = None) -> None:
        super().__init__()
        hidden = int(hidden or dim)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        """Scores ``[P]`` of pairs ``(src[i], dst[i])``."""
        return self.mlp(src * dst).squeeze(-1)


class DistMultDecoder(nn.Module):
    r"""DistMult: :math:`s(u, r, v) = \sum_d h_{u,d}\, w_{r,d}\, h_{v,d}` (one relation here).

    Args:
        dim: Embedding width ``D``.
        num_relations: Relation types (one diagonal ``w_r`` each; typed edges later).
    """

    def __init__(self, dim: int, num_relations: int = 1) -> None:
        super().__init__()
        self.rel = nn.Parameter(torch.ones(int(num_relations), int(dim)))

    def forward(
        self, src: torch.Tensor, dst: torch.Tensor, rel: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Scores ``[P]``; ``rel`` ``[P]`` relation of each pair (``None``: relation 0)."""
        w = self.rel[0] if rel is None else self.rel[rel]
        return (src * w * dst).sum(dim=-1)


def build_decoder(name: str, dim: int) -> nn.Module:
    """The decoder ``name`` (one of :data:`DECODERS`) for embeddings of width ``dim``.

    Raises:
        ValueError: An unknown name (the config checks it first).
    """
    if name == "dot":
        return DotDecoder()
    if name == "mlp":
        return HadamardMLPDecoder(dim)
    if name == "distmult":
        return DistMultDecoder(dim)
    raise ValueError(f"decoder must be one of {', '.join(DECODERS)} (got {name!r})")


class LinkModel(LayerwiseModule):
    """An encoder (a layer-wise GNN giving node embeddings) with a link decoder.

    Follows the layer protocol through the encoder (so every engine runs it unchanged); the
    engines score pairs of its output rows with :attr:`decoder`.

    Args:
        encoder: A layer-wise model whose last layer outputs the embeddings ``[N, D]``.
        decoder: A pair decoder (:data:`DECODERS`).
    """

    def __init__(self, encoder: nn.Module, decoder: nn.Module) -> None:
        super().__init__(int(encoder.num_layers))
        self.encoder = encoder
        self.decoder = decoder

    @property
    def hosts(self) -> tuple[str, ...] | None:
        """The engines the encoder runs on (``None``: every engine), as the engines check it."""
        return getattr(self.encoder, "hosts", None)

    @property
    def hosts_reason(self) -> str:
        """Why the encoder runs only on :attr:`hosts` (empty when it says nothing)."""
        return str(getattr(self.encoder, "hosts_reason", ""))

    def layer_forward(self, i: int, agg: Aggregator, h_src: Tensor, *, step: int = 0) -> Tensor:
        """The encoder's layer ``i``."""
        return self.encoder.layer_forward(i, agg, h_src, step=step)

    def cacheable_aggregation(self, i: int) -> bool:
        """The encoder's answer (``False`` if it gives none): see the ``offload`` engine."""
        probe = getattr(self.encoder, "cacheable_aggregation", None)
        return bool(probe(i)) if callable(probe) else False
