"""Link prediction on the engines: which engines train it, its steps and its evaluation.

The engines and modes of :data:`~fleetgnn.config.run.LINK_ENGINES` train ``train.task=link``;
every other one refuses a link task in one line naming them (:func:`check_task`). A temporal
link task (:class:`~fleetgnn.tasks.TemporalLinkPrediction`) trains on those of
:data:`TEMPORAL_ENGINES` (:mod:`fleetgnn.engines.temporal_link`); the others refuse it in one
line (:func:`check_temporal`: a full graph has no "now"); so does a temporal node task
(:class:`~fleetgnn.tasks.TemporalNodeClassification`) outside :data:`TEMPORAL_NODE_ENGINES`.

Negatives are keyed by ``(seed, epoch, src, dst)`` (:class:`~fleetgnn.tasks.NegativeSampler`
with the epoch as its step): each training edge is a positive once per epoch in either mode, so
every engine, mode and world size draws the same negatives for the same edge in the same epoch.

- Full graph (:func:`full_graph_link_loss`): the encoder runs over the message-passing graph of
  training edges; every training edge and its negatives are scored with the model's decoder and
  the task's loss is averaged over the training edges.
- Edge mini-batches (:class:`EdgeBatches`): the seeds of a step are a batch of training edges,
  dealt like node seeds (:class:`~fleetgnn.sampling.PositionLoader` over edge positions: a
  keyed bijection per epoch computed slice by slice, equal slots per rank, so the order costs
  ``O(batch)`` memory; the positives are read from the split's mapped arrays batch by batch).
  The sampler samples the neighbourhoods of the union of the endpoints of the positives and
  their negatives (deduplicated: :meth:`~fleetgnn.sampling.Sampler.sample_from_edges`, as
  PyG's), a :class:`~fleetgnn.engines.batch.MiniBatch` with its pairs set, with the batch's
  target edges and their reverses dropped from its blocks unless the task keeps them
  (``train.keep_target_edges``). The one builder serves typed and temporal tasks too: the
  task gives the relation and the times, the sampler the rest. Each rank's loss is its
  positives' summed loss over the step's positives on every rank, so the summed gradient is
  the gradient of the step's mean loss.
- Distributed full graph (``fullgraph``, :class:`OwnedPairs`): rank ``r`` scores the training
  pairs whose source it owns; the destinations' and negatives' rows are fetched from their
  owners once per step (:func:`owner_rows`: an all-to-all of IDs, then a differentiable
  all-to-all of rows whose backward returns the gradients), and the loss is divided by every
  rank's pairs. Its evaluation scores the pairs as below (:func:`owned_link_metrics`).
- Split-parallel edge batches (``split``, :func:`split_edge_batch_loss`): one global edge batch
  a step, the reference's, drawn by every rank; its seeds are split by owner like node seeds
  and each rank computes its owned seeds' rows, then scores the positives whose source it owns,
  the other endpoints' rows fetched once per step (:func:`owner_rows`); the loss is over the
  batch's positives. Its evaluation is the sampled engines' (:func:`sampled_link_metrics`;
  a temporal task's: :func:`~fleetgnn.engines.temporal_link.sampled_temporal_metrics`).
- Offloaded full graph (``offload``, :mod:`fleetgnn.engines.offload_link`): the pairs of
  :class:`OwnedPairs` scored on the host-resident last layer in chunks of pairs, each chunk's
  rows exchanged as :func:`owner_rows` does (:func:`request_rows`, :func:`answer_rows`).
- Evaluation (:func:`owned_link_metrics`; the sampled engines get their rows from streaming
  layer-wise inference, :func:`sampled_link_metrics`): each rank holds only the embeddings of the
  nodes it owns and scores the fixed evaluation pairs whose source it owns (a positive with its
  OGB-protocol negatives, and the GAE-protocol negative pairs), fetching the other endpoints'
  rows from their owners, each distinct node once per split, or per chunk of its pairs
  (:func:`request_rows`, :func:`answer_rows`). The task's summable metric sums are then
  all-reduced. No rank holds every node's embedding.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from fleetgnn.config.run import LINK_ENGINES, link_refusal
from fleetgnn.engines.batch import MiniBatch
from fleetgnn.engines.chunks import Chunking, rank_range
from fleetgnn.engines.inference import layer_widths, stream_inference
from fleetgnn.engines.step import StepLoss
from fleetgnn.errors import ConfigError
from fleetgnn.sampling import Block, EdgeSample, PositionLoader, Sampler
from fleetgnn.tasks import NODE_CLASSIFICATION, LinkPrediction, Task
from fleetgnn.tasks.link_metrics import histogram_sums, ranking_sums
from fleetgnn.tasks.temporal_link import TemporalLinkPrediction
from fleetgnn.tasks.temporal_node import TemporalNodeClassification

#: ``(engine, mode)`` pairs that train a temporal link task.
TEMPORAL_ENGINES: tuple[tuple[str, str], ...] = (
    ("reference", "minibatch"),
    ("minibatch", "minibatch"),
    ("split", "minibatch"),
)
#: ``(engine, mode)`` pairs that train a temporal node task (:mod:`fleetgnn.engines.temporal_node`).
TEMPORAL_NODE_ENGINES: tuple[tuple[str, str], ...] = (
    ("reference", "minibatch"),
    ("minibatch", "minibatch"),
    ("split", "minibatch"),
)


def is_temporal(task: Task | None) -> bool:
    """Whether ``task`` is a temporal link task."""
    return isinstance(task, TemporalLinkPrediction)


def temporal_refusal(
    engine: str,
    mode: str | None,
    what: str = "link prediction",
    engines: tuple[tuple[str, str], ...] = TEMPORAL_ENGINES,
    times: str = "the edge times",
) -> str:
    """The one-line refusal of a temporal task (``what``) by ``engine`` in ``mode``.

    ``engines``: the ``(engine, mode)`` pairs that train it; ``times``: what
    ``train.temporal=off`` ignores.
    """
    can = ", ".join(f"{e} (mode={m})" for e, m in engines)
    why = (
        "a full graph has no 'now' (every embedding would see every edge, future ones included)"
        if mode == "full"
        else "its batches are not sampled in time yet"
    )
    return (
        f"the {engine} engine (mode={mode}) does not train temporal {what}: {why}; "
        f"use {can}, or set train.temporal=off to ignore {times}"
    )


def temporal_pairs(kind: str) -> tuple[tuple[str, str], ...]:
    """The ``(engine, mode)`` pairs that train a temporal ``kind`` task (``"link"``/``"node"``)."""
    return TEMPORAL_ENGINES if kind == "link" else TEMPORAL_NODE_ENGINES


def refuse_temporal(engine: str, mode: str | None, kind: str) -> None:
    """Raise :class:`ConfigError` if a temporal ``kind`` task cannot train on ``engine``/``mode``.

    ``kind``: ``"link"`` (edge times) or ``"node"`` (node times).
    """
    if (engine, mode) in temporal_pairs(kind):
        return
    if kind == "link":
        raise ConfigError(temporal_refusal(engine, mode))
    what, times = "node classification", "the node and edge times"
    raise ConfigError(temporal_refusal(engine, mode, what, TEMPORAL_NODE_ENGINES, times))


def check_temporal(engine: str, mode: str | None, task: Task | None) -> None:
    """Raise :class:`ConfigError` if temporal ``task`` cannot train on ``engine`` in ``mode``."""
    if is_temporal(task):
        refuse_temporal(engine, mode, "link")
    if isinstance(task, TemporalNodeClassification):
        refuse_temporal(engine, mode, "node")


def check_task(engine: str, mode: str, task: Task | None) -> None:
    """Raise :class:`ConfigError` if ``engine`` in ``mode`` cannot train ``task``.

    A temporal link task trains only where its batches are sampled in time
    (:func:`check_temporal`).
    """
    if isinstance(task, LinkPrediction) and (engine, mode) not in LINK_ENGINES:
        raise ConfigError(link_refusal(engine, mode))
    check_temporal(engine, mode, task)


def setup_task(engine: Any, mode: str, task: Task | None, graph: Any, loss: Any) -> tuple[Any, Any]:
    """Check and set ``engine.task`` and ``engine.link``; ``(graph, loss)`` the engine trains on.

    Link prediction passes messages on the split's training graph and, without a loss of the
    user's, takes the task's; any other task keeps both as given (``None``: node classification).

    Raises:
        ConfigError: The engine in ``mode`` cannot train ``task``.
    """
    check_task(engine.name, mode, task)
    engine.task = task if task is not None else NODE_CLASSIFICATION
    engine.link = isinstance(task, LinkPrediction)
    if isinstance(task, LinkPrediction):  # message passing on the training edges only
        return task.split.train_graph, (loss if loss is not None else task.loss_fn)
    return graph, loss


def check_link_model(model: torch.nn.Module) -> None:
    """Raise :class:`ConfigError` unless ``model`` has a pair ``decoder`` (a LinkModel)."""
    if not callable(getattr(model, "decoder", None)):
        raise ConfigError(
            f"link prediction needs a model with a pair decoder (got {type(model).__name__}); "
            f"wrap the encoder: fleetgnn.nn.decoders.LinkModel(encoder, DotDecoder())"
        )


def pair_scores(
    decoder: Any, h: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, neg: torch.Tensor
) -> torch.Tensor:
    """Scores ``[P, 1 + K]`` of positives ``(src, dst)`` (column 0) and ``(src, neg[:, k])``."""
    k = neg.shape[1]
    pos = decoder(h[src], h[dst]).unsqueeze(1)
    negs = decoder(h[src.repeat_interleave(k)], h[neg.reshape(-1)]).view(-1, k)
    return torch.cat([pos, negs], dim=1)


def full_graph_link_loss(
    model: Any, task: LinkPrediction, h: torch.Tensor, loss: Any, step: int
) -> StepLoss:
    """The step's loss over every training edge and its negatives, from all embeddings ``h``."""
    src, dst = task.train_pairs()
    neg = task.sampler.sample(src, dst, step)  # one step per epoch: step == epoch
    dev = h.device
    scores = pair_scores(model.decoder, h, src.to(dev), dst.to(dev), neg.to(dev))
    return StepLoss.of(loss, scores, None, int(src.numel()), task)  # type: ignore[arg-type]


