"""The ``fleetgnn`` command line (``prepare``, ``train``, ``predict``, ``embed``, ...).

User errors (:class:`~fleetgnn.errors.FleetgnnError`, a full disk included) print one line and
exit with status 2; add ``--verbose`` to see the traceback (and, for a failed worker, the
worker's). Ctrl-C prints one line and exits with status 130; SIGTERM is handled the same way
(the same clean stop, the same line) and exits with status 143. Warnings are one line each.
Anything else is a bug and shows its traceback.

``prepare`` and ``train`` first sweep what killed processes left behind (temporary dataset
directories, temporary checkpoint files, shared-memory segments whose owner process is gone) and
say what they removed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from fleetgnn import __version__
from fleetgnn.cli.messages import one_line, one_line_warnings
from fleetgnn.cli.options import CONFIG_EXAMPLE, Parser, add_config_options
from fleetgnn.errors import FleetgnnError


def _add_prepare(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "prepare",
        help="convert a dataset into fleetgnn's on-disk format",
        description="Convert a dataset into a fleetgnn dataset directory (memory-mapped .npy "
        "arrays + meta.json). The directory appears only once it is complete.",
    )
    fmt = p.add_subparsers(dest="format", metavar="FORMAT", required=True)

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--out", required=True, type=Path, help="output dataset directory")
        q.add_argument("--overwrite", action="store_true", help="replace an existing --out")
        q.add_argument(
            "--feature-dtype",
            default=None,
            metavar="DTYPE",
            help="store the node features compact on disk: bf16 | fp16 | fp8 (float8 e4m3 "
            "with a scale per row) or fp32; x.npy then holds 2x / about 4x fewer bytes, and "
            "the store's tiers read those rows as stored (default: as the source holds them). "
            "A typed dataset: one dtype for every featured type, or TYPE=DTYPE,... per type "
            "(e.g. paper=bf16,author=fp8; types not named as the source holds them)",
        )

    def max_memory(q: argparse.ArgumentParser) -> None:
        from fleetgnn.graph.loaders._io import default_max_bytes, human_bytes

        q.add_argument(
            "--max-memory",
            default=None,
            metavar="SIZE",
            help="memory the loader may use, e.g. 4GB or 512MiB; an input declaring more (a "
            "small file can declare gigabytes) is refused before it is allocated (default: half "
            f"of this machine's memory, here {human_bytes(default_max_bytes())})",
        )

    q = fmt.add_parser(
        "planetoid",
        help="Planetoid ind.<name>.* pickles (Cora, CiteSeer, PubMed); Cora ships with fleetgnn",
    )
    q.add_argument(
        "--root",
        default=None,
        type=Path,
        help="directory holding ind.<name>.* files (default: the copy of Cora that ships with "
        "fleetgnn, for --name cora)",
    )
    q.add_argument("--name", required=True, help="dataset name, e.g. cora")
    max_memory(q)
    common(q)

    def split_knobs(q: argparse.ArgumentParser, random: bool = True) -> None:
        if random:
            g = q.add_argument_group(
                "random split (Planetoid-style: per-class training nodes, then val, then test)"
            )
            g.add_argument(
                "--num-train-per-class",
                type=int,
                default=None,
                metavar="K",
                help="training nodes per class (default 20)",
            )
            g.add_argument(
                "--num-val", type=int, default=None, help="validation nodes (default 500)"
            )
            g.add_argument("--num-test", type=int, default=None, help="test nodes (default 1000)")
            g.add_argument(
                "--split-seed", type=int, default=None, help="seed of the split (default 0)"
            )
        g = q.add_argument_group(
            "your own split (instead of the "
            + ("random one" if random else "dataset's")
            + "; disjoint, labelled nodes only)"
        )
        g.add_argument(
            "--train-mask", type=Path, default=None, help="training nodes (.npy, N bools or 0/1)"
        )
        g.add_argument("--val-mask", type=Path, default=None, help="validation nodes (.npy)")
        g.add_argument("--test-mask", type=Path, default=None, help="test nodes (.npy)")
        g.add_argument(
            "--split",
            type=Path,
            default=None,
            metavar="FILE",
            help="all three sets in one file: .npz with arrays train/val/test, or .json "
            '{"train": [...], "val": [...], "test": [...]}; each a bool mask of N entries or '
            "a list of node IDs (instead of the mask files)",
        )

    q = fmt.add_parser(
        "npz", help="gnn-benchmark sparse .npz (adj_*, attr_*, labels); cora.npz ships with it"
    )
    src = q.add_mutually_exclusive_group(required=True)
    src.add_argument("--file", type=Path, help="the .npz file")
    src.add_argument(
        "--name",
        default=None,
        help="a file that ships with fleetgnn instead of --file: cora (gnn-benchmark's cora.npz)",
    )
    split_knobs(q)
    max_memory(q)
    common(q)
    q = fmt.add_parser(
        "ogb",
        help="OGB node-property raw layout (raw/*.csv.gz, split/*), homogeneous or typed "
        "(ogbn-mag's)",
        description="Convert an OGB dataset folder as unpacked from its release, streamed in "
        "bounded memory. Homogeneous layout, under raw/: edge.csv.gz ('src,dst' per line), "
        "num-node-list.csv.gz and num-edge-list.csv.gz (one integer each); optional "
        "node-feat.csv.gz (features), node-label.csv.gz (labels, 'nan' = unlabelled), "
        "edge-feat.csv.gz (edge_attr), edge_year.csv.gz (one integer time >= 0 per edge, "
        "ogbl-collab's years: edge_time, each node's in-edges sorted by time) and "
        "node_year.csv.gz (one per node, ogbn-arxiv's years: node_time); and "
        "split/NAME/{train,valid,test}.csv.gz; other files (edge_weight.csv.gz) are not "
        "read. With --undirected a reverse edge takes its edge's time and duplicates of an "
        "edge keep the earliest. Typed layout (ogbn-mag's, detected by "
        "raw/num-node-dict.csv.gz): the per-type and per-relation files as OGB lays them out; "
        "a type's raw/node-feat/TYPE/node_year.csv.gz becomes its node_time.",
    )
    q.add_argument("--root", required=True, type=Path, help="dataset root with raw/ and split/")
    q.add_argument("--name", default=None, help="split name (auto-detected when there is one)")
    q.add_argument("--undirected", action="store_true", help="also store reverse edges")
    g = q.add_argument_group(
        "heterogeneous layout (ogbn-mag: raw/num-node-dict.csv.gz, raw/relations/*; detected)"
    )
    g.add_argument(
        "--add-reverse",
        action="store_true",
        help="add each relation's reverse (dst, rev_NAME, src) where absent",
    )
    g.add_argument(
        "--target", default=None, help="labelled node type (needed when several carry labels)"
    )
    max_memory(q)
    common(q)
    q = fmt.add_parser(
        "edgelist",
        help="text edge list 'src dst [weight]' per line (or 'src dst a_1 .. a_D' with "
        "--edge-attr)",
        description="Convert a text edge list: one edge per line, 'src dst' (0-based node IDs) "
        "separated by whitespace or one comma, optionally a third column, the edge weight. With "
        "--edge-attr every column after 'src dst' is an edge feature instead: 'src dst a_1 .. "
        "a_D', the same D >= 1 on every line, finite numbers (stored as edge_attr [E, D] "
        "float32, for edge-feature models such as model.name=gine). With --time-column K, "
        "column K (1-based, >= 3) of every line is the edge's time, an integer >= 0 (stored as "
        "edge_time, each node's in-edges sorted by time); the other columns are read as above. "
        "With --node-time FILE (.npy, one integer >= 0 per node) each node gets the time at "
        "which its label is asked (node_time), for temporal node classification. "
        "Text after '#' and blank lines are ignored; a .gz file is read as it is.",
    )
    q.add_argument("--edges", required=True, type=Path, help="the edge-list file (.gz too)")
    q.add_argument(
        "--edge-attr",
        action="store_true",
        help="read the columns after 'src dst' as D edge features 'a_1 .. a_D' (edge_attr) "
        "instead of a weight",
    )
    q.add_argument(
        "--time-column",
        type=int,
        default=None,
        metavar="K",
        help="column K (1-based, >= 3) holds each edge's integer time >= 0 (edge_time), e.g. 3 "
        "for 'src dst time'",
    )
    q.add_argument("--features", type=Path, default=None, help="features .npy [N, F]")
    q.add_argument("--labels", type=Path, default=None, help="labels .npy [N]")
    q.add_argument(
        "--node-time",
        type=Path,
        default=None,
        metavar="FILE",
        help="node times .npy [N]: one integer >= 0 per node, when its label is asked "
        "(node_time; in the unit of the edge times)",
    )
    q.add_argument("--undirected", action="store_true", help="add reverse edges")
    split_knobs(q)
    common(q)
    q = fmt.add_parser(
        "pyg",
        help="a PyG dataset already on disk (ROOT/NAME/processed/*.pt; needs torch_geometric)",
        description="Convert a PyTorch Geometric dataset from its processed file (what PyG "
        "wrote under ROOT/NAME/processed when the dataset was first loaded). Nothing is "
        "downloaded or processed; the file is read with torch.load(weights_only=True).",
    )
    q.add_argument("--root", required=True, type=Path, help="the root given to the PyG dataset")
    q.add_argument("--name", required=True, help="dataset name, e.g. Cora (any case)")
    split_knobs(q, random=False)
    max_memory(q)
    common(q)
    q = fmt.add_parser("synthetic", help="generated graph with learnable labels")
    q.add_argument(
        "--preset",
        default="small",
        help="tiny | small | products-like | papers-like, a temporal graph (edge times, drifting "
        "communities): temporal-like, or a typed graph: mag-like | igbh-like, or typed with "
        "node and edge times: mag-temporal-like (default: small)",
    )
    q.add_argument("--scale", type=float, default=1.0, help="multiply nodes and edges by this")
    q.add_argument("--seed", type=int, default=0, help="seed of the generator")
    q.add_argument(
        "--edge-features",
        type=int,
        default=0,
        metavar="D",
        help="also draw D edge features per edge (edge_attr, for model.name=gine; default 0)",
    )
    common(q)


def _check_feature_dtype(spec: str) -> None:
    """Refuse a bad ``--feature-dtype`` before any work: its dtypes (one, or ``TYPE=DTYPE,...``).

    The node types of the per-type form are checked against the typed source's schema.
    """
    from fleetgnn.graph.compact_rows import writer_codec

    for part in spec.split(","):
        writer_codec(part.partition("=")[2] if "=" in part else part)


def _homogeneous_feature_dtype(args: argparse.Namespace) -> str | None:
    """``--feature-dtype`` for a homogeneous dataset: one dtype (per type is refused)."""
    spec = args.feature_dtype
    if spec is not None and "=" in spec:
        raise FleetgnnError(
            f"--feature-dtype {spec} gives a dtype per node type, but this source is "
            "homogeneous (one node type): give one dtype, e.g. --feature-dtype bf16"
        )
    return spec


def _cmd_prepare(args: argparse.Namespace) -> int:
    from fleetgnn.cli.report import report_removed
    from fleetgnn.graph.dataset import write_dataset
    from fleetgnn.graph.files import sweep_stale
    from fleetgnn.graph.loaders import load_edgelist, load_npz, load_planetoid, prepare_ogb

    # what a killed `prepare` left next to the output (its temporary directories); in a
    # directory that is not fleetgnn's, those without an owner only if named after this output
    if args.feature_dtype is not None:  # a bad --feature-dtype is refused before any work
        _check_feature_dtype(args.feature_dtype)
    out = args.out.absolute()
    report_removed(sweep_stale(out.parent, files=False, legacy_names={out.name}), "prepare")
    max_bytes = None  # the loaders' default: half of this machine's memory
    if getattr(args, "max_memory", None) is not None:
        from fleetgnn.config.units import parse_bytes

        max_bytes = parse_bytes(args.max_memory, "--max-memory")

    if args.format == "synthetic":
        from fleetgnn.cli.progress import task_progress
        from fleetgnn.graph.synthetic import (
            PRESETS,
            SyntheticSpec,
            TypedSyntheticSpec,
            prepare_synthetic,
            spec_for,
        )

        spec = spec_for(args.preset)  # an unknown name fails here, listing every preset
        if args.edge_features and not isinstance(spec, SyntheticSpec):
            raise FleetgnnError(
                "--edge-features applies to the static homogeneous presets only: "
                + ", ".join(p for p, s in PRESETS.items() if isinstance(s, SyntheticSpec))
            )
        typed = isinstance(spec, TypedSyntheticSpec)
        with task_progress(f"generating {args.preset} x{args.scale}") as progress:
            out = prepare_synthetic(
                args.out,
                preset=args.preset,
                scale=args.scale,
                seed=args.seed,
                overwrite=args.overwrite,
                progress=progress,
                edge_features=args.edge_features,
                feature_dtype=args.feature_dtype if typed else _homogeneous_feature_dtype(args),
            )
    elif args.format == "ogb":
        from fleetgnn.errors import ConfigError
        from fleetgnn.graph.loaders import is_hetero_layout, prepare_ogb_hetero

        if is_hetero_layout(args.root):
            if args.undirected:
                raise ConfigError(
                    f"'{args.root}' holds a heterogeneous (typed) layout, whose relations have a "
                    f"direction: use --add-reverse instead of --undirected"
                )
            out = prepare_ogb_hetero(
                args.root,
                args.out,
                name=args.name,
                overwrite=args.overwrite,
                add_reverse=args.add_reverse,
                target=args.target,
                max_bytes=max_bytes,
                feature_dtype=args.feature_dtype,
            )
        else:
            if args.add_reverse or args.target is not None:
                raise ConfigError(
                    f"--add-reverse and --target apply to a heterogeneous layout (raw/"
                    f"num-node-dict.csv.gz), which '{args.root}' is not; use --undirected to "
                    f"store reverse edges of a homogeneous graph"
                )
            out = prepare_ogb(
                args.root,
                args.out,
                name=args.name,
                overwrite=args.overwrite,
                undirected=args.undirected,
                max_bytes=max_bytes,
                feature_dtype=_homogeneous_feature_dtype(args),
            )
    else:
        from fleetgnn.graph.loaders import npz, planetoid

        if args.format == "planetoid":
            if args.root is None:  # the bundled copy (refused in one line for another name)
                from fleetgnn.graph.loaders.bundled import planetoid_root

                args.root, args.name = planetoid_root(args.name), args.name.lower()
            graph = load_planetoid(args.root, args.name, max_bytes=max_bytes)
            # the customary transform of these features, applied by `train` unless told otherwise
            source = {
                "source": "planetoid",
                "root": str(args.root),
                "feature_norm": planetoid.FEATURE_NORM,
            }
        elif args.format == "npz":
            names = ("num_train_per_class", "num_val", "num_test", "split_seed")
            names += ("train_mask", "val_mask", "test_mask", "split")
            knobs = {k: getattr(args, k) for k in names if getattr(args, k) is not None}
            if args.file is None:
                from fleetgnn.graph.loaders.bundled import npz_file

                args.file = npz_file(args.name)
            graph = load_npz(args.file, max_bytes=max_bytes, **knobs)  # the rest: defaults
            source = {"source": "npz", "file": str(args.file), "feature_norm": npz.FEATURE_NORM}
        elif args.format == "pyg":
            from fleetgnn.graph.loaders.pyg_dataset import (
                find_processed,
                load_pyg_dataset,
                pyg_feature_norm,
            )

            own = ("train_mask", "val_mask", "test_mask", "split")
            graph = load_pyg_dataset(
                args.root, args.name, max_bytes=max_bytes, **{k: getattr(args, k) for k in own}
            )
            source = {
                "source": "pyg",
                "file": str(find_processed(args.root, args.name)),
                "feature_norm": pyg_feature_norm(args.name),
            }
        else:
            graph = load_edgelist(
                args.edges,
                features=args.features,
                labels=args.labels,
                undirected=args.undirected,
                edge_attr=args.edge_attr,
                time_column=args.time_column,
                node_time=args.node_time,
                num_train_per_class=args.num_train_per_class,
                num_val=args.num_val,
                num_test=args.num_test,
                split_seed=args.split_seed,
                train_mask=args.train_mask,
                val_mask=args.val_mask,
                test_mask=args.test_mask,
                split=args.split,
            )
            source = {"source": "edgelist", "file": str(args.edges)}
        out = write_dataset(
            graph,
            args.out,
            overwrite=args.overwrite,
            feature_dtype=_homogeneous_feature_dtype(args),
            **source,
        )
    _print_info(out, as_json=False)
    return 0


def _add_info(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="describe a dataset directory")
    p.add_argument("dataset", type=Path)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--verify",
        action="store_true",
        help="check every value again (in bounded memory) and record it in verified.json; "
        "without it, values are checked only when the files no longer match that record",
    )


def _cmd_info(args: argparse.Namespace) -> int:
    _print_info(args.dataset, as_json=args.json, verify=args.verify)
    return 0


def _print_info(path: Path, as_json: bool, verify: bool = False) -> None:
    from fleetgnn.cli.report import check_progress, dataset_info, render_info

    with check_progress() as progress:
        info = dataset_info(path, verify=verify, progress=progress)
    if as_json:
        print(json.dumps(info))
    else:
        render_info(info)


def _add_partition(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "partition",
        help="partition a dataset and save the partition book next to it",
        description="Partition DATASET into P parts, save the book under "
        "DATASET/partitions/<method>-<P>/ and report its quality.",
    )
    p.add_argument("dataset", type=Path)
    p.add_argument(
        "--method",
        default="metis",
        choices=["range", "hash", "random", "metis", "ldg"],
        help="metis (default): best cut, needs the graph in memory (~110 bytes per edge); ldg: "
        "streaming linear deterministic greedy for graphs larger than memory; "
        "range / hash / random: no locality, instant",
    )
    p.add_argument(
        "--parts", type=int, required=True, help="number of parts P, 1 <= P <= number of nodes"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the partitioner")
    p.add_argument(
        "--balance",
        default=None,
        help="balance criteria, comma-separated from nodes,train,edges (metis: vertex weights; "
        "default: edges for range, nodes otherwise)",
    )
    p.add_argument(
        "--max-memory",
        default=None,
        metavar="SIZE",
        help="memory metis may use, e.g. 16GB; a graph whose estimated need is larger is "
        "refused before METIS starts (default: the memory available now)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-save", dest="save", action="store_false", help="report only")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a saved book of the same method and parts (without it, one is never "
        "overwritten)",
    )


def _cmd_partition(args: argparse.Namespace) -> int:
    import time

    from fleetgnn.cli.report import check_progress
    from fleetgnn.errors import PartitionError
    from fleetgnn.graph.dataset import open_dataset
    from fleetgnn.partition import evaluate, partition

    with check_progress() as progress:
        graph = open_dataset(args.dataset, progress=progress, kind="graph")
    if args.parts > graph.num_nodes:  # METIS would report every empty part; nobody wants those
        raise PartitionError(
            f"--parts {args.parts} is more than the {graph.num_nodes} nodes of '{args.dataset}'; "
            f"choose --parts between 1 and {graph.num_nodes}"
        )
    if args.save and not args.overwrite:  # refused before any work, like prepare's --out
        from fleetgnn.partition import book_dir

        existing = book_dir(args.dataset, args.method, args.parts)
        if existing.exists():
            raise PartitionError(
                f"a {args.method} book with {args.parts} parts is already saved in '{existing}'; "
                "pass --overwrite to replace it, or --no-save to report only"
            )
    balance = (
        tuple(b.strip() for b in args.balance.split(",") if b.strip()) if args.balance else None
    )
    t0 = time.perf_counter()
    max_memory = None
    if args.max_memory is not None:
        from fleetgnn.config.units import parse_bytes

        max_memory = parse_bytes(args.max_memory, "--max-memory")
    book = partition(
        graph, args.method, args.parts, seed=args.seed, balance=balance, max_memory=max_memory
    )
    seconds = time.perf_counter() - t0
    quality = evaluate(graph, book)
    saved = None
    if args.save:
        from fleetgnn.graph.files import disk_full_error, is_disk_full, refresh_free

        try:
            saved = book.save(args.dataset, overwrite=args.overwrite)
        except OSError as e:  # the book's temporary directory is removed by then
            if not is_disk_full(e):
                raise
            need = book.part_of.nbytes + book.offsets.nbytes + book.perm.nbytes + 4096
            err = disk_full_error(
                args.dataset / "partitions", need, "free some space there, or pass --no-save"
            )
            refresh_free(err)
            raise err from e
    result = {
        "method": args.method,
        "parts": args.parts,
        "seconds": round(seconds, 4),
        **quality.to_dict(),
        "saved_to": str(saved) if saved else None,
    }
    if args.json:
        print(json.dumps(result))
    else:
        from fleetgnn.cli.report import render_partition

        render_partition(result)
    return 0


def _add_train(sub: argparse._SubParsersAction) -> None:
    from fleetgnn.config import ENGINES, Config, ModelConfig
    from fleetgnn.config.run import MODEL_DEFAULTS

    rows = "\n".join(
        f"  {n:<10} {'/'.join(s.modes):<15} {s.summary}" + ("" if s.available else " [not built]")
        for n, s in ENGINES.items()
    )
    d = Config()
    hidden = "/".join(
        f"{m}:{v['hidden_dim']}" for m, v in MODEL_DEFAULTS.items() if "hidden_dim" in v
    )
    p = sub.add_parser(
        "train",
        help="train a GNN (no arguments: the embedded synthetic default)",
        description="Train a GNN. With no arguments trains GraphSAGE on the embedded synthetic\n"
        "default dataset. Writes RUN_DIR/summary.json and RUN_DIR/metrics.jsonl.\n"
        "Each flag sets one config key (named in its help); every other key is set with\n"
        "--set KEY=VALUE or a --config YAML file; --list-keys lists them with their defaults.",
        epilog=f"engines (--engine; modes, the first is the default):\n{rows}\n\n"
        "often-set keys and their defaults (--set KEY=VALUE):\n"
        f"  model.hidden={hidden}  model.num_layers={d.model.num_layers}  "
        f"optim.lr={d.optim.lr}  optim.weight_decay={d.optim.weight_decay}\n"
        f"  train.batch_size={d.train.batch_size}  "
        f"train.fanouts=[{','.join(map(str, d.train.fanouts))}]  "
        f"train.checkpoint_every={d.train.checkpoint_every}  "
        f"data.feature_norm=(the dataset's)\n\n{CONFIG_EXAMPLE}",
    )
    p.add_argument(
        "--dataset",
        type=Path,
        default=None,
        help="dataset directory (fleetgnn prepare); data.dataset (default: the embedded "
        f"synthetic '{d.data.preset}' graph, generated once into the cache)",
    )
    p.add_argument(
        "--model",
        default=None,
        choices=list(ModelConfig.NAMES),
        help=f"model.name (default: {d.model.name})",
    )
    p.add_argument(
        "--task",
        default=None,
        choices=["node", "link"],
        help="node classification or link prediction; train.task (default: node; link takes "
        "the GAE defaults: 200 epochs, hidden 32, embeddings 16, no dropout or weight decay)",
    )
    p.add_argument(
        "--mode",
        default=None,
        choices=["full", "minibatch"],
        help="full-graph or sampled training; train.mode (default: the engine's first mode, see "
        "below)",
    )
    p.add_argument(
        "--engine",
        default=None,
        choices=[*ENGINES, "auto"],
        help=f"training strategy; train.engine (default: {d.train.engine}; see below; auto: the "
        "planner's choice, recorded in RUN_DIR/plan.json)",
    )
    p.add_argument(
        "--hardware",
        default="local",
        help="hardware profile --engine auto plans for (default: local, measured on this machine)",
    )
    from fleetgnn.cli.target import add_target_options

    add_target_options(p, "--engine auto: rank the engines")
    p.add_argument(
        "--epochs", type=int, default=None, help=f"train.epochs (default: {d.train.epochs})"
    )
    p.add_argument(
        "--nproc",
        type=int,
        default=None,
        help=f"worker processes (one per device); train.nproc (default: {d.train.nproc})",
    )
    p.add_argument(
        "--max-restarts",
        type=int,
        default=None,
        help="restart failed workers this many times; train.max_restarts (default: "
        f"{d.train.max_restarts})",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help=f"seed of the model's initial weights and every random draw; train.seed (default: "
        f"{d.train.seed})",
    )
    p.add_argument(
        "--run-dir",
        type=Path,
        default=None,
        help="where the run writes (default: runs/<date>-<time>-<model>-<engine>)",
    )
    add_config_options(p, "optim.lr=0.005")
    p.add_argument(
        "--resume",
        type=Path,
        default=None,
        metavar="RUN_DIR",
        help="continue the run in RUN_DIR from its latest checkpoint",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the run in --run-dir if there is one (without it, an existing run is "
        "never overwritten: continue it with --resume, or pick a new --run-dir)",
    )
    p.add_argument(
        "--accept-changed-dataset",
        action="store_true",
        help="with --resume: continue even though the dataset's files changed since the run "
        "started (by default such a resume is refused)",
    )
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
    p.add_argument(
        "--quiet",
        action="store_true",
        help="print nothing but errors (no progress, no per-epoch lines, no summary table)",
    )


def _add_plan(sub: Any) -> None:
    from fleetgnn.cli.plan import add_plan

    add_plan(sub)


def _add_report(sub: Any) -> None:
    from fleetgnn.cli.plots import add_report

    add_report(sub)


def _cmd_report(args: argparse.Namespace) -> int:
    from fleetgnn.cli.plots import run_report

    return run_report(args)


def _cmd_plan(args: argparse.Namespace) -> int:
    from fleetgnn.cli.plan import run_plan

    return run_plan(args)


def _cmd_train(args: argparse.Namespace) -> int:
    from fleetgnn.cli.train import run_train

    return run_train(args)


def _add_infer(sub: Any) -> None:
    from fleetgnn.cli.infer import add_embed, add_predict

    add_predict(sub)
    add_embed(sub)


def _cmd_export(args: argparse.Namespace) -> int:
    from fleetgnn.cli.infer import run_export

    return run_export(args)


def _add_bench(sub: Any) -> None:
    from fleetgnn.cli.bench import add_bench

    add_bench(sub)


def _cmd_bench(args: argparse.Namespace) -> int:
    from fleetgnn.cli.bench import run_bench

    return run_bench(args)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``fleetgnn`` command."""
    parser = Parser(
        prog="fleetgnn",
        description="Train graph neural networks on graphs too large for one GPU.",
    )
    parser.add_argument("--verbose", action="store_true", help="show tracebacks of errors")
    parser.add_argument("--version", action="version", version=f"fleetgnn {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_prepare(sub)
    _add_partition(sub)
    _add_info(sub)
    _add_train(sub)
    _add_infer(sub)
    _add_plan(sub)
    _add_report(sub)
    _add_bench(sub)
    return parser


_COMMANDS = {
    "prepare": _cmd_prepare,
    "partition": _cmd_partition,
    "info": _cmd_info,
    "train": _cmd_train,
    "predict": _cmd_export,
    "embed": _cmd_export,
    "plan": _cmd_plan,
    "report": _cmd_report,
    "bench": _cmd_bench,
}


def _on_sigterm(signum: int, frame: Any) -> None:
    """SIGTERM stops a command the way Ctrl-C does (a KeyboardInterrupt that remembers why)."""
    err = KeyboardInterrupt("terminated")
    err.signum = signum  # type: ignore[attr-defined]
    raise err


@contextlib.contextmanager
def _terminate_like_interrupt() -> Iterator[None]:
    """Handle SIGTERM like SIGINT while the block runs (main thread only; restored after)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, saved)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fleetgnn`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = "--verbose" in argv  # accepted anywhere on the line, not only before the command
    args = build_parser().parse_args([a for a in argv if a != "--verbose"])
    with _terminate_like_interrupt(), one_line_warnings(args.command):
        return _run(args, verbose)


def _run(args: argparse.Namespace, verbose: bool) -> int:
    try:
        return _COMMANDS[args.command](args)
    except FleetgnnError as err:
        if verbose:
            traceback.print_exc()
            for rank, text in (getattr(err, "failures", None) or {}).items():
                print(f"--- rank {rank} ---\n{text}", file=sys.stderr)
        print(f"fleetgnn {args.command}: error: {one_line(str(err))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:
        note = getattr(err, "note", None)
        if note is None:
            note = "terminated" if getattr(err, "signum", None) == signal.SIGTERM else "interrupted"
        if note:
            print(f"fleetgnn {args.command}: {note}", file=sys.stderr)
        return 128 + int(getattr(err, "signum", None) or signal.SIGINT)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
