"""Does the planner pick the measured fastest engine on this machine? (``local`` profile.)

For a grid of cases (dataset x model x mode x ranks) the planner predicts every candidate engine's
epoch on the ``local`` profile (measured once, cached), then every candidate is trained for real
(``fleetgnn train``, one warm-up epoch, best of the timed ones) and the measured fastest is
compared with the planner's choice. Cases whose measured times differ by less than ``--margin``
(1.5x by default: noise on a shared machine) are reported but not scored. Also reported: the
predicted and measured traffic per link kind of every run.

Usage::

    python benchmarks/bench_plan.py --out benchmarks/results/bench_plan.json
    python benchmarks/bench_plan.py --scales 0.01 --models gcn --epochs 1
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import torch

from fleetgnn.bench.data import cached_dataset, dataset_dir, default_cache_dir
from fleetgnn.bench.machine import machine_info
from fleetgnn.bench.runs import train_epochs
from fleetgnn.cli.plan import hardware_profile
from fleetgnn.config import load_config
from fleetgnn.cost import make_plan, workload_from_config


def train_run(
    dataset: str, engine: str, model: str, mode: str, world: int, epochs: int, run_dir: Path
) -> dict[str, Any]:
    """One ``fleetgnn train``: the best timed epoch's seconds and its traffic."""
    recs, _ = train_epochs(dataset, engine, model, world, epochs, run_dir, mode=mode)
    best = min(recs, key=lambda r: r["epoch_time_s"])
    return {"epoch_s": best["epoch_time_s"], "traffic": best["traffic"]}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line arguments."""
    cache = default_cache_dir()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="products-like")
    p.add_argument("--scales", type=float, nargs="+", default=[0.01])
    p.add_argument("--cache-dir", type=Path, default=cache)
    p.add_argument("--models", nargs="+", default=["gcn", "sage", "gat"])
    p.add_argument("--modes", nargs="+", default=["full", "minibatch"])
    p.add_argument("--worlds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--epochs", type=int, default=2, help="timed epochs after one warm-up")
    p.add_argument("--margin", type=float, default=1.5)
    p.add_argument("--out", type=Path, default=None)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the grid, print one line per case and the score, optionally write JSON."""
    args = parse_args(argv)
    cases = []
    with tempfile.TemporaryDirectory() as tmp:
        for scale in args.scales:
            graph, _ = cached_dataset(args.cache_dir, args.preset, scale, 0)
            dataset = str(dataset_dir(args.cache_dir, args.preset, scale))
            for model in args.models:
                for mode in args.modes:
                    for world in args.worlds:
                        cfg = load_config(None, [f"model.name={model}", f"train.mode={mode}"])
                        wl = workload_from_config(cfg, graph=graph)
                        plan = make_plan(wl, hardware_profile("local", world), world, mode=mode)
                        measured = {}
                        for name in plan.predictions:
                            run_dir = Path(tmp) / f"{scale}-{model}-{mode}-{world}-{name}"
                            measured[name] = train_run(
                                dataset, name, model, mode, world, args.epochs, run_dir
                            )
                        times = {n: m["epoch_s"] for n, m in measured.items()}
                        fastest = min(times, key=times.get)
                        spread = max(times.values()) / min(times.values())
                        case = {
                            "scale": scale,
                            "model": model,
                            "mode": mode,
                            "world": world,
                            "choice": plan.choice,
                            "fastest": fastest,
                            "spread": spread,
                            "scored": spread >= args.margin and len(times) > 1,
                            "agree": plan.choice == fastest,
                            "choice_vs_fastest": times[plan.choice] / times[fastest]
                            if plan.choice in times
                            else None,
                            "predicted_s": {n: p.epoch_s for n, p in plan.predictions.items()},
                            "measured_s": times,
                            "predicted_traffic": {
                                n: p.traffic for n, p in plan.predictions.items()
                            },
                            "measured_traffic": {n: m["traffic"] for n, m in measured.items()},
                        }
                        cases.append(case)
                        print(
                            f"{scale:g} {model:<5} {mode:<9} W={world}  plan={plan.choice:<10}"
                            f" fastest={fastest:<10} spread={spread:.2f}x "
                            f"{'(scored)' if case['scored'] else '(within noise)'} "
                            + " ".join(f"{n}={t:.2f}s" for n, t in times.items()),
                            flush=True,
                        )
    scored = [c for c in cases if c["scored"]]
    agree = sum(c["agree"] for c in scored)
    near = sum((c["choice_vs_fastest"] or 99) <= 1.25 for c in scored)
    print(f"planner picked the measured fastest in {agree}/{len(scored)} scored cases")
    print(f"its choice was within 1.25x of the measured fastest in {near}/{len(scored)}")
    result = {
        "machine": machine_info(torch.device("cpu")),
        "settings": {k: str(v) for k, v in vars(args).items()},
        "cases": cases,
        "score": {"agree": agree, "within_1.25x": near, "scored": len(scored), "total": len(cases)},
    }
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
