"""The scripts in benchmarks/ that size a `fleetgnn bench` section run it through fleetgnn.bench
and write `fleetgnn bench`'s result format (readable by `fleetgnn bench --from-json`); and
`fleetgnn.bench` imports, and its sections run, without torch_geometric."""

import importlib
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from fleetgnn.bench.report import read_results

REPO = Path(__file__).resolve().parents[2]


def _script(name: str):
    path = REPO / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_bench_script_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _check(out: Path, section: str) -> dict:
    data = read_results(out / "bench.json")
    assert data["sections"] == [section] and data["rows"]
    for r in data["rows"]:
        assert r["section"] == section and r["impls"]["fleetgnn"]["median_s"] > 0
    assert f"#### {section}" in (out / "bench.md").read_text()
    return data


def test_bench_ops_script(tmp_path: Path) -> None:
    argv = ["--nodes", "2000", "--edges", "20000", "--dims", "8", "16", "--repeat", "1"]
    argv += ["--dropout-rows", "500", "--memcpy-mb", "4", "--device", "cpu", "--skip-peers"]
    _script("bench_ops").main([*argv, "--out", str(tmp_path)])
    data = _check(tmp_path, "ops")
    cases = [r["case"] for r in data["rows"]]
    assert sum("D=8" in c for c in cases) == 6 and sum("D=16" in c for c in cases) == 6
    gspmm = [r for r in data["rows"] if r["case"].startswith("gspmm")]
    assert all(set(r["impls"]) == {"fleetgnn", "memcpy of the same bytes"} for r in gspmm)


def test_bench_sampler_script(tmp_path: Path) -> None:
    argv = ["--nodes", "3000", "--avg-degree", "5", "--fanouts", "4,3", "--batch-size", "64"]
    _script("bench_sampler").main(
        [*argv, "--batches", "2", "--repeat", "1", "--out", str(tmp_path)]
    )
    (row,) = _check(tmp_path, "sampler")["rows"]
    assert row["unit"] == "M edges/s" and "fanouts 4,3, batch 64" in row["case"]
    phases = row["extra"]["last_hop_phases_s"]
    assert phases["frontier"] > 0 and phases["sampled_edges"] > 0 and phases["draws"] >= 0


def test_bench_temporal_sampler_script(tmp_path: Path) -> None:
    mod = _script("bench_temporal_sampler")
    out = tmp_path / "temporal.json"
    argv = ["--nodes", "3000", "--avg-degree", "5", "--fanouts", "4,3", "--batch-size", "64"]
    mod.main([*argv, "--times", "50", "--batches", "2", "--repeat", "1", "--out", str(out)])
    data = json.loads(out.read_text())
    rows = {r["implementation"]: r for r in data["rows"]}
    assert all(r["edges_per_s"] > 0 and r["edges_per_call"] > 0 for r in rows.values())
    # the inclusive switch takes edges at the seed's own time too: never fewer candidates
    inclusive = rows["fleetgnn temporal uniform <= (numpy)"]["edges_per_call"]
    assert inclusive >= rows["fleetgnn temporal uniform (numpy)"]["edges_per_call"]
    pyg = {k for k in rows if k.startswith("PyG")} | set(data["skipped"])
    assert pyg == {"PyG temporal uniform (pyg-lib, <=)", "PyG temporal last (pyg-lib, <=)"}


def test_the_temporal_loop_peer_samples_what_fleetgnn_samples() -> None:
    """The per-seed loop's semantics are the sampler's: with every candidate taken, or the last
    ``k`` (no draws), both sample the same number of edges from the same seeds and times."""
    import numpy as np
    import torch

    from fleetgnn.sampling import GraphTopology, TemporalSampler

    mod = _script("bench_temporal_sampler")
    g = mod.timed_graph(3000, 8, 100, 0)
    rng = np.random.default_rng(5)
    seeds, times = rng.choice(3000, 64, replace=False), rng.integers(0, 100, 64)
    for fanouts, strategy in (([-1, -1], "uniform"), ([3, 2], "last"), ([5, 1], "last")):
        s = TemporalSampler(GraphTopology(g), fanouts, strategy=strategy, backend="numpy")
        blocks = s.sample_from_nodes(
            torch.from_numpy(seeds), seed_time=torch.from_numpy(times)
        ).blocks
        loop = mod.python_temporal(g, fanouts, strategy)(seeds, times)
        assert sum(b.num_edges for b in blocks) == loop, (fanouts, strategy)


def test_bench_dropout_script(tmp_path: Path) -> None:
    _script("bench_dropout").main(
        ["--cases", "Cora input", "--repeat", "1", "--out", str(tmp_path)]
    )
    rows = _check(tmp_path, "ops")["rows"]
    assert len(rows) == 2
    for r in rows:
        assert {"F.dropout", "previous keyed (SplitMix64)"} <= set(r["speedup"])
        assert r["extra"]["keep_rate"] == pytest.approx(0.5, abs=0.01)


