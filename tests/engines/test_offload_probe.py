"""The offload engine's start-up probe of layers that declare a cacheable aggregation."""

import pytest
import torch

from fleetgnn.config import OffloadEngineConfig
from fleetgnn.engines import build_engine
from fleetgnn.errors import ConfigError
from fleetgnn.nn import LayerwiseModule
from fleetgnn.nn.recompute import REPLAY_TOLERANCE
from fleetgnn.train import engine_from_config

from .test_fullgraph import _graph
from .test_offload import _config


class TwoLayer(LayerwiseModule):
    """``aggregate`` of (a transform of) the input, then a linear map; declares caching."""

    def __init__(self, in_dim: int, classes: int, transform: str) -> None:
        super().__init__(num_layers=2)
        self.transform = transform
        self.pre = torch.nn.Linear(in_dim, in_dim, dtype=torch.float64)
        self.lins = torch.nn.ModuleList(
            [
                torch.nn.Linear(in_dim, 8, dtype=torch.float64),
                torch.nn.Linear(8, classes, dtype=torch.float64),
            ]  # fmt: skip
        )

    def layer_forward(self, i, agg, h_src, *, step=0):  # noqa: ANN001, ANN201
        if i == 0 and self.transform == "project":  # a parameter before the aggregation
            h_src = self.pre(h_src)
        if i == 0 and self.transform == "tanh":  # a curvature before the aggregation
            h_src = torch.tanh(h_src)
        out = self.lins[i](agg.aggregate(h_src, "mean"))
        return torch.relu(out) if i == 0 else out

    def cacheable_aggregation(self, i: int) -> bool:
        return True


def _engine(transform: str, **knobs):  # noqa: ANN003, ANN202
    graph = _graph("plain")
    model = TwoLayer(graph.num_features, graph.num_classes, transform)
    cfg = OffloadEngineConfig(dtype="float64", device="cpu", partition="range", **knobs)
    return build_engine(model, graph, cfg)


@pytest.mark.parametrize("transform", ["project", "tanh"])
def test_a_wrong_cacheable_declaration_is_refused_in_one_line(transform: str) -> None:
    with pytest.raises(ConfigError) as info:
        _engine(transform)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(
        "layer 0 of TwoLayer declares cacheable_aggregation(0) but its gradient from the "
        "cached aggregates differs from recomputation's by "
    )
    assert (
        "Return False from cacheable_aggregation(0), or set offload.cache_aggregates=false" in msg
    )


def test_a_right_declaration_passes_and_recomputing_needs_no_probe() -> None:
    with _engine("none") as eng:
        assert eng.hybrid == [True, True]
        assert eng.probe_s > 0
    with _engine("project", cache_aggregates=False) as eng:  # nothing cached: nothing to probe
        assert eng.hybrid == [False, False]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("model", ["gcn", "sage", "gin"])
def test_the_shipped_layers_pass_the_probe(model: str, dtype: str) -> None:
    from fleetgnn.nn.recompute import replay_gradient_error

    kind = "loops" if model in ("sage", "gin") else "plain"
    cfg = _config(model, [f"train.dtype={dtype}"])
    with engine_from_config(cfg, _graph(kind), None) as eng:
        assert all(eng.hybrid)
        j = max(range(len(eng.hops)), key=lambda k: eng.hops[k].rows.size - eng.hops[k].num_dst)
        x = torch.randn(eng.hops[j].rows.size, eng.widths[0], dtype=eng.dtype)
        err = replay_gradient_error(eng.module, 0, eng.aggs[j], x)
        assert err <= REPLAY_TOLERANCE[eng.dtype] / 100, err
