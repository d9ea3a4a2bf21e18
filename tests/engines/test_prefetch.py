"""The prefetcher: the same batches in the same order, prepared aside on a CUDA side stream."""

import dataclasses

import pytest
import torch

from fleetgnn.engines.step import Prefetcher


@dataclasses.dataclass
class _Batch:
    step: int
    x: torch.Tensor
    parts: list


def _run(device, enabled, stop=5):
    streams = []

    def prepare(epoch, step):
        if device == "cuda":
            streams.append(torch.cuda.current_stream())
        x = torch.arange(1000, dtype=torch.float64, device=device) * (epoch + step)
        x = x.cumsum(0)  # device work queued on the thread's stream
        return _Batch(step, x, [x[:3] + 1, {"y": x[-2:]}])

    pf = Prefetcher(prepare, enabled=enabled, name="test-prefetch", device=device)
    got = [
        (s, b.step, b.x.cpu(), b.parts[0].cpu(), b.parts[1]["y"].cpu())
        for s, b, _ in pf.steps(2, 0, stop)
    ]
    pf.close()
    return got, streams, pf


def test_prefetched_batches_equal_inline_ones(device):
    inline, _, off = _run(device, enabled=False)
    ahead, streams, on = _run(device, enabled=True)
    assert off.stream is None
    assert len(ahead) == len(inline) == 5
    for a, b in zip(ahead, inline, strict=True):
        assert a[:2] == b[:2] and all(torch.equal(u, v) for u, v in zip(a[2:], b[2:]))
    assert [a[0] for a in ahead] == list(range(5))
    if device == "cuda":  # steps 1.. prepared on the side stream, step 0 inline
        assert on.stream is not None
        assert streams[0] == torch.cuda.current_stream()
        assert all(s == on.stream for s in streams[1:])
    else:
        assert on.stream is None  # the CPU: the thread's work is host work


def test_a_disabled_prefetcher_has_no_side_stream(device):
    pf = Prefetcher(lambda e, s: s, enabled=False, name="test-off", device=device)
    assert pf.stream is None and [b for _, b, _ in pf.steps(0, 0, 3)] == [0, 1, 2]
    pf.close()


@pytest.mark.parametrize("enabled", [True, False])
def test_prefetcher_without_a_device_is_the_cpu_one(enabled):
    pf = Prefetcher(lambda e, s: (e, s), enabled=enabled, name="test-cpu")
    assert pf.device.type == "cpu" and pf.stream is None
    assert [b for _, b, _ in pf.steps(1, 2, 5)] == [(1, 2), (1, 3), (1, 4)]
    pf.close()
