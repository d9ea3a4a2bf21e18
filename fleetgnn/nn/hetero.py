r"""Typed message passing: the :class:`TypedAggregator` and relational layers on it.

A typed hop is one :class:`~fleetgnn.nn.Aggregator` per relation. For relation
``r = (s, name, d)`` its input rows are type ``d``'s destinations followed by type ``s``'s sources
(just type ``s``'s rows when ``s == d``, whose destinations are already their prefix), so every
homogeneous layer runs on a relation unchanged: its output rows are type ``d``'s destinations and
``x_src[:num_dst]`` is each destination's own row. Rows are dicts keyed by node type (GraphBolt's
convention for typed graphs); every row carries its global ID, so keyed dropout draws the same
mask for a node on every engine.

Layers (each ``forward(agg, h, *, step, layer) -> dict``, destinations per type):

- :class:`RGCNConv` (Schlichtkrull et al. 2018) with basis decomposition,
- :class:`RGATConv`: GAT per relation (attention over the relation's in-edges), summed over
  relations, as MLPerf's R-GAT reference (DGL's ``HeteroGraphConv`` of ``GATConv``),
- :class:`HeteroConv`: any homogeneous layer per relation, combined by sum or mean (PyG's
  ``HeteroConv``).

:class:`HeteroGNN` stacks them behind per-type input projections and learnable embeddings for
featureless types, following the layer protocol with dict-valued rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor, nn

from fleetgnn.errors import ConfigError
from fleetgnn.nn.aggregator import LocalAggregator
from fleetgnn.nn.gat_conv import ATT_INIT_GAIN, head_width
from fleetgnn.nn.protocol import LayerwiseModule
from fleetgnn.nn.sage_conv import SAGEConv
from fleetgnn.ops import (
    dst_to_edge,
    edge_softmax,
    gspmm,
    gspmm_heads,
    keyed_dropout,
    keyed_edge_dropout,
    src_to_edge,
)
from fleetgnn.ops.adjacency import Structure

Relation = tuple[str, str, str]
Rows = dict[str, Tensor]

#: What one sparse multiply-add costs in dense ones (``x @ W``), for
#: :meth:`RGATConv.aggregates_first`: ``(per head over H * D-wide rows, shared by the heads
#: over F-wide rows)``.
SPARSE_MAC_COST = (13.5, 7.0)
#: What one multiply-add of the per-head batched product costs in dense ones (each head's
#: product is only ``D`` wide, and its gradient runs over that width).
#: Both fitted (least squares) to the forward and backward times of every relation of one
#: batch of ``igbh-like`` 0.1 (3 layers, 4 heads x 64, fanouts 15,10,5) in both orders, one CPU
#: thread, torch 2.13: the rule then picked the faster order for 18 of the 19 relations, the
#: miss costing 7 ms of the batch's ~770. The fit itself is loose (one batch's terms are nearly
#: collinear: a later run of ``benchmarks/fit_rgat_orders.py`` fitted 1.5 / 11.0 / 0.95), and
#: what matters is the picks: with these constants that run's rule picked the faster order for
#: all 19.
BMM_MAC_COST = 1.5

#: Layer names :class:`HeteroGNN` builds.
HETERO_CONVS: tuple[str, ...] = ("rgcn", "rgat", "hetero-sage")


def relation_key(rel: Relation) -> str:
    """A module-dict key for a relation (``"paper__cites__paper"``)."""
    return "__".join(rel)


class TypedAggregator:
    """One hop over a typed graph: a :class:`~fleetgnn.nn.LocalAggregator` per relation.

    Args:
        block: A :class:`~fleetgnn.sampling.HeteroBlock` (``schema``, ``src_ids[t]``,
            ``num_dst[t]``, ``edges[r] = (indptr, indices)``).
        dtype: Float dtype of the degree tensors.
        validate: Check every index once.
        transient: The hop lives for one step (a sampled batch's): multi-head products may
            cache per-step patterns on it (:attr:`fleetgnn.ops.adjacency.Structure.transient`).

    Attributes:
        schema: The typed graph's schema.
        src_ids: Per type, int64 ``[S_t]`` global IDs of the hop's input rows.
        num_dst: Per type, the number of output rows (the first of ``src_ids[t]``).
        relations: The relations with edges in this hop, schema order.
    """

    def __init__(
        self,
        block: Any,
        *,
        dtype: torch.dtype = torch.float32,
        validate: bool = False,
        transient: bool = False,
    ):
        self.schema = block.schema
        self.src_ids: dict[str, Tensor] = dict(block.src_ids)
        self.num_dst: dict[str, int] = {t: int(n) for t, n in block.num_dst.items()}
        self.relations: tuple[Relation, ...] = tuple(
            r for r in self.schema.relations if r in block.edges
        )
        self._edges = {rel: block.edges[rel] for rel in self.relations}
        self._dtype, self._transient = dtype, transient
        self._aggs: dict[Relation, LocalAggregator] = {}
        self._bipartite: dict[Relation, Structure] = {}
        if validate:  # check every index now
            self._aggs = {rel: self._local(rel, validate=True) for rel in self.relations}

    @property
    def node_types(self) -> tuple[str, ...]:
        """The schema's node types."""
        return tuple(self.schema.node_types)

    def _local(self, rel: Relation, validate: bool) -> LocalAggregator:
        s, _, d = rel
        indptr, indices = self._edges[rel]
        m = self.num_dst[d]
        if s == d:
            rows, local = self.src_ids[s], indices
        else:
            rows = torch.cat([self.src_ids[d][:m], self.src_ids[s]])
            local = indices + m
        adj = SimpleNamespace(
            indptr=indptr, indices=local, src_ids=rows, num_dst=m, transient=self._transient
        )
        return LocalAggregator(adj, dtype=self._dtype, validate=validate)

    def relation(self, rel: Relation) -> LocalAggregator:
        """The aggregator of relation ``rel`` (rows: see :meth:`relation_input`), built once."""
        a = self._aggs.get(rel)
        if a is None:
            a = self._aggs[rel] = self._local(rel, validate=False)
        return a

    def bipartite(self, rel: Relation) -> Structure:
        """Relation ``rel = (s, name, d)`` as a bipartite adjacency, ``h[s]`` into ``h[d][:D_d]``.

        Its sources are type ``s``'s rows as they are (no destination rows in front, unlike
        :meth:`relation`), so a layer that treats sources and destinations apart (R-GAT) runs
        the graph ops on ``h[s]`` without a concatenation. Built once (the ops cache their
        derived tensors on it).
        """
        st = self._bipartite.get(rel)
        if st is None:
            indptr, indices = self._edges[rel]
            st = Structure(indptr, indices, self.num_dst[rel[2]], int(self.src_ids[rel[0]].numel()))
            st.transient = self._transient
            self._bipartite[rel] = st
        return st

    def edge_ids(self, rel: Relation) -> tuple[Tensor, Tensor]:
        """Global ``(src_gid [E], dst_gid [E])`` of relation ``rel``'s edges, in CSC order."""
        st = self.bipartite(rel)
        src = self.src_ids[rel[0]].index_select(0, st.indices)
        return src, self.src_ids[rel[2]].index_select(0, st.dst_index())

    def relation_input(self, rel: Relation, h: Mapping[str, Tensor]) -> Tensor:
        """Relation ``rel = (s, name, d)``'s input rows: ``h[d][:D_d]`` then ``h[s]`` (or ``h[s]``).

        Shapes:
            - h[t]: ``[S_t, ...]``; output: ``[D_d + S_s, ...]`` (``[S_s, ...]`` if ``s == d``).
        """
        s, _, d = rel
        if s == d:
            return h[s]
        return torch.cat([h[d][: self.num_dst[d]], h[s]])

    def active(self, h: Mapping[str, Tensor]) -> list[Relation]:
        """The relations whose source and destination rows are present in ``h``."""
        return [r for r in self.relations if r[0] in h and r[2] in h]

    def __repr__(self) -> str:
        return f"TypedAggregator(num_dst={self.num_dst}, relations={len(self.relations)})"


# ---------------------------------------------------------------------------------- R-GCN
class RGCNConv(nn.Module):
    r"""Relational GCN layer (Schlichtkrull et al. 2018) with optional basis decomposition.

    .. math::
        \mathrm{out}_i = W_0 h_i + \sum_{r} \frac{1}{|N_r(i)|} \sum_{j \in N_r(i)} W_r h_j + b,
        \qquad W_r = \sum_{b=1}^{B} a_{rb} V_b

    (``num_bases=None``: unconstrained :math:`W_r`). A destination without in-edges of relation
    ``r`` gets nothing from it; every type present in ``h`` gets the self term.

    Shapes:
        - h[t]: ``[S_t, in_channels]``; output[t]: ``[D_t, out_channels]``.

    Args:
        in_channels: Input width.
        out_channels: Output width.
        relations: The schema's relations (their order fixes the rows of ``comp``).
        num_bases: Bases :math:`B` (``None``: one free weight per relation).
        bias: Learnable bias :math:`b`.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        relations: Sequence[Relation],
        num_bases: int | None = None,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.relations = tuple(tuple(r) for r in relations)
        self.in_channels, self.out_channels, self.num_bases = in_channels, out_channels, num_bases
        n_rel = len(self.relations)
        bound = 1.0 / math.sqrt(in_channels)
        if num_bases is None:
            self.weight = nn.Parameter(torch.empty(n_rel, in_channels, out_channels))
            nn.init.uniform_(self.weight, -bound, bound)
            self.bases = self.comp = None
        else:
            if isinstance(num_bases, bool) or not isinstance(num_bases, int) or num_bases < 1:
                raise ConfigError(f"'num_bases' must be an int >= 1 or None (got {num_bases!r})")
            self.weight = None
            self.bases = nn.Parameter(torch.empty(num_bases, in_channels, out_channels))
            self.comp = nn.Parameter(torch.empty(n_rel, num_bases))
            nn.init.uniform_(self.bases, -bound, bound)
            nn.init.uniform_(self.comp, -1.0 / math.sqrt(num_bases), 1.0 / math.sqrt(num_bases))
        self.root = nn.Linear(in_channels, out_channels, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_channels)) if bias else None

    def relation_weights(self) -> Tensor:
        """:math:`W_r` for every relation, ``[R, in_channels, out_channels]``."""
        if self.weight is not None:
            return self.weight
        return torch.einsum("rb,bio->rio", self.comp, self.bases)

    def forward(
        self, agg: TypedAggregator, h: Mapping[str, Tensor], *, step: int = 0, layer: int = 0
    ) -> Rows:
        """Apply the layer (no randomness: ``step``/``layer`` unused)."""
        w = self.relation_weights()
        out = {t: self.root(h[t][: agg.num_dst[t]]) for t in agg.node_types if t in h}
        for rel in agg.active(h):
            a = agg.relation(rel)
            rid = self.relations.index(rel)
            msg = a.aggregate(agg.relation_input(rel, h), "mean")  # [D_d, in]
            out[rel[2]] = out[rel[2]] + msg @ w[rid]
        if self.bias is not None:
            out = {t: v + self.bias for t, v in out.items()}
        return out

    def extra_repr(self) -> str:
        """Widths, relations and bases."""
        return (
            f"{self.in_channels}, {self.out_channels}, relations={len(self.relations)}, "
            f"num_bases={self.num_bases}"
        )


# ---------------------------------------------------------------------------------- R-GAT
class _NarrowProduct(torch.autograd.Function):
    """``x @ f`` for a narrow ``f`` (``[N, K] @ [K, H]``, ``H`` a few heads).

    With ``H`` a few columns, BLAS runs the weight gradient ``x^T @ grad`` slowly: 26-34 ms
    against 1.6 ms for ``(grad^T @ x)^T`` at ``N = 17k``, ``K = 256``, ``H = 4`` on one CPU
    thread. This takes the transposed forms (the forward as ``(f^T @ x^T)^T``).
    """

    @staticmethod
    def forward(ctx: Any, x: Tensor, f: Tensor) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(x, f)
        return torch.mm(f.t(), x.t()).t()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None]:  # type: ignore[override]
        x, f = ctx.saved_tensors
        # under autocast the product ran in bfloat16 and the inputs may be float32: the
        # gradients are computed in the wider dtype and returned in each input's
        dt = torch.promote_types(x.dtype, f.dtype)
        grad, xd, fd = grad.to(dt), x.to(dt), f.to(dt)
        grad_x = (grad @ fd.t()).to(x.dtype) if ctx.needs_input_grad[0] else None
        grad_f = torch.mm(grad.t(), xd).t().to(f.dtype) if ctx.needs_input_grad[1] else None
        return grad_x, grad_f


class _HeadProduct(torch.autograd.Function):
    """``out[m, h] = z[m, h] @ w[:, h]`` for ``z [M, H, F]`` and ``w [F, H, D]``: ``[M, H, D]``.

    One batched product per pass, each with its operands laid out for it: autograd's own
    backward of ``bmm`` multiplies by the transposed view of the weight, which took 19.8 ms
    against 13.5 ms with the weight copied to ``[H, D, F]`` first (``M = 5916``, ``F = 256``,
    4 heads of 64, one CPU thread). ``z``'s gradient is returned laid out ``[H, M, F]`` (a
    transposed view), which :func:`~fleetgnn.ops.gspmm_heads` reads without a copy.
    """

    @staticmethod
    def forward(ctx: Any, z: Tensor, w: Tensor) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(z, w)
        return torch.bmm(z.transpose(0, 1), w.permute(1, 0, 2).contiguous()).transpose(0, 1)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None]:  # type: ignore[override]
        z, w = ctx.saved_tensors
        dt = torch.promote_types(z.dtype, w.dtype)  # autocast: see _NarrowProduct.backward
        gh, zd, wd = grad.to(dt).transpose(0, 1), z.to(dt), w.to(dt)  # gh: [H, M, D]
        grad_z = grad_w = None
        if ctx.needs_input_grad[0]:
            grad_z = torch.bmm(gh, wd.permute(1, 2, 0).contiguous()).transpose(0, 1).to(z.dtype)
        if ctx.needs_input_grad[1]:
            grad_w = torch.bmm(gh.transpose(1, 2), zd.transpose(0, 1)).permute(2, 0, 1).to(w.dtype)
        return grad_z, grad_w


class RGATConv(nn.Module):
    r"""GAT per relation over its in-edges, summed over relations (MLPerf's R-GAT layer).

    For relation ``r`` with :math:`g = x W_r \in \mathbb{R}^{S \times H \times D}`:

    .. math::
        s_{ij} = \mathrm{LeakyReLU}(a^r_{src} \cdot g_j + a^r_{dst} \cdot g_i), \qquad
        \alpha^r_{ij} = \operatorname{softmax}_{j \in N_r(i)} s_{ij}

        \mathrm{out}_i = \sum_r \Big( \big\Vert_{h} \sum_{j \in N_r(i)} \alpha^r_{ij} g_j
            + b_r \Big) \quad (\text{or the mean over heads})

    Without self loops (DGL ``GATConv`` per relation inside ``HeteroGraphConv``, sum
    aggregation): a type receiving no relation has no output. Attention dropout is keyed by
    ``(seed, step, layer, relation, src ID, dst ID, head)``.

    Shapes:
        - h[t]: ``[S_t, in_channels]``; output[d]: ``[D_d, heads * out_channels]`` (concat) or
          ``[D_d, out_channels]``, for every type ``d`` some active relation points to.

    Args:
        in_channels: Input width.
        out_channels: Width per head.
        relations: The schema's relations.
        heads: Attention heads.
        concat: Concatenate heads (else average them).
        negative_slope: LeakyReLU slope.
        attn_dropout: Dropout probability on attention coefficients.
        bias: A learnable bias per relation.
        seed: Seed of the attention-dropout keys.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        relations: Sequence[Relation],
        heads: int = 1,
        concat: bool = True,
        negative_slope: float = 0.2,
        attn_dropout: float = 0.0,
        bias: bool = True,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.relations = tuple(tuple(r) for r in relations)
        self.in_channels, self.out_channels, self.heads = in_channels, out_channels, heads
        self.concat, self.negative_slope = concat, negative_slope
        self.attn_dropout, self.seed = attn_dropout, seed
        n_rel = len(self.relations)
        self.lin = nn.Parameter(torch.empty(n_rel, in_channels, heads * out_channels))
        self.att_src = nn.Parameter(torch.empty(n_rel, heads, out_channels))
        self.att_dst = nn.Parameter(torch.empty(n_rel, heads, out_channels))
        self.bias = nn.Parameter(torch.zeros(n_rel, self.out_width)) if bias else None
        #: ``"auto"`` (by :meth:`aggregates_first`'s cost), ``"project"`` or ``"aggregate"``.
        self.order = "auto"
        for r in range(n_rel):
            nn.init.xavier_uniform_(self.lin[r])
            nn.init.xavier_uniform_(self.att_src[r], gain=ATT_INIT_GAIN)
            nn.init.xavier_uniform_(self.att_dst[r], gain=ATT_INIT_GAIN)

    @property
    def out_width(self) -> int:
        """``heads * out_channels`` if ``concat`` else ``out_channels``."""
        return head_width(self.heads, self.out_channels, self.concat)

    def aggregates_first(self, st: Structure, x_src: Tensor) -> bool:
        """Whether relation hop ``st`` aggregates its source rows before projecting them.

        Projecting first (``x W`` on every source, then attention-weighted sums of the
        ``H * D``-wide projected rows) costs ``S F H D`` dense multiply-adds and ``E H D``
        sparse ones per pass; aggregating first (each head's weighted sum of the ``F``-wide
        source rows, then one product per head on the destinations) ``M F H D`` and ``E H F``.
        A relation with far fewer destinations than sources (authors into the papers they
        wrote, the hops near a batch's seeds) is cheaper the second way. The passes counted:
        the forward, and in training the weight's gradient, the attention's, and the rows' where
        ``x_src`` needs one. Sparse and batched multiply-adds are weighed in dense ones by
        :data:`SPARSE_MAC_COST` and :data:`BMM_MAC_COST`, fitted on a CPU; on other devices
        the rule projects first. :attr:`order` forces either way.
        """
        if self.order != "auto":
            return self.order == "aggregate"
        if st.indptr.device.type != "cpu":
            # the costs are a CPU's; on a GPU both orders ran within noise of each other
            # (benchmarks/results/gpu/gpu-check-h100-stop34*.json), so the simpler one
            return False
        grad = torch.is_grad_enabled()
        passes = 1 + grad + (grad and x_src.requires_grad)  # forward, weight, rows
        f, hd = self.in_channels, self.heads * self.out_channels
        c_diag, c_shared = SPARSE_MAC_COST
        project = st.num_src * f * hd * passes + c_diag * st.num_edges * hd * (1 + 2 * grad)
        aggregate = (
            BMM_MAC_COST * st.num_dst * f * hd * (1 + 2 * grad)
            + c_shared * st.num_edges * self.heads * f * passes
        )
        return aggregate < project

    def _scores(
        self, agg: TypedAggregator, h: Mapping[str, Tensor], active: Sequence[Relation]
    ) -> dict[Relation, tuple[Tensor, Tensor]]:
        """Per relation with edges, its source and destination scores ``([S, H], [S_d, H])``.

        The attention vectors fold into the weight, ``(x W) a = x (W a)``, so no score needs a
        projected row, and every score a type's rows take part in (as sources of some relations,
        as destinations of others) comes from one narrow product over those rows, whose
        backward writes the rows' gradient once rather than once per relation.
        """
        cols: dict[str, list[Tensor]] = {}
        at: dict[Relation, tuple[int, int]] = {}
        for rel in active:
            if agg.bipartite(rel).num_edges == 0:
                continue
            rid = self.relations.index(rel)
            w3 = self.lin[rid].view(-1, self.heads, self.out_channels)
            pos = []
            for t, att in ((rel[0], self.att_src), (rel[2], self.att_dst)):
                c = cols.setdefault(t, [])
                pos.append(len(c) * self.heads)
                c.append((w3 * att[rid]).sum(-1))  # [in, H]
            at[rel] = (pos[0], pos[1])
        by_type = {t: _NarrowProduct.apply(h[t], torch.cat(c, 1)) for t, c in cols.items()}
        k = self.heads
        return {
            rel: (by_type[rel[0]][:, i : i + k], by_type[rel[2]][:, j : j + k])
            for rel, (i, j) in at.items()
        }

    def forward(
        self, agg: TypedAggregator, h: Mapping[str, Tensor], *, step: int = 0, layer: int = 0
    ) -> Rows:
        """Apply the layer; ``step`` and ``layer`` key the attention-dropout masks."""
        out: Rows = {}
        n_rel = len(self.relations)
        heads, width = self.heads, self.out_channels
        active = agg.active(h)
        scores = self._scores(agg, h, active)
        rids: dict[str, list[int]] = {}
        for rel in active:
            st = agg.bipartite(rel)  # sources h[s] as they are, destinations h[d][:m]
            rid = self.relations.index(rel)
            m = st.num_dst
            src_t, _, dst_t = rel
            x_src = h[src_t]
            if st.num_edges == 0:  # no messages: the relation gives its bias alone
                res = x_src.new_zeros((m, self.out_width))
            else:
                w = self.lin[rid]  # [in, H * D]
                w3 = w.view(-1, heads, width)
                el, er = scores[rel]
                score = nn.functional.leaky_relu(
                    src_to_edge(st, el) + dst_to_edge(st, er[:m]), self.negative_slope
                )
                alpha = edge_softmax(st, score)  # [E, H]
                if self.training and self.attn_dropout > 0:
                    src_gid, dst_gid = agg.edge_ids(rel)
                    key = layer * n_rel + rid
                    alpha = keyed_edge_dropout(
                        alpha, self.attn_dropout, self.seed, step, key, src_gid, dst_gid
                    )
                if self.aggregates_first(st, x_src):
                    z = gspmm_heads(st, x_src, alpha)  # [M, H, in]
                    res = _HeadProduct.apply(z, w3)  # [M, H, D]
                else:
                    g = (x_src @ w).view(-1, heads, width)  # [S, H, D]
                    res = gspmm(st, g, "sum", alpha)  # [M, H, D]
                res = res.reshape(m, heads * width) if self.concat else res.mean(1)
            out[dst_t] = out[dst_t] + res if dst_t in out else res
            rids.setdefault(dst_t, []).append(rid)
        if self.bias is not None:  # the relations' biases, summed first: one add per type
            out = {t: v + self.bias[rids[t]].sum(0) for t, v in out.items()}
        return out

    def extra_repr(self) -> str:
        """Widths, heads and relations."""
        return (
            f"{self.in_channels}, {self.out_channels}, heads={self.heads}, concat={self.concat}, "
            f"relations={len(self.relations)}"
        )


# ---------------------------------------------------------------------------------- wrapper
class HeteroConv(nn.Module):
    """Any homogeneous fleetgnn layer per relation, combined per destination type (PyG's idea).

    ``out[d] = combine_{r = (s, ., d)} convs[r](agg.relation(r), agg.relation_input(r, h))``
    with ``combine`` a sum or a mean over the relations that reach ``d``; a type no active
    relation reaches has no output. Each conv is called as ``conv(agg, x_src, step=, layer=)``
    (:class:`~fleetgnn.nn.SAGEConv`, :class:`~fleetgnn.nn.GATConv`, ...).

    Args:
        convs: Per relation, its layer (all with one output width).
        aggr: ``"sum"`` or ``"mean"``.
    """

    AGGRS: tuple[str, ...] = ("sum", "mean")

    def __init__(self, convs: Mapping[Relation, nn.Module], aggr: str = "sum") -> None:
        super().__init__()
        if aggr not in self.AGGRS:
            raise ConfigError(f"HeteroConv 'aggr' must be one of {self.AGGRS} (got {aggr!r})")
        self.aggr = aggr
        self.relations = tuple(tuple(r) for r in convs)
        self.convs = nn.ModuleDict({relation_key(r): c for r, c in convs.items()})

    def forward(
        self, agg: TypedAggregator, h: Mapping[str, Tensor], *, step: int = 0, layer: int = 0
    ) -> Rows:
        """Apply every relation's layer and combine per destination type."""
        parts: dict[str, list[Tensor]] = {}
        for rel in agg.active(h):
            if rel not in self.relations:
                continue
            conv = self.convs[relation_key(rel)]
            res = conv(agg.relation(rel), agg.relation_input(rel, h), step=step, layer=layer)
            parts.setdefault(rel[2], []).append(res)
        out: Rows = {}
        for d, ps in parts.items():
            total = ps[0]
            for p in ps[1:]:
                total = total + p
            out[d] = total / len(ps) if self.aggr == "mean" else total
        return out


# ---------------------------------------------------------------------------------- model
class HeteroGNN(LayerwiseModule):
    """A typed GNN for node classification on the schema's target type.

    Layer 0 first encodes each type's input rows to one width: featured types by a per-type
    linear projection when widths differ (or some type is featureless), featureless types by a
    learnable :class:`torch.nn.Embedding` over their type-local IDs (``sparse=True`` gives
    sparse gradients for optimizers that take them). Each layer then applies keyed dropout per
    type (keyed by global IDs), the relational layer and, between layers, the activation.

    Rows are dicts keyed by type: ``forward(aggs, x)`` takes ``x[t]`` = the feature rows of
    ``aggs[0].src_ids[t]`` for the featured types and returns the target type's logits
    ``[D_target, out_dim]``.

    Args:
        schema: The typed graph's schema (its ``target`` is classified).
        feature_widths: Per type its feature width, ``None`` (or absent) for featureless types.
        hidden_dim: Hidden width (per head for ``rgat``).
        out_dim: Classes.
        num_layers: Message-passing layers.
        conv: ``"rgcn"``, ``"rgat"`` or ``"hetero-sage"`` (:class:`HeteroConv` of
            :class:`~fleetgnn.nn.SAGEConv`, summed), or a callable
            ``conv(in_width, out_width, last) -> module`` building a typed layer.
        dropout: Dropout on every layer's input.
        num_bases: R-GCN bases (``None``: one weight per relation).
        heads: R-GAT heads of hidden layers (the output layer has one).
        attn_dropout: R-GAT attention dropout.
        embedding_dim: Width of featureless types' embeddings (default: the encoded width).
        sparse: Sparse gradients for the embedding tables.
        seed: Seed of every dropout key.

    Raises:
        ConfigError: For an unknown conv or bad sizes (a schema without target trains
            embeddings only, e.g. in a :class:`~fleetgnn.nn.decoders.LinkModel`).
    """

    hosts: tuple[str, ...] = ("reference", "minibatch", "split")
    hosts_reason = "a typed model runs on typed blocks, which these engines sample"

    def __init__(
        self,
        schema: Any,
        feature_widths: Mapping[str, int | None],
        hidden_dim: int,
        out_dim: int,
        num_layers: int = 2,
        conv: str | Callable[[int, int, bool], nn.Module] = "rgcn",
        dropout: float = 0.0,
        num_bases: int | None = None,
        heads: int = 1,
        attn_dropout: float = 0.0,
        embedding_dim: int | None = None,
        sparse: bool = False,
        seed: int = 0,
    ) -> None:
        super().__init__(num_layers if isinstance(num_layers, int) and num_layers >= 1 else 1)
        if isinstance(conv, str) and conv not in HETERO_CONVS:
            raise ConfigError(f"'conv' must be one of {HETERO_CONVS} (got {conv!r})")
        for name, v in (("hidden_dim", hidden_dim), ("out_dim", out_dim), ("heads", heads)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"'{name}' must be a positive int (got {v!r})")
        if not 0.0 <= float(dropout) < 1.0:
            raise ConfigError(f"'dropout' must lie in [0, 1) (got {dropout!r})")
        self.schema, self.target = schema, schema.target
        self.dropout, self.seed = float(dropout), int(seed)
        self.conv_name = conv if isinstance(conv, str) else "custom"
        if conv == "rgat":  # its fused scores read whole bipartite relations (agg.bipartite)
            self.hosts = ("reference", "minibatch")
            self.hosts_reason = (
                "R-GAT's attention reads each relation's source rows by type, which the split "
                "engine's per-relation exchange does not serve"
            )
        self._offsets = {t: schema.type_range(t)[0] for t in schema.node_types}
        widths = {t: feature_widths.get(t) for t in schema.node_types}
        featured = {t: int(w) for t, w in widths.items() if w is not None}
        one = set(featured.values())
        project = len(one) != 1
        width = hidden_dim if project else one.pop()
        emb = width if embedding_dim is None else int(embedding_dim)
        if emb != width and not project:
            project, width = True, hidden_dim
        self.proj = nn.ModuleDict(
            {t: nn.Linear(w, width) for t, w in featured.items()} if project else {}
        )
        self.embed = nn.ModuleDict(
            {
                t: nn.Embedding(schema.count(t), emb, sparse=sparse)
                for t in schema.node_types
                if t not in featured
            }
        )
        for e in self.embed.values():
            nn.init.normal_(e.weight, std=1.0 / math.sqrt(emb))
        if self.embed and emb != width:
            self.embed_proj = nn.Linear(emb, width)
        self.convs = nn.ModuleList()
        rels = schema.relations
        for i in range(num_layers):
            last = i == num_layers - 1
            if callable(conv) and not isinstance(conv, str):
                layer: nn.Module = conv(width, out_dim if last else hidden_dim, last)
                out_w = out_dim if last else hidden_dim
            elif conv == "rgcn":
                out_w = out_dim if last else hidden_dim
                layer = RGCNConv(width, out_w, rels, num_bases=num_bases)
            elif conv == "rgat":
                layer = RGATConv(
                    width,
                    out_dim if last else hidden_dim,
                    rels,
                    heads=1 if last else heads,
                    concat=not last,
                    attn_dropout=attn_dropout,
                    seed=seed,
                )
                out_w = layer.out_width
            else:
                out_w = out_dim if last else hidden_dim
                layer = HeteroConv({r: SAGEConv(width, out_w) for r in rels}, aggr="sum")
            self.convs.append(layer)
            width = out_w
        self.act = nn.ELU() if conv == "rgat" else nn.ReLU()

    def encode(self, agg: TypedAggregator, x: Mapping[str, Tensor]) -> Rows:
        """Layer 0's input rows of every type at one width (projections and embeddings)."""
        h: Rows = {}
        for t in agg.node_types:
            if t in self.embed:
                local = agg.src_ids[t] - self._offsets[t]
                e = self.embed[t](local)
                h[t] = self.embed_proj(e) if hasattr(self, "embed_proj") else e
            elif t in x:
                h[t] = self.proj[t](x[t]) if t in self.proj else x[t]
        return h

    def layer_forward(  # type: ignore[override]
        self, i: int, agg: TypedAggregator, h_src: Mapping[str, Tensor], *, step: int = 0
    ) -> Rows:
        """Layer ``i`` on one typed hop: dict of ``[S_t, w_in]`` -> dict of ``[D_t, w_out]``."""
        if not 0 <= i < self.num_layers:
            raise ConfigError(f"layer index 'i' must lie in [0, {self.num_layers}) (got {i})")
        h = self.encode(agg, h_src) if i == 0 else dict(h_src)
        h = {
            t: keyed_dropout(
                v, self.dropout, self.seed, step, i, agg.src_ids[t][: v.shape[0]], self.training
            )
            for t, v in h.items()
        }
        out = self.convs[i](agg, h, step=step, layer=i)
        if i < self.num_layers - 1:
            out = {t: self.act(v) for t, v in out.items()}
        return out

    def forward(self, aggs: Sequence[Any], x: Mapping[str, Tensor], *, step: int = 0) -> Tensor:  # type: ignore[override]
        """All layers; returns the target type's logits ``[D_target, out_dim]``."""
        out = super().forward(aggs, x, step=step)  # type: ignore[arg-type]
        if self.target is None:
            raise ConfigError(
                "a typed model's forward classifies the schema's target type and it names none; "
                "for embeddings of every type chain layer_forward (LinkModel does)"
            )
        if self.target not in out:
            raise ConfigError(
                f"no relation reaches the target type {self.target!r} in the last layer; add "
                f"reverse relations (fleetgnn.graph.hetero.add_reverse_relations)"
            )
        return out[self.target]  # type: ignore[index]


def build_hetero_model(name: str, graph: Any, num_classes: int, **kwargs: Any) -> HeteroGNN:
    """A :class:`HeteroGNN` of conv ``name`` for a :class:`~fleetgnn.graph.hetero.HeteroGraph`.

    Raises:
        ConfigError: For an unknown name.
    """
    if name not in HETERO_CONVS:
        raise ConfigError(f"unknown typed model {name!r}; choose one of {HETERO_CONVS}")
    widths = {t: graph.feature_width(t) for t in graph.schema.node_types}
    return HeteroGNN(graph.schema, widths, out_dim=num_classes, conv=name, **kwargs)
