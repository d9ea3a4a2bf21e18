"""Time R-GAT's two orders of work on every relation of a typed batch, and fit the order rule.

:meth:`fleetgnn.nn.hetero.RGATConv.aggregates_first` picks, per relation, whether to project
the sources first or aggregate them first, by a cost with three constants
(:data:`~fleetgnn.nn.hetero.SPARSE_MAC_COST`, :data:`~fleetgnn.nn.hetero.BMM_MAC_COST`). This
script measures what they stand for: on one batch of ``igbh-like`` (3 layers, 4 heads x 64,
fanouts 15,10,5, batch 1024 by default) it times each relation's forward and backward alone in
both orders (median of ``--repeat``), fits the constants by least squares over all of them
(relative to a dense multiply-add), and says which order the current rule picks for each and
what its misses cost. One batch's terms are nearly collinear, so the fit is loose (it moves
between runs); the rule's picks against the timings are the check. Run it where the constants
should hold (``--device``):

    OMP_NUM_THREADS=1 python benchmarks/fit_rgat_orders.py --threads 1
    python benchmarks/fit_rgat_orders.py --scale 0.005 --repeat 1   # a quick look
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fleetgnn.bench.data import cached_typed_dataset
from fleetgnn.bench.epoch import reference_engine
from fleetgnn.bench.hetero import add_rgat_workload_options

ORDERS = ("project", "aggregate")


def _time(fn: Any, repeat: int, device: torch.device) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e3


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Per layer and relation with edges: its sizes and the ms of each order (forward+backward)."""
    graph, _ = cached_typed_dataset(args.cache_dir, "igbh-like", args.scale, args.seed)
    fanouts = [int(f) for f in args.fanouts.split(",")]
    engine, _ = reference_engine(
        graph,
        [
            "model.name=rgat",
            "train.mode=minibatch",
            f"model.num_layers={len(fanouts)}",
            f"model.hidden={args.hidden}",
            f"model.heads={args.heads}",
            "model.dropout=0.0",
            f"train.fanouts={fanouts}",
            f"train.batch_size={args.batch_size}",
            f"train.device={args.device}",
        ],
    )
    model, device = engine.module, engine.device
    seeds = engine.loader.batch(0, 0)
    blocks = [b.to(device) for b in engine.sampler.sample_from_nodes(seeds).blocks]
    aggs = engine.aggregators(blocks)
    inputs = []
    with torch.no_grad():  # each layer's input rows
        h = engine.features(blocks[0])
        for i in range(len(fanouts)):
            inputs.append(h)
            h = model.layer_forward(i, aggs[i], h)
    rows = []
    for i, (conv, agg) in enumerate(zip(model.convs, aggs, strict=True)):
        for rel in agg.relations:
            st = agg.bipartite(rel)
            if st.num_edges == 0:
                continue
            x = {t: inputs[i][t] for t in dict.fromkeys((rel[0], rel[2]))}
            one = _OneRelation(agg, rel)
            got: dict[str, Any] = {
                "layer": i,
                "relation": rel[1],
                "S": st.num_src,
                "M": st.num_dst,
                "E": st.num_edges,
                "F": conv.in_channels,
                "H": conv.heads,
                "D": conv.out_channels,
                "rows_grad": i > 0,
            }
            for order in ORDERS:
                conv.order = order

                def run(conv: Any = conv, x: dict = x, one: Any = one, i: int = i) -> None:
                    hh = {t: v.detach().requires_grad_(i > 0) for t, v in x.items()}
                    out = conv(one, hh)
                    sum(v.sum() for v in out.values()).backward()

                got[order] = _time(run, args.repeat, device)
            conv.order = "auto"
            xs = x[rel[0]].detach().requires_grad_(i > 0)
            got["rule"] = "aggregate" if conv.aggregates_first(st, xs) else "project"
            rows.append(got)
    return rows


class _OneRelation:
    """A typed hop seen through one of its relations (the layer then runs that one alone)."""

    def __init__(self, agg: Any, rel: tuple[str, str, str]) -> None:
        self._agg, self._rel = agg, rel

    def active(self, h: Any) -> list[tuple[str, str, str]]:
        return [self._rel]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._agg, name)


def fit(rows: list[dict[str, Any]]) -> dict[str, float]:
    """The constants, relative to a dense multiply-add: one least-squares fit over both orders.

    Project: ``S F H D`` dense multiply-adds per pass (2 passes, 3 where the rows need a
    gradient) and ``E H D`` sparse ones (3 passes); aggregate: ``M F H D`` batched ones
    (3 passes) and ``E H F`` sparse ones (2 or 3). Both share a term per output element
    (``M H D``) and a constant.
    """
    x, y = [], []
    for r in rows:
        hd, p = r["H"] * r["D"], 2 + int(r["rows_grad"])
        x.append([r["S"] * r["F"] * hd * p, r["E"] * hd * 3, 0, 0, r["M"] * hd, 1])
        y.append(r["project"])
        x.append([0, 0, r["M"] * r["F"] * hd * 3, r["E"] * r["H"] * r["F"] * p, r["M"] * hd, 1])
        y.append(r["aggregate"])
    c, *_ = np.linalg.lstsq(np.array(x, dtype=float), np.array(y), rcond=None)
    return {
        "dense_gmacs_per_s": 1e-6 / c[0],
        "sparse_per_head": c[1] / c[0],
        "bmm": c[2] / c[0],
        "sparse_shared": c[3] / c[0],
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Entry point; returns the rows, the fit and the rule's record."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_rgat_workload_options(p)
    p.add_argument("--repeat", type=int, default=5, help="timed calls per relation and order")
    p.add_argument("--threads", type=int, default=None, help="torch threads")
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", type=Path, default=None, help="write the result as JSON here")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = measure(args)
    best = sum(min(r[o] for o in ORDERS) for r in rows)
    rule = sum(r[r["rule"]] for r in rows)
    for r in rows:
        fast = min(ORDERS, key=lambda o: r[o])
        print(
            f"layer {r['layer']} {r['relation']:<20} S={r['S']:>7} M={r['M']:>7} E={r['E']:>8}"
            f"  project {r['project']:7.2f} ms  aggregate {r['aggregate']:7.2f} ms"
            f"  rule: {r['rule']}{'' if r['rule'] == fast else '  (miss)'}"
        )
    res = {
        "rows": rows,
        "totals_ms": {
            "project": sum(r["project"] for r in rows),
            "aggregate": sum(r["aggregate"] for r in rows),
            "rule": rule,
            "best": best,
        },
        "rule_misses": sum(r[r["rule"]] > min(r[o] for o in ORDERS) for r in rows),
        "fit": fit(rows) if len(rows) >= 3 else None,
    }
    print(json.dumps({k: v for k, v in res.items() if k != "rows"}, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=1))
    return res


if __name__ == "__main__":
    main()
