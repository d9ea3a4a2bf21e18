"""The speed tier's sweep of the step's kernel ops: each other implementation gets whole epochs."""

import fleetgnn.bench.speed as speed
import fleetgnn.kernels as kernels
from fleetgnn.kernels import KernelRegistry
from tests.engines.test_step_syncs import one_rank_engine


def test_each_other_implementation_of_a_swept_op_trains_whole_epochs(monkeypatch):
    calls = []
    torch_dropout = kernels.KERNELS.impl("keyed_dropout", "torch")

    def counted(*args, **kwargs):
        calls.append(1)
        return torch_dropout(*args, **kwargs)

    registry = KernelRegistry()  # a registry where the CPU has a second dropout kernel
    for op in kernels.KERNELS.ops():
        for name in kernels.KERNELS.names(op, "cpu"):
            registry.register(op, name, kernels.KERNELS.impl(op, name), ("cpu",))
    registry.register("keyed_dropout", "counted", counted, ("cpu",))
    monkeypatch.setattr(kernels, "KERNELS", registry)
    monkeypatch.setattr(speed, "KERNELS", registry)
    with one_rank_engine("node") as eng:
        out, epoch = speed._other_kernels(eng, eng.device, 4, lambda msg: None)
    assert set(out) == {"keyed_dropout"} and epoch == 8  # csr_mm has one CPU kernel
    arms = out["keyed_dropout"]
    assert arms["default"]["name"] == "torch" and set(arms) == {"default", "counted"}
    assert calls  # the epochs ran the other kernel
    assert all(a["epoch_s"] > 0 and a["loss_sum"] > 0 for a in arms.values())