class EdgeBatches:
    """Batches of training edges for one rank, and the blocks each one samples.

    One builder for every link task and graph: the task gives a step's positives (typed: the
    relation's type-local IDs; temporal: with their times) and their keyed negatives, and the
    sampler's :meth:`~fleetgnn.sampling.Sampler.sample_from_edges` turns them into seeds,
    positions and blocks, the batch's target edges (and their reverses) dropped unless the task
    keeps them (``train.keep_target_edges``; a temporal task keeps them: a seed sees only the
    edges before its time).

    Args:
        task: The link task (training pairs, negatives, ``keep_target_edges``, ``relation``,
            ``train_pair_times``).
        sampler: The sampler (over the message-passing graph); ``None`` for :meth:`pairs` alone.
        batch_size: Positive edges per rank per step.
        rank: This rank.
        world_size: Data-parallel ranks.
        seed: Run seed (the per-epoch order of the edges).
    """

    def __init__(
        self,
        task: LinkPrediction,
        sampler: Sampler | None,
        batch_size: int,
        *,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
    ) -> None:
        self.task, self.sampler = task, sampler
        self.loader = PositionLoader(
            task.num_train_pairs(), batch_size, rank=rank, world_size=world_size, seed=seed
        )
        self.rank = rank

    @property
    def num_batches(self) -> int:
        """Steps per epoch (equal on every rank)."""
        return self.loader.num_batches

    def pairs(
        self, epoch: int, step: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """This rank's positives of ``(epoch, step)``: ``(src, dst, neg [P, K], time or None)``."""
        idx = self.loader.batch(epoch, step)
        src, dst = self.task.train_pair_rows(idx)
        neg = self.task.sampler.sample(src, dst, epoch)
        return src, dst, neg, self.task.train_pair_times(idx)

    def _sample(
        self,
        src: torch.Tensor,
        dst: torch.Tensor,
        neg: torch.Tensor,
        time: torch.Tensor | None,
        epoch: int,
        step: int,
        stream: int,
    ) -> EdgeSample:
        assert self.sampler is not None, "EdgeBatches built without a sampler samples nothing"
        return self.sampler.sample_from_edges(
            src,
            dst,
            neg,
            time=time,
            relation=self.task.relation,
            exclude_targets=not self.task.keep_target_edges,
            epoch=epoch,
            step=step,
            stream=stream,
        )

    def batch(self, epoch: int, step: int, stream: int | None = None) -> MiniBatch:
        """This rank's edge batch of ``(epoch, step)`` (its pairs set), sampled with ``stream``.

        ``stream`` (``None``: the rank) keys the neighbour sampling, as node batches do.
        """
        src, dst, neg, time = self.pairs(epoch, step)
        stream = self.rank if stream is None else stream
        sample = self._sample(src, dst, neg, time, epoch, step, stream)
        return MiniBatch.from_edges(sample, self.loader.global_count(step))

    def part_blocks(
        self, batch: MiniBatch, positives: torch.Tensor, epoch: int, step: int, stream: int
    ) -> list[Block]:
        """The blocks of the positives ``positives`` of ``batch`` alone, sampled with ``stream``.

        Their endpoints and negatives are the seeds, at their positives' times, their target
        edges dropped as :meth:`batch` drops them (a data-parallel rank's share of a
        homogeneous batch, for counting).
        """
        src, dst, neg = (batch.seeds[t[positives]] for t in (batch.src, batch.dst, batch.neg))
        seed_time = batch.sample.seed_time
        time = None if seed_time is None else seed_time[batch.src[positives]]
        return list(self._sample(src, dst, neg, time, epoch, step, stream).blocks)


def edge_batch_loss(
    model: Any, task: LinkPrediction, h: torch.Tensor, batch: MiniBatch, loss: Any
) -> StepLoss:
    """The step loss of an edge batch from its seeds' output rows ``h`` ``[S, D]``."""
    dev = h.device
    scores = pair_scores(model.decoder, h, batch.src.to(dev), batch.dst.to(dev), batch.neg.to(dev))
    return StepLoss.of(loss, scores, None, batch.global_count, task)  # type: ignore[arg-type]


def split_edge_batch_loss(
    model: Any,
    task: LinkPrediction,
    comm: Any,
    h_own: torch.Tensor,
    batch: MiniBatch,
    seed_owner: torch.Tensor,
    loss: Any,
) -> StepLoss:
    """This rank's share of a split-parallel edge batch's loss (one global batch a step).

    The seeds of ``batch`` are split by owner: rank ``r`` holds ``h_own``, the output rows of
    the seeds it owns (``seed_owner == r``) in seed order. It scores the positives whose source
    it owns, with their negatives; the rows of their other endpoints come from their owners once
    per step (:func:`owner_rows`, each distinct node once, differentiable), and the loss is over
    the batch's positives, so the summed gradient is the gradient of the step's mean loss.
    Collective (every rank calls it, also with no pairs of its own).
    """
    world = comm.world_size if comm is not None else 1
    rank = comm.rank if comm is not None else 0
    own = seed_owner.cpu().to(torch.int64)
    # the seeds renumbered by (owner, position): a rank's rows are a range, as owner_rows takes
    offsets = torch.zeros(world + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(torch.bincount(own, minlength=world), 0)
    new = torch.empty_like(own)
    new[torch.argsort(own, stable=True)] = torch.arange(own.numel())
    mine = own[batch.src] == rank
    src, dst, neg = new[batch.src[mine]], new[batch.dst[mine]], new[batch.neg[mine]]
    p, k = int(neg.shape[0]), int(neg.shape[1])
    dev = h_own.device
    far = owner_rows(comm if world > 1 else None, h_own, torch.cat([dst, neg.reshape(-1)]), offsets)
    table = torch.cat([h_own[(src - int(offsets[rank])).to(dev)], far])
    ar = torch.arange(p, device=dev)
    neg_at = 2 * p + torch.arange(p * k, device=dev).view(p, k)
    scores = pair_scores(model.decoder, table, ar, p + ar, neg_at)
    return StepLoss.of(loss, scores, None, batch.global_count, task)  # type: ignore[arg-type]


def sampled_link_metrics(engine: Any) -> dict[str, float]:
    """Link metrics of a sampled engine (see the module docstring); collective over ranks.

    ``engine``: a sampled engine training a link task (its ``module``, ``graph``,
    ``eval_topology``, ``_features``, ``comm``, ``device``, ``dtype``, ``chunking`` and config).
    """
    graph, comm, module = engine.graph, engine.comm, engine.module
    in_width = int(graph.num_features)
    width = layer_widths(
        module, in_width, module.num_layers, device=engine.device, dtype=engine.dtype
    )[-1]
    world = comm.world_size if comm is not None else 1
    rank = comm.rank if comm is not None else 0
    n = int(graph.num_nodes)
    bounds = [rank_range(n, world, r) for r in range(world)]
    offsets = torch.tensor([b[0] for b in bounds] + [n], dtype=torch.int64)
    lo, hi = bounds[rank]
    h_own = torch.zeros(hi - lo, width, dtype=engine.dtype, device=engine.device)

    def sink(ids: Any, rows: torch.Tensor) -> None:  # this rank's range [lo, hi) only
        h_own[torch.from_numpy(ids).to(h_own.device) - lo] = rows

    stream_inference(
        module,
        engine.eval_topology,
        engine._features,
        graph.indptr,
        sink,
        in_width=in_width,
        comm=comm,
        device=engine.device,
        dtype=engine.dtype,
        chunking=getattr(engine, "chunking", None) or Chunking(),
        scratch_dir=engine.config.scratch_dir,
        same_host=engine.ctx.same_host,
    )
    with torch.no_grad():
        return owned_link_metrics(
            engine.task, module.decoder, comm if world > 1 else None, h_own, offsets
        )


def owned_link_metrics(
    task: LinkPrediction,
    decoder: Any,
    comm: Any,
    h_own: torch.Tensor,
    offsets: torch.Tensor,
    inv: torch.Tensor | None = None,
    *,
    chunks: int = 1,
    device: Any = None,
) -> dict[str, float]:
    """The evaluation metrics, each rank scoring the pairs whose source it owns.

    Rank ``r`` holds the rows ``h_own`` ``[offsets[r+1] - offsets[r], D]`` of the (new) IDs
    ``[offsets[r], offsets[r + 1])``. For each evaluation split it scores the positives whose
    source it owns with their OGB-protocol negatives, and the GAE-protocol negative pairs whose
    source it owns; the other endpoints' rows come from their owners, each distinct node once
    per chunk (:func:`request_rows`, :func:`answer_rows`). The task's metric sums (integer
    histograms, ranking sums: they add over pairs) are then all-reduced, so the result is the
    one-process computation's.

    Collective (every rank calls it): per split and chunk one all-to-all of IDs and one of rows,
    then the all-reduce of the sums. Memory on ``device``: one chunk's rows, those of its
    sources and of the distinct other endpoints of the rank's pairs (at most the split's
    pairs x ``(2 + K) / chunks``), never ``[N, D]``.

    Args:
        task: The link task (its split's fixed evaluation pairs, in original IDs; with
            ``train.eval_edges``, that many of each split's, evenly spread).
        decoder: The model's pair decoder.
        comm: The communicator (``None``: one process, ``h_own`` is every node's row).
        h_own: This rank's rows (on ``device``, or in host memory: read chunk by chunk).
        offsets: int64 ``[W + 1]`` new-ID ranges of the ranks.
        inv: int64 ``[N]`` original -> new IDs (``None``: the identity).
        chunks: Score each split's pairs in this many chunks (the same on every rank).
        device: Where the rows are scored and the sums reduced (``None``: ``h_own``'s).
    """
    rank = comm.rank if comm is not None else 0
    offsets = offsets.cpu().to(torch.int64)
    lo = int(offsets[rank])
    dev = h_own.device if device is None else torch.device(device)
    comm = comm if comm is not None and comm.world_size > 1 else None

    def new(ids: Any) -> torch.Tensor:
        t = torch.from_numpy(ids).to(torch.int64)
        return t if inv is None else inv[t]

    def mine(ids: torch.Tensor) -> torch.Tensor:
        return torch.searchsorted(offsets[1:], ids, right=True) == rank

    def rows(ids: torch.Tensor) -> torch.Tensor:  # owned rows of new IDs, on dev
        return h_own[(ids - lo).to(h_own.device)].to(dev)

    sums: dict[str, torch.Tensor] = {}
    for s in ("val", "test"):
        p_all, n_all, nd_all = task.eval_pairs(s)  # every pair, or train.eval_edges of them
        pos, neg, nd = new(p_all), new(n_all), new(nd_all)  # [2, P], [2, P], [P, K]
        keep_p, keep_n = mine(pos[0]), mine(neg[0])
        p_src, p_dst, n_src, n_dst = pos[0][keep_p], pos[1][keep_p], neg[0][keep_n], neg[1][keep_n]
        nd = nd[keep_p]
        k = int(nd.shape[1])
        parts_p = torch.tensor_split(torch.arange(int(p_src.numel())), max(int(chunks), 1))
        parts_n = torch.tensor_split(torch.arange(int(n_src.numel())), max(int(chunks), 1))
        for at_p, at_n in zip(parts_p, parts_n, strict=True):
            p, m = int(at_p.numel()), int(at_n.numel())
            ids = torch.cat([p_dst[at_p], n_dst[at_n], nd[at_p].reshape(-1)])
            request = request_rows(comm, ids, offsets, dev)
            far = answer_rows(comm, request, rows(request.asked))
            src_rows = rows(p_src[at_p])
            ps = decoder(src_rows, far[:p])
            ns = decoder(rows(n_src[at_n]), far[p : p + m])
            rank_neg = decoder(src_rows.repeat_interleave(k, dim=0), far[p + m :]).view(p, k)
            hist, ranks = histogram_sums(ps, ns), ranking_sums(ps, rank_neg)
            sums[f"{s}_hist"] = sums[f"{s}_hist"] + hist if f"{s}_hist" in sums else hist
            sums[f"{s}_rank"] = sums[f"{s}_rank"] + ranks if f"{s}_rank" in sums else ranks
    if comm is not None:
        sums = {key: comm.all_reduce_sum(v.to(dev)) for key, v in sums.items()}
    return task.metrics_from_sums({key: v.cpu() for key, v in sums.items()})


def owner_rows(
    comm: Any, h_own: torch.Tensor, ids: torch.Tensor, offsets: torch.Tensor
) -> torch.Tensor:
    """Rows ``[len(ids), D]`` of nodes ``ids`` from their owners' ``h_own``, differentiably.

    Rank ``r`` owns the (new) IDs ``[offsets[r], offsets[r + 1])`` and holds their rows
    ``h_own``. Each distinct ID is requested once from its owner (one all-to-all of IDs,
    :func:`request_rows`) and its row comes back in a second, differentiable all-to-all
    (:func:`answer_rows`), whose backward returns the rows' gradients to their owners.
    Collective: every rank calls it, also with no ``ids``.
    """
    world = comm.world_size if comm is not None else 1
    lo = int(offsets[comm.rank if comm is not None else 0])
    if world == 1:
        return h_own[ids - lo]
    request = request_rows(comm, ids, offsets, h_own.device)
    return answer_rows(comm, request, h_own[request.asked.to(h_own.device) - lo])


@dataclasses.dataclass(frozen=True)
class RowRequest:
    """One rank's side of an exchange of owned rows (:func:`request_rows`).

    Attributes:
        asked: int64 ``[R]`` (new) IDs this rank owns that the ranks asked for, grouped by the
            asking rank in rank order (each rank's distinct IDs once, sorted).
        inverse: int64 ``[len(ids)]`` position of each requested ID among the rows that come
            back (:func:`answer_rows`).
        sent: IDs this rank asked of each rank.
        received: IDs each rank asked of this rank.
    """

    asked: torch.Tensor
    inverse: torch.Tensor
    sent: list[int]
    received: list[int]


def request_rows(
    comm: Any, ids: torch.Tensor, offsets: torch.Tensor, device: Any = None
) -> RowRequest:
    """Ask the owners of ``ids`` for their rows: each distinct ID once (collective).

    One all-to-all of IDs on ``device`` (the communicator's; ``None``: the CPU), none on one
    process (every ID is this rank's). The owner answers with :func:`answer_rows`, giving the
    rows of :attr:`RowRequest.asked` in that order.
    """
    world = comm.world_size if comm is not None else 1
    uniq, inv = torch.unique(ids.cpu(), return_inverse=True)  # sorted: grouped by owner
    if world == 1:
        return RowRequest(uniq, inv, [int(uniq.numel())], [int(uniq.numel())])
    owner = torch.searchsorted(offsets[1:].cpu(), uniq, right=True)
    send = torch.bincount(owner, minlength=world).tolist()
    req, recv = comm.all_to_all(uniq.to(device or "cpu"), send)
    return RowRequest(req.cpu(), inv, send, recv)


def answer_rows(comm: Any, request: RowRequest, rows: torch.Tensor) -> torch.Tensor:
    """Rows ``[len(ids), D]`` of a :func:`request_rows` request, given the owned ``rows``.

    ``rows``: ``[len(request.asked), D]``, this rank's rows of :attr:`RowRequest.asked`. One
    differentiable all-to-all (collective; its backward returns the gradients of the rows to
    their owners); none on one process.
    """
    if comm is None or comm.world_size == 1:
        return rows[request.inverse.to(rows.device)]
    back, _ = comm.all_to_all(rows, request.received, recv_counts=request.sent)
    return back[request.inverse.to(back.device)]


class OwnedPairs:
    """The training pairs a rank scores in a distributed full-graph step (it owns the source).

    Args:
        task: The link task (its training pairs, in original IDs).
        inv_perm: ``[N]`` original -> new IDs (``None``: the identity).
        offsets: int64 ``[W + 1]`` new-ID ranges of the ranks.
        rank: This rank.
    """

    def __init__(
        self, task: LinkPrediction, inv_perm: Any, offsets: torch.Tensor, rank: int
    ) -> None:
        self.task = task
        self.inv = None if inv_perm is None else torch.from_numpy(inv_perm.astype("int64"))
        self.offsets = offsets.cpu().to(torch.int64)
        src, dst = task.train_pairs()
        mine = self.owner(self.new(src)) == rank
        self.src, self.dst = src[mine], dst[mine]  # original IDs (the negatives' keys)
        self.total = int(src.numel())

    def new(self, ids: torch.Tensor) -> torch.Tensor:
        """New IDs of original ``ids``."""
        return ids if self.inv is None else self.inv[ids]

    def owner(self, new_ids: torch.Tensor) -> torch.Tensor:
        """The rank owning each new ID."""
        return torch.searchsorted(self.offsets[1:], new_ids, right=True)

    def loss(self, model: Any, comm: Any, h_own: torch.Tensor, loss: Any, epoch: int) -> StepLoss:
        """This rank's share of the full-graph link loss (over every rank's training pairs)."""
        neg = self.task.sampler.sample(self.src, self.dst, epoch)  # [P, K], original IDs
        p, k = neg.shape
        rank = comm.rank if comm is not None else 0
        dev = h_own.device
        lo = int(self.offsets[rank])
        far = owner_rows(
            comm, h_own, torch.cat([self.new(self.dst), self.new(neg).reshape(-1)]), self.offsets
        )
        table = torch.cat([h_own[(self.new(self.src) - lo).to(dev)], far])
        ar = torch.arange(p, device=dev)
        scores = pair_scores(
            model.decoder, table, ar, p + ar, 2 * p + torch.arange(p * k, device=dev).view(p, k)
        )
        return StepLoss.of(loss, scores, None, self.total, self.task)  # type: ignore[arg-type]