def test_bench_epoch_script(tmp_path: Path) -> None:
    argv = ["--scale", "0.002", "--repeat", "1", "--hidden", "8", "--workloads", "gcn-full"]
    _script("bench_epoch").main(
        [*argv, "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path)]
    )
    (row,) = _check(tmp_path, "epoch")["rows"]
    phases = row["extra"]["fleetgnn_phases_s"]
    assert phases["forward"] > 0 and phases["backward"] > 0
    assert row["extra"]["bf16_over_float32"] > 0  # the mixed-precision variant ran too


def test_bench_link_script(tmp_path: Path) -> None:
    """The link section: the issue's workload shape at a small size; PyG's layers on fleetgnn's
    edge batches compute the same embeddings; PyG's LinkNeighborLoader runs where it can sample,
    and is listed as skipped with the reason where it cannot."""
    from fleetgnn.bench.link import BLOCKS_PEER, LOADER_PEER
    from fleetgnn.bench.peers import has_pyg, neighbor_loader_missing

    argv = ["--scale", "0.002", "--repeat", "1", "--hidden", "8", "--steps", "2"]
    _script("bench_link").main(
        [*argv, "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path)]
    )
    (row,) = _check(tmp_path, "link")["rows"]
    assert "fanouts 15,10, batch 1024 edges, 1 negative(s)" in row["case"]
    assert "(2 of " in row["case"] and row["extra"]["steps_timed"] == 2
    (split,) = (tmp_path / "cache").glob("*/edge_splits/*/meta.json")  # kept with the data
    train_edges = json.loads(split.read_text())["counts"]["train"]
    steps = row["extra"]["steps_per_epoch"]
    assert steps == -(-train_edges // 1024)  # every training edge once per epoch
    est = row["extra"]["epoch_s_estimate"]["fleetgnn"]
    assert est == pytest.approx(row["impls"]["fleetgnn"]["median_s"] * steps / 2)
    if has_pyg():
        assert row["extra"]["max_abs_embedding_diff"][BLOCKS_PEER] < 1e-4
        missing = neighbor_loader_missing()
        if missing is None:
            assert LOADER_PEER in row["impls"]
        else:
            assert row["skipped"][LOADER_PEER] == missing


_HETERO_TINY = ["--scale", "0.005", "--hidden", "4", "--heads", "2", "--fanouts", "3,2,2"]
_HETERO_TINY += ["--batch-size", "64", "--steps", "2", "--repeat", "1"]


@pytest.mark.slow
def test_bench_hetero_script(tmp_path: Path) -> None:
    """The hetero section at a tiny size: PyG's R-GAT has fleetgnn's parameter count and, on
    fleetgnn's samples, its logits; PyG's NeighborLoader runs where it can sample, and is listed
    as skipped with the reason where it cannot."""
    from fleetgnn.bench.hetero import BLOCKS_PEER, LOADER_PEER
    from fleetgnn.bench.peers import has_pyg, neighbor_loader_missing

    _script("bench_hetero").main(
        [*_HETERO_TINY, "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path)]
    )
    data = _check(tmp_path, "hetero")
    (row,) = data["rows"]
    assert "8 relations, 3 layers, 2 x 4 hidden, fanouts 3,2,2 per relation" in row["case"]
    assert row["extra"]["steps_timed"] == 2 and row["extra"]["steps_per_epoch"] == 5
    assert data["datasets"]["typed"]["type_nodes"]["paper"] == 500  # 100,000 x 0.005
    phases = row["extra"]["fleetgnn_phases_s"]
    assert phases["forward"] > 0 and phases["backward"] > 0
    if has_pyg():
        params = row["extra"]["parameters"]
        assert params["PyG"] == params["fleetgnn"] > 0
        assert row["extra"]["max_abs_logit_diff"][BLOCKS_PEER] < 1e-4
        missing = neighbor_loader_missing()
        if missing is None:
            assert LOADER_PEER in row["impls"]
        else:
            assert row["skipped"][LOADER_PEER] == missing


@pytest.mark.slow
def test_bench_hetero_skips_pyg_with_its_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without PyG both peers are skipped with the reason; without a sampler for PyG only its
    loader is, and fleetgnn is timed either way."""
    import fleetgnn.bench.hetero as hetero
    from fleetgnn.bench.peers import NO_PYG, has_pyg

    argv = [*_HETERO_TINY, "--cache-dir", str(tmp_path / "cache")]
    monkeypatch.setattr(hetero, "has_pyg", lambda: False)
    (row,) = _script("bench_hetero").main(argv)["rows"]
    assert row["skipped"] == {hetero.LOADER_PEER: NO_PYG, hetero.BLOCKS_PEER: NO_PYG}
    assert set(row["impls"]) == {"fleetgnn"} and row["impls"]["fleetgnn"]["median_s"] > 0
    if has_pyg():
        monkeypatch.setattr(hetero, "has_pyg", lambda: True)
        monkeypatch.setattr(hetero, "neighbor_loader_missing", lambda: "no sampler here")
        (row,) = _script("bench_hetero").main(argv)["rows"]
        assert row["skipped"] == {hetero.LOADER_PEER: "no sampler here"}
        assert hetero.BLOCKS_PEER in row["impls"]


def test_fit_rgat_orders_script(tmp_path: Path) -> None:
    """Both orders timed on every relation with edges of a batch, the rule's pick recorded."""
    argv = ["--scale", "0.005", "--repeat", "1", "--fanouts", "4,3", "--batch-size", "64"]
    argv += ["--hidden", "8", "--heads", "2", "--cache-dir", str(tmp_path / "c")]
    res = _script("fit_rgat_orders").main([*argv, "--out", str(tmp_path / "fit.json")])
    rows = res["rows"]
    assert rows and {r["layer"] for r in rows} == {0, 1}
    assert all(r["project"] > 0 and r["aggregate"] > 0 for r in rows)
    assert all(r["rule"] in ("project", "aggregate") for r in rows)
    totals = res["totals_ms"]
    assert totals["best"] <= min(totals["rule"], totals["project"], totals["aggregate"])
    assert set(res["fit"]) == {"dense_gmacs_per_s", "sparse_per_head", "bmm", "sparse_shared"}
    assert json.loads((tmp_path / "fit.json").read_text())["rule_misses"] == res["rule_misses"]


def test_results_render_from_json(tmp_path: Path) -> None:
    """What a script wrote is what `fleetgnn bench --from-json` reads."""
    from fleetgnn.cli.main import main

    argv = ["--nodes", "1000", "--edges", "5000", "--dims", "4", "--repeat", "1"]
    argv += ["--dropout-rows", "100", "--memcpy-mb", "1", "--device", "cpu"]
    _script("bench_ops").main([*argv, "--out", str(tmp_path / "a")])
    rc = main(["bench", "--from-json", str(tmp_path / "a" / "bench.json"), "--out", str(tmp_path)])
    assert rc == 0 and json.loads((tmp_path / "bench.json").read_text())["rows"]


def test_bench_imports_and_runs_without_pyg(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "torch_geometric" or m.startswith("torch_geo")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "torch_geometric", None)  # any import of it fails
    import fleetgnn

    monkeypatch.setattr(fleetgnn, "bench", sys.modules["fleetgnn.bench"])  # restored after
    for name in [
        m for m in sys.modules if m == "fleetgnn.bench" or m.startswith("fleetgnn.bench.")
    ]:
        monkeypatch.delitem(sys.modules, name)
    bench = importlib.import_module("fleetgnn.bench")
    sections = ("epoch", "link", "hetero", "ops", "sampler", "gather", "trainer", "engines")
    for section in (*sections, "peers", "loops"):
        importlib.import_module(f"fleetgnn.bench.{section}")
    peers = sys.modules["fleetgnn.bench.peers"]
    assert not peers.has_pyg()
    assert peers.neighbor_loader_missing() == peers.NO_PYG
    size = {"nodes": 500, "edges": 2000, "dim": 4}
    rows = sys.modules["fleetgnn.bench.ops"].gspmm_rows(size, 1, 1, 1.0, lambda _: None)
    assert all(r["skipped"] == {"PyG SimpleConv": peers.NO_PYG} for r in rows)
    assert "torch index_add" in rows[0]["speedup"] and bench.SECTIONS


@pytest.mark.slow
def test_train_epochs_runs_the_command(tmp_path: Path) -> None:
    """The one helper bench_split, bench_offload and bench_plan time `fleetgnn train` with."""
    from fleetgnn.bench.data import cached_dataset, dataset_dir
    from fleetgnn.bench.runs import train_epochs

    cached_dataset(tmp_path, "products-like", 0.001)
    data = dataset_dir(tmp_path, "products-like", 0.001)
    recs, rss = train_epochs(
        data, "reference", "gcn", 1, 1, tmp_path / "run", mode="full", peak_rss=True
    )
    assert len(recs) == 1 and recs[0]["epoch"] == 1 and recs[0]["epoch_time_s"] > 0
    assert rss is not None and rss > 10 << 20
    with pytest.raises(RuntimeError, match="failed"):
        train_epochs(data, "no-such-engine", "gcn", 1, 1, tmp_path / "bad")
