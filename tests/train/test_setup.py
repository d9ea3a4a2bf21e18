"""Engines built from a run config: the split engine's saved partition books."""

from fleetgnn.cli.main import main
from fleetgnn.distributed.testing import context_or_own
from fleetgnn.graph import open_dataset
from fleetgnn.graph.synthetic import prepare_synthetic
from fleetgnn.train import engine_from_config, load_config


def test_split_says_it_computes_a_book_when_only_other_part_counts_are_saved(tmp_path, capsys):
    """Issue 25: ``--engine split --nproc 3`` with only a 2-part METIS book saved recomputed
    METIS on rank 0 without a word (and did not keep it); it says so, and how to keep one.
    Here one rank and a 2-part book; with a book for its world size nothing is said."""
    data = prepare_synthetic(tmp_path / "tiny", preset="tiny")
    assert main(["partition", str(data), "--method", "metis", "--parts", "2"]) == 0
    cfg = load_config(None, ["train.engine=split", f"data.dataset={data}"])
    capsys.readouterr()
    with context_or_own(None) as ctx:  # a group of its own, destroyed after (no leaked group)
        engine_from_config(cfg, open_dataset(data), ctx).close()
    err = capsys.readouterr().err
    assert "no saved metis book for 1 parts" in err and "(found metis-2)" in err
    assert "does not keep it" in err
    assert f"fleetgnn partition {data} --method metis --parts 1" in err
    assert main(["partition", str(data), "--method", "metis", "--parts", "1"]) == 0
    capsys.readouterr()
    with context_or_own(None) as ctx:
        engine_from_config(cfg, open_dataset(data), ctx).close()
    assert "no saved" not in capsys.readouterr().err


def test_adam_is_torchs_fused_one_on_cuda_only():
    """Adam and AdamW take torch's fused kernel where the engine runs on CUDA (one launch a step
    for every parameter); elsewhere, and for SGD, each optimizer's default."""
    import torch

    from fleetgnn.config import OptimConfig
    from fleetgnn.train import optimizer_from_config

    model = torch.nn.Linear(3, 2)
    for name in ("adam", "adamw", "sgd"):
        cfg = OptimConfig(optimizer=name)
        assert not optimizer_from_config(model, cfg).defaults.get("fused")
        assert not optimizer_from_config(model, cfg, "cpu").defaults.get("fused")
        fused = optimizer_from_config(model, cfg, "cuda:0").defaults.get("fused")
        assert bool(fused) == (name != "sgd"), name
