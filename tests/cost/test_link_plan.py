"""The planner for link prediction: only the engines and modes that train it, an edge batch's
endpoints and negatives as the seeds, the decoder's flops and fullgraph's endpoint exchange."""

import json
import math

import pytest

from fleetgnn.cli.main import main
from fleetgnn.config import load_config
from fleetgnn.config.run import LINK_ENGINES
from fleetgnn.cost import PROFILES, make_plan, predict_engine, workload_from_config
from fleetgnn.errors import ConfigError

PRODUCTS = {"nodes": 2_449_029, "edges": 61_859_140, "features": 100, "classes": 47}


def _wl(sets=(), task="link"):
    cfg = load_config(None, ["model.name=sage", f"train.task={task}", *sets])
    return workload_from_config(cfg, shape=PRODUCTS)


def test_only_engines_that_train_links_are_planned():
    hw = PROFILES["dgx-a100"]
    plan = make_plan(_wl(), hw, 2)
    every = {"minibatch", "fullgraph", "split", "offload"}
    assert set(plan.predictions) == {"reference", *every}  # the one-process run too
    assert all((n, plan.modes[n]) in LINK_ENGINES for n in plan.predictions)
    assert set(make_plan(_wl(), hw, 1).predictions) == {"reference", *every}
    assert set(make_plan(_wl(task="node"), hw, 2).predictions) >= {"split", "offload"}
    assert set(make_plan(_wl(), hw, 2, mode="minibatch", engines=["split"]).predictions) == {
        "split"
    }
    assert set(make_plan(_wl(), hw, 2, mode="full", engines=["offload"]).predictions) == {"offload"}
    with pytest.raises(ConfigError, match="does not train link prediction.*offload"):
        make_plan(_wl(), hw, 2, mode="full", engines=["split"])  # split has no full mode


def test_the_edge_batch_is_the_seeds_and_the_decoder_counts():
    hw = PROFILES["dgx-a100"]
    link = _wl(["train.batch_size=1024", "train.negatives=1"])
    train_edges = int(PRODUCTS["edges"] // 2 * 0.85)  # undirected pairs less val 5%, test 10%
    assert link.task == "link" and link.num_train == train_edges
    assert link.model.widths[-1] == 16  # the embeddings (train.link_dim), not 47 classes
    mb = predict_engine("minibatch", link, hw, 2)
    assert mb.steps == math.ceil(train_edges / (1024 * 2))  # edges per rank and step
    assert mb.knobs["batch_size"] == 1024 and mb.knobs["task"] == "link"
    # one positive and one negative per edge: the decoder's forward + backward over 2 pairs
    flops = train_edges * 2 * (2 * 16)
    assert mb.breakdown["decoder"] == pytest.approx(3 * flops / 2 / hw.gemm_rate)
    more = predict_engine("minibatch", _wl(["train.negatives=4"]), hw, 2)
    assert more.steps == mb.steps and more.epoch_s > mb.epoch_s  # 6 seeds per edge, not 3
    assert more.traffic["peer"] > mb.traffic["peer"]
    mlp = predict_engine("minibatch", _wl(["train.decoder=mlp"]), hw, 2)
    assert mlp.breakdown["decoder"] > mb.breakdown["decoder"]


@pytest.mark.parametrize("engine", ["fullgraph", "offload"])
def test_full_graph_engines_exchange_the_pairs_endpoint_rows(engine):
    hw = PROFILES["dgx-a100"]
    link = _wl()
    one = predict_engine(engine, link, hw, 1)
    two = predict_engine(engine, link, hw, 2)
    assert "endpoints" not in one.breakdown and two.breakdown["endpoints"] > 0
    pairs = link.num_train * 2 / 2  # positives and negatives, per rank
    rows = min(PRODUCTS["nodes"], pairs) / 2  # half of them owned elsewhere
    cfg = load_config(None, ["model.name=sage"])
    twin = workload_from_config(cfg, shape={**PRODUCTS, "classes": 16})  # same widths
    assert twin.model.widths == link.model.widths
    halo = predict_engine(engine, twin, hw, 2).traffic["peer"]
    assert two.traffic["peer"] - halo == int(2 * rows * 16 * 4 * 2)  # rows and their gradients


def test_split_exchanges_each_steps_endpoint_rows():
    """Split scores the pairs whose source a rank owns: the other endpoints' rows a step."""
    hw = PROFILES["dgx-a100"]
    link = _wl(["train.batch_size=1024", "train.negatives=1"])
    one = predict_engine("split", link, hw, 1)
    two = predict_engine("split", link, hw, 2)
    assert "endpoints" not in one.breakdown and two.breakdown["endpoints"] > 0
    assert two.steps == one.steps == math.ceil(link.num_train / 1024)  # one global batch a step
    rows = 1024 * 2 / 2 / 2 * two.steps  # per rank: its half of the pairs, half owned elsewhere
    assert two.breakdown["endpoints"] * hw.bandwidth["peer"] == pytest.approx(
        2 * rows * 16 * 4, rel=1e-3
    )


def test_plan_cli_takes_the_task(capsys):
    shape = ",".join(f"{k}={v}" for k, v in PRODUCTS.items())
    args = ["plan", "--shape", shape, "--hardware", "dgx-a100", "--nproc", "2"]
    assert main([*args, "--task", "link", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    every = {"reference", "minibatch", "fullgraph", "split", "offload"}
    assert out["workload"]["task"] == "link" and set(out["engines"]) == every
    assert "training edges" in out["workload"]["source"]
    assert out["workload"]["widths"] == [100, 32, 16]  # the GAE defaults of --task link
    assert main([*args, "--task", "link", "--engine", "offload", "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)["engines"]) == {"offload"}
    assert main([*args, "--task", "link", "--engine", "split", "--mode", "full"]) == 2
    err = capsys.readouterr().err
    assert "split engine" in err and len(err.strip().splitlines()) == 1


def test_a_link_plan_needs_no_labels_and_a_node_plan_refuses_in_one_line():
    """Link prediction reads no labels: its workload on a label-free graph is the labelled
    graph's, its head ``train.link_dim`` wide; a node plan on that graph says what it lacks."""
    import dataclasses

    from fleetgnn.errors import DatasetError
    from fleetgnn.graph.synthetic import generate_graph, spec_for

    graph = generate_graph(spec_for("tiny", 0.3), seed=4)
    masks = dict.fromkeys(("train_mask", "val_mask", "test_mask"))
    bare = dataclasses.replace(graph, y=None, num_classes=None, **masks)
    cfg = load_config(None, ["model.name=sage", "train.task=link", "train.link_dim=16"])
    labelled, free = workload_from_config(cfg, graph), workload_from_config(cfg, bare)
    assert free.num_classes == 0 and free.model == labelled.model
    assert (free.num_train, free.num_nodes, free.num_edges) == (
        labelled.num_train,
        labelled.num_nodes,
        labelled.num_edges,
    )
    hw = PROFILES["dgx-a100"]
    assert set(make_plan(free, hw, 2).predictions) == set(make_plan(labelled, hw, 2).predictions)
    with pytest.raises(DatasetError) as caught:
        workload_from_config(load_config(None, ["model.name=sage"]), bare)
    assert "\n" not in str(caught.value) and "--task link" in str(caught.value)
