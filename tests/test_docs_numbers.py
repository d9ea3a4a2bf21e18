"""The docs' figures against what backs them (issue 39: a number in the docs is a claim; a test or
a committed benchmark JSON backs it).

Each test reads figures from README.md or a docs/ page as the page prints them and compares them
with the committed JSON under ``benchmarks/results/`` that the page names, rounded as printed
(the last digit the page shows must be the JSON's; ``_shown``), or with what the code computes
or a cheap command gives (the commands marked ``slow``). A figure edited on a page without its
JSON, or a JSON rewritten without the page, fails here. The figures of a command that
tests/test_readme.py or tests/test_docs.py already runs (the Quick start's accuracy, the bf16
command's, papers100M's plan) are checked there.
"""

import json
import re
import statistics
from pathlib import Path

import pytest

from .test_docs import _commands, _fleetgnn

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def _page(name: str) -> str:
    """A page's text on one line (figures wrap across lines)."""
    return " ".join((ROOT / name).read_text().split())


def _json(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def _grab(text: str, pattern: str) -> tuple[str, ...]:
    found = re.search(pattern, text)
    assert found, f"the page no longer says {pattern!r}"
    return found.groups()


def _shown(printed: str, value: float, scale: float = 1.0) -> bool:
    """``printed`` (a figure as a page prints it: ``2,157``, ``0.83``) is ``value * scale``
    rounded to the digits it shows."""
    digits = printed.replace(",", "")
    places = len(digits.split(".")[1]) if "." in digits else 0
    return abs(float(digits) - value * scale) <= 0.5 * 10**-places + 1e-9


def _check(pairs: list[tuple[str, float]], what: str, scale: float = 1.0) -> None:
    bad = [(p, v * scale) for p, v in pairs if not _shown(p, v, scale)]
    assert not bad, f"{what}: printed vs the JSON's {bad}"


# --- Cora: docs/benchmarks.md's table, README's 82.5%, link-prediction.md's GAE ---------------


def _loop_commands(text: str) -> list[str]:
    """The ``fleetgnn train`` lines of a ``for s in ...; do ... done`` loop, as written."""
    loop = next(c for c in _commands(text) if c.startswith("for s in "))
    body = loop.split("; do ", 1)[1].rsplit("; done", 1)[0]
    return [c.strip() for c in body.split("; ")]


def test_cora_table_is_the_committed_runs_of_its_loop():
    """Mean ± standard deviation over seeds 0-4 per model, as benchmarks/quality_cora.py wrote
    them running the table's own loop; each clears the bar the table gives it. README's GCN
    figure is the same mean."""
    md = (ROOT / "docs" / "benchmarks.md").read_text()
    text = _page("docs/benchmarks.md")
    runs = _json("quality_cora.json")
    assert runs["seeds"] == [0, 1, 2, 3, 4] and "for s in 0 1 2 3 4; do" in md
    work = runs["workloads"]
    assert sorted(_loop_commands(md)) == sorted(work[m]["command"] for m in ("gcn", "gat", "sage"))
    for label, key in (("GCN", "gcn"), ("GAT", "gat"), ("GraphSAGE-mean", "sage")):
        row = rf"\| {label} \([^|]*\) \| \w+ \| ([\d.]+) ± ([\d.]+) \| [^|]+ \| ([\d.]+) \|"
        mean, std, bar = _grab(text, row)
        acc = work[key]["test_acc"]
        assert len(acc["per_seed"]) == 5
        assert acc["mean"] == pytest.approx(statistics.fmean(acc["per_seed"]))
        assert acc["std"] == pytest.approx(statistics.stdev(acc["per_seed"]))
        _check([(mean, acc["mean"]), (std, acc["std"])], f"{label} on Cora", scale=100)
        assert 100 * acc["mean"] >= float(bar), (label, acc["mean"], bar)
    (readme,) = _grab(_page("README.md"), r"\(([\d.]+)% mean test accuracy over five seeds")
    _check([(readme, work["gcn"]["test_acc"]["mean"])], "README's GCN on Cora", scale=100)


def test_link_prediction_gae_figures_are_the_committed_runs_of_its_command():
    """The GAE's mean test AUC and AP over seeds 0-4 are quality_cora.json's ``gae``, whose
    command is the page's first (with ``--seed``)."""
    text = _page("docs/link-prediction.md")
    auc, ap = _grab(
        text, r"over seeds 0-4 the mean test AUC reaches ([\d.]+) and the mean AP ([\d.]+)"
    )
    gae = _json("quality_cora.json")["workloads"]["gae"]
    page = (ROOT / "docs" / "link-prediction.md").read_text()
    assert gae["command"].replace(" --seed $s", "") in _commands(page)
    _check([(auc, gae["test_auc"]["mean"]), (ap, gae["test_ap"]["mean"])], "GAE on Cora")


# --- docs/benchmarks.md: the store's gather per stored dtype, the GPU table --------------------


def test_gather_dtype_table_is_its_committed_json():
    """Rows per second, bytes per row, GB/s and the ratio per stored dtype, the table size and
    the command, all from bench_gather_dtypes/bench.json."""
    text = _page("docs/benchmarks.md")
    bench = _json("bench_gather_dtypes/bench.json")
    (cmd,) = _grab(text, r"\(`OMP_NUM_THREADS=1 (python benchmarks/bench_gather_dtypes\.py [^`]+)`")
    assert cmd == bench["command"]
    rows, features, mib = _grab(text, r"([\d,]+) x (\d+) features \(([\d.]+) MiB as float32\)")
    settings = bench["settings"]
    assert int(rows.replace(",", "")) == settings["rows"] and int(features) == settings["features"]
    _check([(mib, settings["rows"] * settings["features"] * 4 / 2**20)], "the table's size")
    load, ids, threads, repeat, out_mb = _grab(
        text,
        r"load average about (\d+)\), .*? ([\d,]+) random IDs, (\d+) thread, median of (\d+) "
        r"interleaved repetitions .*? the same float32 output\s+\(`\[\d+, \d+\]`, (\d+) MB\)",
    )
    assert int(ids.replace(",", "")) == settings["ids"]
    assert (int(threads), int(repeat)) == (settings["threads"], settings["repeat"])
    assert round(bench["machine"]["loadavg_start"][0]) == int(load)
    _check([(out_mb, settings["ids"] * settings["features"] * 4)], "the output", scale=1e-6)
    rows = {(r["extra"]["output"], r["extra"]["feature_dtype"]): r for r in bench["rows"]}
    labels = {"float32 \\(the dataset's\\)": None, "bfloat16": "bfloat16", "float16": "float16"}
    labels["float8_e4m3"] = "float8_e4m3"
    alone = "index_select of the stored rows alone (no decode)"
    for label, dtype in labels.items():
        got = _grab(text, rf"\| {label} \| (\d+)" + 5 * r" \| ([\d.]+)" + r" \|")
        fresh, reused = rows["fresh", dtype]["extra"], rows["reused", dtype]
        assert int(got[0]) == fresh["row_bytes"], (label, got)
        want = [fresh["rows_per_s"] / 1e6, fresh["ratio_to_dataset"]]
        want += [reused["extra"]["rows_per_s"] / 1e6, reused["extra"]["ratio_to_dataset"]]
        want.append(settings["ids"] / reused["impls"][alone]["median_s"] / 1e6)
        _check(list(zip(got[1:], want)), f"gather stored as {dtype}")
    # the prose's ratios: reusing the output, and bfloat16's read alone over float32's
    (reuse,) = _grab(text, r"makes float32's gather ([\d.]+)x faster")
    f32 = rows["reused", None]
    _check(
        [(reuse, f32["extra"]["rows_per_s"] / rows["fresh", None]["extra"]["rows_per_s"])], "reuse"
    )
    (read,) = _grab(text, r"bfloat16's half-size rows are only ([\d.]+)x faster")
    ratio = f32["impls"][alone]["median_s"] / rows["reused", "bfloat16"]["impls"][alone]["median_s"]
    _check([(read, ratio)], "the read alone")


#: docs/benchmarks.md's GPU table: the row's first words, the figures it prints in order, and
#: where each is in the figures of the JSON file the row names.
_GCN = "GCN full-graph epoch, products-like@0.2, 2 layers, hidden 128, cuda:0"
_SAGE = "SAGE full-graph epoch, products-like@0.2, 2 layers, hidden 128, cuda:0"
_SPMM = "gspmm sum forward, 1M nodes / 16M edges, D=64"
_F = r"([\d.,]+)"
GPU_ROWS = [
    (
        rf"full-graph GCN epoch .*? \| {_F} ms; PyG `GCNConv` CSR `adj_t` {_F} ms \({_F}x\), "
        rf"`edge_index` {_F} ms \({_F}x\)",
        lambda f: [
            1e3 * f["epochs"][_GCN]["median_s"]["fleetgnn"],
            1e3 * f["epochs"][_GCN]["median_s"]["PyG GCNConv, CSR adj_t"],
            f["epochs"][_GCN]["speedup"]["PyG GCNConv, CSR adj_t"],
            1e3 * f["epochs"][_GCN]["median_s"]["PyG GCNConv, edge_index"],
            f["epochs"][_GCN]["speedup"]["PyG GCNConv, edge_index"],
        ],
    ),
    (
        rf"full-graph SAGE epoch, same case \| {_F} ms; PyG `SAGEConv` CSR {_F} ms \({_F}x: "
        rf"PyG faster\), `edge_index` {_F} ms \({_F}x\)",
        lambda f: [
            1e3 * f["epochs"][_SAGE]["median_s"]["fleetgnn"],
            1e3 * f["epochs"][_SAGE]["median_s"]["PyG SAGEConv, CSR adj_t"],
            f["epochs"][_SAGE]["speedup"]["PyG SAGEConv, CSR adj_t"],
            1e3 * f["epochs"][_SAGE]["median_s"]["PyG SAGEConv, edge_index"],
            f["epochs"][_SAGE]["speedup"]["PyG SAGEConv, edge_index"],
        ],
    ),
    (
        rf"`gspmm` sum forward, 1M nodes, 16M edges, D = 64 \| {_F} ms, {_F} of a device copy's "
        rf"bandwidth; {_F}x torch `index_add`, {_F}x PyG `SimpleConv`",
        lambda f: [
            1e3 * f["gspmm"][_SPMM]["median_s"],
            f["gspmm"][_SPMM]["fraction_of_copy"],
            f["gspmm"][_SPMM]["speedup"]["torch index_add"],
            f["gspmm"][_SPMM]["speedup"]["PyG SimpleConv"],
        ],
    ),
    (
        rf"row gather, Triton kernel \(the CUDA default\), {_F} random rows of {_F} B \| {_F} of "
        rf"a device copy \({_F} of {_F} GB/s read \+ written\) alone, {_F} with 10 calls queued; "
        rf"`index_select` {_F} / {_F}",
        lambda f: [
            f["gather_tiers"]["rows"],
            f["gather_tiers"]["row_bytes"],
            f["gather_tiers"]["kernels"]["triton"]["fraction_of_copy"],
            f["gather_tiers"]["kernels"]["triton"]["read_written_gbps"],
            f["copy_gbps"],
            f["gather_tiers"]["kernels"]["triton"]["queued_fraction_of_copy"],
            f["gather_tiers"]["kernels"]["index_select"]["fraction_of_copy"],
            f["gather_tiers"]["kernels"]["index_select"]["queued_fraction_of_copy"],
        ],
    ),
    (
        rf"the store's device-tier read of sampled IDs \(`checked=True`\) \| {_F} of a copy "
        rf"alone, {_F} queued",
        lambda f: [
            f["gather_tiers"]["store_device_tier"]["fractions_of_copy"]["checked_ids"],
            f["gather_tiers"]["store_device_tier"]["fractions_of_copy"]["checked_ids_queued"],
        ],
    ),
    (
        rf"device sampler, 3 hops .*? \| {_F} M edges/s with the Triton Fisher-Yates kernel "
        rf"\(the CUDA default\), {_F} with torch's ops; the host's numpy sampler {_F} \({_F}x\)",
        lambda f: [
            f["sampler"]["m_edges_per_s"]["fleetgnn, fisher_yates=triton"],
            f["sampler"]["m_edges_per_s"]["fleetgnn"],
            f["sampler"]["m_edges_per_s"]["fleetgnn numpy (CPU)"],
            f["sampler"]["over_host_numpy"]["fleetgnn, fisher_yates=triton"],
        ],
    ),
    (
        rf"every row on the device \| {_F} ms a step; half the rows on the device {_F} ms; none "
        rf"{_F} ms",
        lambda f: [1e3 * f["minibatch_budgets"][arm]["step_s"] for arm in ("all", "half", "0")],
    ),
    (
        rf"the same step under `torch.profiler` .*? \| {_F} ms a step with {_F} ms of kernel "
        rf"time: {_F} aten ops, {_F} launches, {_F} stream syncs a step",
        lambda f: [
            1e3 * f["minibatch_profile"]["step_s"],
            f["minibatch_profile"]["device_kernel_us_per_step"] / 1e3,
            f["minibatch_profile"]["aten_ops_per_step"],
            f["minibatch_profile"]["kernel_launches_per_step"],
            f["minibatch_profile"]["stream_syncs_per_step"],
        ],
    ),
]


def _gpu_check(name: str) -> dict:
    return _json(f"gpu/{name}")


@pytest.mark.parametrize("row", range(len(GPU_ROWS)))
def test_gpu_table_row_is_the_check_it_names(row):
    """Every figure of a row of docs/benchmarks.md's GPU table is in the committed GPU check
    that the row names, and the check ran on the GPU and torch the section names."""
    text = _page("docs/benchmarks.md")
    section = text[text.index("## On a GPU") :]
    gpu, torch_version = _grab(section, r"measured on one (NVIDIA [^(]+?) \(torch (\S+),")
    pattern, where = GPU_ROWS[row]
    found = re.search(pattern + r"[^|]* \| `(gpu-check-[\w-]+\.json)` \|", section)
    assert found, f"the GPU table no longer has {pattern!r} with its file"
    *printed, name = found.groups()
    check = _gpu_check(name)
    assert (check["host"]["gpu"], check["host"]["torch"]) == (gpu, torch_version), name
    _check(list(zip(printed, where(check["steps"]["bench"]["figures"]), strict=True)), name)


# --- docs/training.md and docs/data.md: stored feature dtypes, bf16 ---------------------------


def test_feature_dtype_table_is_its_committed_json():
    """Accuracy per stored dtype and seed on Cora and products-like, the host tier's bytes, the
    feature bytes they imply and the largest move of the mean: quality_feature_dtype.json."""
    text = _page("docs/training.md")
    runs = _json("quality_feature_dtype.json")
    assert runs["seeds"] == [0, 1, 2] and "seeds 0, 1 and 2" in text
    cora, prod = (runs["workloads"][w]["by_dtype"] for w in ("cora", "products"))
    labels = {"float32 \\(the dataset's\\)": "float32", "bfloat16": "bfloat16"}
    labels.update(float16="float16", float8_e4m3="float8_e4m3")
    for label, dtype in labels.items():
        a = r"([\d.]+), ([\d.]+), ([\d.]+)"
        got = _grab(text, rf"\| {label} \| {a} \| {a} \| ([\d.]+) MB \|")
        want = [*cora[dtype]["test_acc"], *prod[dtype]["test_acc"], prod[dtype]["memory"]["host"]]
        _check(list(zip(got[:6], want)), f"accuracy stored as {dtype}")
        _check([(got[6], want[6])], f"host tier stored as {dtype}", scale=1e-6)
    # the host tier's drop is the feature rows' bytes: rows x (400 - stored row bytes)
    mb, rows, b32, mb16, b16, mb8, b8 = _grab(
        text,
        r"the features' ([\d.]+) MB \(([\d,]+) rows of (\d+) B\) become ([\d.]+) MB \((\d+) B "
        r"rows\) and ([\d.]+) MB \((\d+) B rows\)",
    )
    n = int(rows.replace(",", ""))
    host = {d: prod[d]["memory"]["host"] for d in prod}
    assert host["float32"] - host["bfloat16"] == n * (int(b32) - int(b16))
    assert host["float32"] - host["float8_e4m3"] == n * (int(b32) - int(b8))
    sizes = [(mb, n * int(b32)), (mb16, n * int(b16)), (mb8, n * int(b8))]
    _check(sizes, "the products-like feature rows", scale=1e-6)
    (moves,) = _grab(text, r"its mean test accuracy moves by less than ([\d.]+) points")
    assert max(abs(prod[d]["points_vs_float32"]) for d in prod) < float(moves)
    # the bf16 section's float32 accuracies are the same runs (seeds 0 and 1)
    f32 = _grab(text, r"bf16 reaches float32's test accuracy \(([\d.]+) and ([\d.]+) for both\)")
    _check(list(zip(f32, cora["float32"]["test_acc"][:2])), "float32 Cora, seeds 0 and 1")
    # docs/data.md's products-like GraphSAGE figure: the float32 runs' mean
    command = runs["workloads"]["products"]["command"]
    assert "--model sage --engine minibatch --epochs 10" in command
    (mean,) = _grab(
        _page("docs/data.md"),
        r"GraphSAGE \(`--model sage --engine minibatch`, 10 epochs\) reaches ([\d.]+) mean test "
        r"accuracy over seeds 0-2 \(`benchmarks/results/quality_feature_dtype\.json`",
    )
    _check([(mean, prod["float32"]["mean_test_acc"])], "products-like GraphSAGE")


def test_bf16_epoch_times_are_the_committed_bench_json():
    """docs/training.md's bf16 against float32 epoch times: bench/bench.json's full-graph GCN
    rows at one thread, with their machine and repetitions."""
    text = _page("docs/training.md")
    bench = _json("bench/bench.json")
    cores, cpu, repeat = _grab(
        text,
        r"`benchmarks/results/bench/bench\.json`: a shared (\d+)-core ([\w ]+?), one thread, "
        r"median of (\d+)\)",
    )
    assert bench["machine"]["cpu_model"] == cpu and bench["machine"]["cpu_count"] == int(cores)
    assert bench["settings"]["repeat"] == int(repeat)
    got = _grab(
        text,
        r"Cora \(hidden 16\) ([\d.]+) ms vs ([\d.]+) ms per epoch \(([\d.]+)x\), products-like "
        r"x0\.05 \(122k nodes, 2\.9M edges, hidden 128\) ([\d.]+) ms vs ([\d.]+) ms \(([\d.]+)x\)",
    )
    rows = {
        r["case"].split(", ")[1]: r
        for r in bench["rows"]
        if r["section"] == "epoch" and r["threads"] == 1 and "fleetgnn bf16" in r["impls"]
    }
    want = []
    for graph in ("Cora", "products-like x0.05"):
        impls = rows[graph]["impls"]
        want += [1e3 * impls["fleetgnn bf16"]["median_s"], 1e3 * impls["fleetgnn"]["median_s"]]
        want.append(rows[graph]["extra"]["bf16_over_float32"])
    _check(list(zip(got, want, strict=True)), "bf16 against float32 epochs")
    large = bench["datasets"]["large"]
    assert (round(large["num_nodes"], -3), round(large["num_edges"], -5)) == (122_000, 2_900_000)


@pytest.mark.slow
def test_compact_feature_command_gives_the_float32_run(tmp_path):
    """docs/training.md's `store.feature_dtype=bf16` command on Cora, run as written: Cora's 0/1
    features are stored exactly, so its test accuracy is the table's (and quality_feature_dtype
    .json's) seed-0 float32 figure, exactly."""
    md = (ROOT / "docs" / "training.md").read_text()
    section = md[md.index("## Compact feature storage") :]
    cmd = next(c for c in _commands(section) if "store.feature_dtype=bf16" in c)
    want = _json("quality_feature_dtype.json")["workloads"]["cora"]["by_dtype"]["float32"]
    (stated,) = _grab(" ".join(section.split()), r"\| bfloat16 \| ([\d.]+),")
    assert _shown(stated, want["test_acc"][0])
    assert (
        _fleetgnn(["prepare", "planetoid", "--name", "cora", "--out", "data/cora"], tmp_path) == 0
    )
    argv = [*cmd.split()[1:], "--run-dir", "runs/bf16", "--quiet", "--set", "train.threads=1"]
    assert _fleetgnn(argv, tmp_path) == 0
    summary = json.loads((tmp_path / "runs" / "bf16" / "summary.json").read_text())
    assert summary["config"]["store"]["feature_dtype"] in ("bf16", "bfloat16")
    assert summary["test_acc"] == want["test_acc"][0] and _shown(stated, summary["test_acc"])


# --- docs/link-prediction.md and docs/heterogeneous.md ----------------------------------------


def _options(cmd: str, drop: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """The ``--flag value`` pairs of a ``fleetgnn train`` command, sorted, without ``drop``."""
    argv = cmd.split()[2:]
    pairs = list(zip(argv[::2], argv[1::2], strict=True))
    return sorted(p for p in pairs if p[0] not in drop and p[1] not in drop)


def test_temporal_leakage_figures_are_the_committed_runs_of_the_pages_command():
    """Validation and test AUC with and without times: quality_temporal_leakage.json, whose runs
    are the page's two-process `minibatch` command (the dataset path and train.temporal aside)
    on temporal-like at the page's scale."""
    md = (ROOT / "docs" / "link-prediction.md").read_text()
    text = _page("docs/link-prediction.md")
    runs = _json("quality_temporal_leakage.json")
    (scale,) = _grab(text, r"On `temporal-like` x([\d.]+), `minibatch`, 2 processes, 5 epochs,")
    assert float(scale) == runs["scale"]
    assert f"--preset temporal-like --scale {scale} --out data/tl" in md
    page_cmd = next(c for c in _commands(md) if "data/tl" in c and "--nproc 2" in c)
    for temporal in ("auto", "off"):
        ran = runs["runs"][temporal]["command"]
        assert f"--set train.temporal={temporal}" in ran
        assert _options(ran, ("--dataset", f"train.temporal={temporal}")) == _options(
            page_cmd, ("--dataset",)
        )
    got = _grab(
        text,
        r"with times, validation AUC ([\d.]+) and test AUC ([\d.]+); with "
        r"`train.temporal=off`, ([\d.]+) and ([\d.]+)\.",
    )
    auto, off = runs["runs"]["auto"], runs["runs"]["off"]
    want = [auto["val_auc"], auto["test_auc"], off["val_auc"], off["test_auc"]]
    _check(list(zip(got, want)), "temporal link prediction")


def test_link_step_figures_are_the_committed_bench_link_json():
    """A link-prediction step's seconds and the speed-up over PyG's LinkNeighborLoader, with the
    settings the page states: bench_link/bench.json."""
    text = _page("docs/link-prediction.md")
    bench = _json("bench_link/bench.json")
    (row,) = bench["rows"]
    s = bench["settings"]
    scale, width, fanouts, batch = _grab(
        text,
        r"On `products-like` ([\d.]+) \(GraphSAGE 2 x (\d+), fanouts ([\d,]+), batches of "
        r"([\d,]+) edges, one negative each\)",
    )
    assert (float(scale), int(width), fanouts) == (s["scale"], s["hidden"], s["fanouts"])
    assert (int(batch.replace(",", "")), s["negatives"], s["threads"]) == (s["batch_size"], 1, 1)
    step, speedup = _grab(
        text, r"a step takes ([\d.]+) s on one thread, ([\d.]+)x faster than PyG's `LinkNeighbor"
    )
    peer = "PyG LinkNeighborLoader + SAGEConv"
    mine = row["impls"]["fleetgnn"]["median_s"] / s["steps"]
    _check([(step, mine), (speedup, row["speedup"][peer])], "a link-prediction step")


def test_hetero_collapse_table_is_its_committed_json():
    """Typed against collapsed test accuracies per model and seed, with zero rows and with
    embeddings for the featureless types, and R-GAT's gain in test nodes: the committed runs of
    the command the page gives."""
    text = _page("docs/heterogeneous.md")
    runs = _json("quality_hetero_collapse.json")["runs"]
    scale, epochs, seeds = _grab(
        text, r"quality_hetero_collapse\.py --scale ([\d.]+) --epochs (\d+) --seeds ([\d ]+) \["
    )
    for inputs in ("zeros", "embed"):
        r = runs[inputs]
        assert (r["scale"], r["epochs"]) == (float(scale), int(epochs)), inputs
        assert r["seeds"] == [int(x) for x in seeds.split()], inputs
    acc = {
        (inputs, row["model"], side): [
            x["test"] for x in runs[inputs]["rows"] if x["model"] == row["model"] for x in [x[side]]
        ]
        for inputs in runs
        for row in runs[inputs]["rows"]
        for side in ("typed", "collapse")
    }
    three = r"([\d.]+), ([\d.]+), ([\d.]+)"
    for label, model in (("R-GCN", "rgcn"), ("R-GAT", "rgat")):
        got = _grab(text, rf"\| {label} \| {three} \| {three} \|")
        want = [*acc["zeros", model, "typed"], *acc["zeros", model, "collapse"]]
        _check(list(zip(got, want, strict=True)), f"{label} typed / collapse")
    embed = _grab(text, rf"the typed models reach R-GCN {three} and R-GAT {three};")
    want = [*acc["embed", "rgcn", "typed"], *acc["embed", "rgat", "typed"]]
    _check(list(zip(embed, want, strict=True)), "typed models with embeddings")
    (collapse,) = _grab(text, r"R-GAT's third seed then falls below its collapse \(([\d.]+)\)")
    assert acc["embed", "rgat", "typed"][2] < acc["embed", "rgat", "collapse"][2]
    _check([(collapse, acc["embed", "rgat", "collapse"][2])], "R-GAT's collapse, seed 2")
    low, high, nodes = _grab(text, r"its gain is small \((\w+) to (\w+) test nodes of (\d+)\)")
    gains = [
        round((a - b) * int(nodes))
        for a, b in zip(acc["zeros", "rgat", "typed"], acc["zeros", "rgat", "collapse"])
    ]
    assert all(abs(x * int(nodes) - round(x * int(nodes))) < 1e-6 for v in acc.values() for x in v)
    words = {"one": 1, "two": 2, "three": 3, "four": 4}
    assert (min(gains), max(gains)) == (words[low], words[high]), gains


# --- docs/planning.md and docs/engines/minibatch.md: the GPU checks, the plan -----------------


def test_planning_gpu_figures_are_the_checks_and_the_plan_it_names():
    """The predicted / measured table (the committed plan of the check's engine dataset against
    the check's second epochs), the earlier check's ratios, the measured overheads, split's three
    second epochs, the step's profile and the sampling rates: each from the file the page names."""
    text = _page("docs/planning.md")
    plan = _json("plan_h100_products-like-0.05.json")["plan"]
    assert plan["hardware"] == "h100" and "h100" in _grab(text, r"on the `(h100)` profile")
    check = _gpu_check("gpu-check-h100-stop35-engines.json")
    measured = {c["engine"]: c["measured_epoch_s"] for c in check["steps"]["plan"]["compared"]}
    rows = re.findall(r"\| `(\w+)` [^|]*\| ([\d.]+) ms \| ([\d.]+) ms \| ([\d.]+) \|", text)
    assert sorted(r[0] for r in rows) == sorted(measured), rows
    for engine, predicted, got, ratio in rows:
        p, m = plan["engines"][engine]["epoch_s"], measured[engine]
        _check([(predicted, p), (got, m)], f"{engine}'s epoch", scale=1e3)
        _check([(ratio, p / m)], f"{engine}'s predicted / measured")
    (steps,) = _grab(text, r"\| `minibatch` \((\d+) steps\) \|")
    # the earlier check: split within 2%, the others under by a factor, minibatch per step
    old = {
        c["engine"]: c
        for c in _gpu_check("gpu-check-h100-stop34.json")["steps"]["plan"]["compared"]
    }
    within, low, high, mb_pred, mb_meas = _grab(
        text,
        r"the plan put `split` within (\d+)% of its measured epoch, but the others ([\d.]+)-"
        r"([\d.]+)x under it \(`minibatch`: ([\d.]+) ms a step predicted, ([\d.]+) ms measured\)",
    )
    assert abs(old["split"]["predicted_over_measured"] - 1) <= int(within) / 100
    under = [1 / c["predicted_over_measured"] for e, c in old.items() if e != "split"]
    _check([(low, min(under)), (high, max(under))], "the earlier check's ratios")
    mb = old["minibatch"]
    per_step = [mb["predicted_epoch_s"] / int(steps), mb["measured_epoch_s"] / int(steps)]
    _check(list(zip((mb_pred, mb_meas), per_step)), "the earlier minibatch step", scale=1e3)
    # the measured fixed costs
    layer, tensor = _grab(
        text,
        r"part `overheads` of `(?:gpu-check-h100-stop35-bench\.json)`: ([\d.]+) ms for a small "
        r"layer's forward and backward, .*? and (\d+) us a tensor\)",
    )
    over = _gpu_check("gpu-check-h100-stop35-bench.json")["steps"]["bench"]["figures"]["overheads"]
    _check(
        [(layer, 1e3 * over["layer_overhead_s"]), (tensor, 1e6 * over["param_overhead_s"])],
        "overheads",
    )
    # split's second epoch in three checks
    epochs = _grab(text, r"`split`'s second epoch took (\d+), (\d+) and (\d+) ms in three checks")
    names = ("gpu-check-h100-stop34.json", "gpu-check-h100-stop35-engines.json")
    names += ("gpu-check-h100-stop35-engines2.json",)
    assert (
        "`gpu-check-h100-stop34.json`, `-stop35-engines.json` and `-stop35-engines2.json`" in text
    )
    split = [
        next(
            r["epoch_time_s"][-1]
            for r in _gpu_check(n)["steps"]["engines"]["runs"]
            if (r["engine"], r["world_size"], r.get("device")) == ("split", 1, "cuda")
        )
        for n in names
    ]
    _check(list(zip(epochs, split)), "split's second epochs", scale=1e3)
    # the minibatch step's profile, and the sampling rates the h100 profile takes
    sampler_check = _gpu_check("gpu-check-h100-stop35-sampler.json")["steps"]["bench"]["figures"]
    prof = sampler_check["minibatch_profile"]
    launches, syncs, kernel = _grab(
        text,
        r"`minibatch_profile` of `gpu-check-h100-stop35-sampler\.json`\) counted (\d+) kernel "
        r"launches and (\d+) stream synchronisations a step against ([\d.]+) ms of kernel time",
    )
    want = [prof["kernel_launches_per_step"], prof["stream_syncs_per_step"]]
    _check(
        list(zip((launches, syncs, kernel), [*want, prof["device_kernel_us_per_step"] / 1e3])),
        "profile",
    )
    host, device = _grab(
        text,
        r"\(([\d.]+) M edges/s on the newest H100 check's host, `gpu-check-h100-stop35-sampler"
        r"\.json`; 5 M assumed elsewhere\).*?measured rate \((\d+) M edges/s on the newest H100",
    )
    rates = sampler_check["sampler"]["m_edges_per_s"]
    _check(
        [(host, rates["fleetgnn numpy (CPU)"]), (device, rates["fleetgnn, fisher_yates=triton"])],
        "sampling",
    )


def test_minibatch_page_figures_are_the_committed_jsons():
    """docs/engines/minibatch.md: the CPU sampler's rates (bench/bench.json), the GPU sampler's in
    three checks, and the scale ladder's anonymous memory per worker."""
    text = _page("docs/engines/minibatch.md")
    numpy_rate, torch_rate = _grab(
        text,
        r"`benchmarks/results/bench/bench\.json`\) numpy sampled ([\d.]+) M edges/s and torch on "
        r"the CPU ([\d.]+) M",
    )
    (row,) = (
        r
        for r in _json("bench/bench.json")["rows"]
        if r["section"] == "sampler" and r["threads"] == 1
    )
    assert "products-like x0.05" in row["case"] and "fanouts 15,10,5, batch 1024" in row["case"]
    rates = [row["impls"]["fleetgnn"]["rate"], row["impls"]["fleetgnn torch (CPU)"]["rate"]]
    _check(list(zip((numpy_rate, torch_rate), rates)), "the CPU sampler")
    got = _grab(
        text,
        r"drew ([\d.]+) and ([\d.]+) M edges/s, the host's numpy ([\d.]+) and ([\d.]+) M "
        r".*?`(gpu-check-[\w-]+\.json)` and `(gpu-check-[\w-]+\.json)` in "
        r"`benchmarks/results/gpu/`",
    )
    first, second = (_gpu_check(n)["steps"]["bench"]["figures"]["sampler"] for n in got[4:])
    want = [first["m_edges_per_s"]["fleetgnn"], second["m_edges_per_s"]["fleetgnn"]]
    want += [first["m_edges_per_s"]["fleetgnn numpy (CPU)"]]
    want += [second["m_edges_per_s"]["fleetgnn numpy (CPU)"]]
    _check(list(zip(got[:4], want)), "the GPU checks' samplers")
    triton, ops, host, times = _grab(
        text,
        r"which drew (\d+) M edges/s there against (\d+) M with the torch ops and ([\d.]+) M for "
        r"the host's numpy \((\d+)x; `gpu-check-h100-stop35-sampler\.json`\)",
    )
    s = _gpu_check("gpu-check-h100-stop35-sampler.json")["steps"]["bench"]["figures"]["sampler"]
    m = s["m_edges_per_s"]
    want = [m["fleetgnn, fisher_yates=triton"], m["fleetgnn"], m["fleetgnn numpy (CPU)"]]
    want.append(s["over_host_numpy"]["fleetgnn, fisher_yates=triton"])
    _check(list(zip((triton, ops, host, times), want)), "the Triton sampler")
    scale, mib = _grab(
        text,
        r"On papers-like ([\d.]+) \(\d+M nodes\) with 64 MB / 256 MB budgets the anonymous "
        r"memory per worker stayed at about (\d+) MiB",
    )
    (res,) = (r for r in _json("bench_scale_ladder.json")["results"] if r["scale"] == float(scale))
    assert "store.device_budget=64MB --set store.host_budget=256MB" in res["stages"]["train"]["cmd"]
    assert abs(int(mib) - res["stages"]["train"]["peak_anon"] / 2**20) <= 5, res["stages"]["train"]


def test_planning_xgnn_cell_is_what_the_store_model_gives():
    """docs/planning.md's papers100M GraphSAGE on dgx1-v100: the store model's order, cache ratio
    and hit rate (XGNN's cell beside them is tests/cost/test_store_model.py's TABLE4)."""
    from fleetgnn.cost.store_model import plan_feature_cache

    from .cost.test_store_model import DGX1, TABLE4, _shape_workload

    cached, hits, r, h = _grab(
        _page("docs/planning.md"),
        r"papers100M GraphSAGE on `dgx1-v100`: graph first, (\d+)% of features cached, (\d+)% "
        r"hits; XGNN reports (\d+)% / (\d+)%",
    )
    plan = plan_feature_cache(_shape_workload("sage", "PA"), DGX1, 8)
    assert plan.order == "graph_first"
    _check([(cached, plan.cache_ratio), (hits, plan.feature_hit)], "the XGNN cell", scale=100)
    assert (int(r), int(h)) == TABLE4["sage", "PA"]


# --- docs/data.md, docs/partitioning.md: figures the code gives -------------------------------


def test_synthetic_label_ceilings_are_the_presets():
    """The best achievable accuracy of products-like and papers-like: one minus the labels
    redrawn at random that land on another class (the presets' label noise and class sizes)."""
    from fleetgnn.graph.synthetic import PRESETS, class_probabilities

    text = _page("docs/data.md")
    (products,) = _grab(text, r"its labels cap any model at ~([\d.]+),")
    (papers,) = _grab(text, r"ogbn-papers100M \(best achievable ~([\d.]+)\)")
    for printed, preset in ((products, "products-like"), (papers, "papers-like")):
        spec = PRESETS[preset]
        p = class_probabilities(spec)
        _check([(printed, 1 - spec.label_noise * (1 - float((p**2).sum())))], preset)


def test_bundled_cora_size():
    """data.md's size of the Cora files that ship inside the package."""
    from fleetgnn.graph.loaders.bundled import DATA_DIR

    (mb,) = _grab(_page("docs/data.md"), r"Cora ships inside the package \(([\d.]+) MB,")
    files = [p for p in DATA_DIR.rglob("*") if p.is_file() and p.name != "README.md"]
    _check([(mb, sum(p.stat().st_size for p in files))], "Cora's files", scale=1e-6)


def test_metis_memory_figures_are_the_partitioners_estimate():
    """partitioning.md's bytes per edge and per node are the estimate `partition --method metis`
    refuses by, and the papers100M-shaped edges that fit 24 GiB follow from it."""
    from fleetgnn.partition.methods import metis_memory

    per_edge, per_node, gib, edges = _grab(
        _page("docs/partitioning.md"),
        r"about (\d+) bytes per edge and (\d+) per node .*? so (\d+) GiB holds about (\d+)M edges "
        r"of a papers100M-shaped graph",
    )
    assert metis_memory(0, 1) - metis_memory(0, 0) == int(per_edge)
    assert metis_memory(1, 0) - metis_memory(0, 0) == int(per_node)
    nodes_per_edge = 111_059_956 / 1_615_685_872  # ogbn-papers100M
    per = metis_memory(1_000_000 * nodes_per_edge, 1_000_000) - metis_memory(0, 0)
    fit = (int(gib) * 2**30 - metis_memory(0, 0)) / (per / 1_000_000)
    assert abs(fit / 1e6 - int(edges)) <= 5, fit  # "about": to the nearest 10M


# --- the test suite's own figures --------------------------------------------------------------


def test_no_page_states_the_test_suites_size_or_duration():
    """Counts of tests and the suite's minutes go stale with every test added: no page states
    them (pytest's last line says both; getting-started.md says so)."""
    from .test_docs import PAGES

    suite = re.compile(
        r"\b\d[\d,.]* (tests|passed|skipped|deselected)\b|\b(suite|tier)[^.]{0,60}?\b\d[\d.]* ?"
        r"(min|minutes|s|seconds)\b",
        re.I,
    )
    for page in PAGES:
        found = suite.search(" ".join(page.read_text().split()))
        assert not found, (page.name, found and found.group(0))
    assert "pytest's last line says how many tests ran and how long they took" in _page(
        "docs/getting-started.md"
    )


def test_getting_started_states_the_quick_start_figures_of_the_readme():
    """The Quick start's accuracy is stated on two pages; tests/test_readme.py runs the command
    against the README's, so the other page must say the same."""
    claim = r"GraphSAGE climbs from (0\.\d+) to ~(0\.\d+) test accuracy over the (\d+) epochs, "
    claim += r"(\d+) classes"
    assert _grab(_page("docs/getting-started.md"), claim) == _grab(_page("README.md"), claim)


# --- docs/partitioning.md: the table and the peak memory ---------------------------------------


def _count(printed: str) -> tuple[float, float]:
    """``2,708``, ``122k`` or ``2.9M`` as (value, half a unit of its last digit)."""
    mult = {"k": 1e3, "M": 1e6}.get(printed[-1], 1.0)
    digits = printed.rstrip("kM").replace(",", "")
    places = len(digits.split(".")[1]) if "." in digits else 0
    return float(digits) * mult, 0.5 * 10**-places * mult


def _partition_rows() -> list[tuple[str, int, list[str], list[str]]]:
    """(graph, P, the four local-edge ratios, the two times) per row of the table, each graph
    named by its JSON's file stem."""
    md = (ROOT / "docs" / "partitioning.md").read_text()
    rows, graph = [], None
    for line in md.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if not re.match(r"(Cora|products-like|papers-like)\b", cells[0]):
            continue
        name = cells[0].split(" (")[0]
        graph = "cora" if name == "Cora" else name.replace(" ", "-")
        rows.append((graph, cells[0], int(cells[1]), cells[2].split(" / "), cells[3].split(" / ")))
    return rows


def test_partition_table_is_its_committed_jsons():
    """Every ratio and time of docs/partitioning.md's table, and each graph's size, is its
    bench_partition.py JSON's; METIS's "not run" is the estimate it refuses by."""
    from fleetgnn.partition.methods import metis_memory

    methods = ("metis", "ldg", "range", "hash")
    rows = _partition_rows()
    assert len(rows) == 6
    for graph, label, parts, ratios, times in rows:
        bench = _json(f"bench_partition_docs/{graph}.json")
        got = {r["method"]: r for r in bench["results"] if r["num_parts"] == parts}
        sizes = re.search(r"\(([\d.,]+[kM]?)(?: nodes)?, ([\d.,]+[kM]?)(?: edges)?\)", label)
        if sizes:
            for printed, n in zip(sizes.groups(), ("num_nodes", "num_edges")):
                value, half = _count(printed)
                assert abs(value - bench["graph"][n]) <= half, (label, n, bench["graph"][n])
        for method, ratio in zip(methods, ratios, strict=True):
            if ratio.startswith("not run"):
                assert method not in got
                (gb,) = _grab(ratio, r"~(\d+) GB")
                need = metis_memory(bench["graph"]["num_nodes"], bench["graph"]["num_edges"])
                _check([(gb, need)], f"METIS's estimate for {graph}", scale=1e-9)
                continue
            _check([(ratio, got[method]["local_edge_ratio"])], f"{graph} {method} P={parts}")
        for method, seconds in zip(("metis", "ldg"), times, strict=True):
            if seconds == "-":
                assert method not in got
                continue
            _check([(seconds, got[method]["partition_s"])], f"{graph} {method} time P={parts}")
    # the peak memory paragraph
    text = _page("docs/partitioning.md")
    mem = {
        g: {r["step"]: r for r in _json(f"bench_partition_memory/{g}.json")["rows"]}
        for g in ("products-like-0.05", "papers-like-0.01", "papers-like-0.062")
    }
    got = _grab(
        text,
        r"metis (\d+) and (\d+) bytes per edge on products-like 0\.05 and papers-like 0\.01 "
        r"\(([\d.]+) GB there\), of which building its adjacency (\d+) and (\d+); ldg ([\d.]+), "
        r"([\d.]+) and ([\d.]+) on the two and papers-like 0\.062 \((\d+) MB there\)",
    )
    small, large, huge = (
        mem["products-like-0.05"],
        mem["papers-like-0.01"],
        mem["papers-like-0.062"],
    )
    want = [small["metis"]["bytes_per_edge"], large["metis"]["bytes_per_edge"]]
    want.append((large["metis"]["peak"] - large["metis"]["rss_before"]) / 1e9)
    want += [small["metis-adjacency"]["bytes_per_edge"], large["metis-adjacency"]["bytes_per_edge"]]
    want += [m["ldg"]["bytes_per_edge"] for m in (small, large, huge)]
    want.append((huge["ldg"]["peak"] - huge["ldg"]["rss_before"]) / 1e6)
    _check(list(zip(got, want, strict=True)), "partition peak memory")


def test_cora_partitions_give_the_tables_ratios(tmp_path):
    """The table's Cora rows, partitioned again: the ratios are deterministic (seeded METIS,
    streaming LDG, range and hash), so the code must still give the figures printed."""
    from fleetgnn.graph import open_dataset
    from fleetgnn.partition import evaluate, partition

    assert _fleetgnn(["prepare", "planetoid", "--name", "cora", "--out", "cora"], tmp_path) == 0
    g = open_dataset(tmp_path / "cora")
    for graph, _, parts, ratios, _ in _partition_rows():
        if graph != "cora":
            continue
        for method, ratio in zip(("metis", "ldg", "range", "hash"), ratios, strict=True):
            got = evaluate(g, partition(g, method, parts, seed=0)).local_edge_ratio
            _check([(ratio, got)], f"Cora {method} P={parts}")


def test_benchmarks_pages_sources_table_names_files_that_exist():
    """docs/benchmarks.md's table of where the figures come from names committed files."""
    md = (ROOT / "docs" / "benchmarks.md").read_text()
    section = md[md.index("## Where the docs' figures come from") :]
    paths = re.findall(r"`((?:benchmarks|tests)/[^`]+)`", section)
    assert len(paths) > 15
    for path in paths:
        assert (ROOT / path).exists(), path
