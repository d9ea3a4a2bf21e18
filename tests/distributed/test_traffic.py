import threading

import pytest

from fleetgnn.distributed import LINK_KINDS, DistError, TrafficMeter


def test_record_snapshot_delta_reset():
    m = TrafficMeter()
    assert set(m.snapshot()) == set(LINK_KINDS)
    m.record("peer", 100)
    m.record("peer", 50, messages=3)
    m.record("disk", 7, messages=0)
    s = m.snapshot()
    assert s["peer"] == {"bytes": 150, "messages": 4}
    assert s["disk"] == {"bytes": 7, "messages": 0}
    assert s["local"] == {"bytes": 0, "messages": 0}
    s["peer"]["bytes"] = -1  # a snapshot is a copy
    assert m.snapshot()["peer"]["bytes"] == 150
    m.record("net", 10)
    d = m.delta(s | {"peer": {"bytes": 150, "messages": 4}})
    assert d["net"] == {"bytes": 10, "messages": 1} and d["peer"] == {"bytes": 0, "messages": 0}
    assert m.bytes_by_kind()["net"] == 10
    assert "peer=150B/4msg" in repr(m)
    m.reset()
    assert all(v == {"bytes": 0, "messages": 0} for v in m.snapshot().values())
    assert repr(m) == "TrafficMeter(empty)"


def test_unknown_kind_and_negative_counts():
    m = TrafficMeter()
    with pytest.raises(ValueError, match="local, peer, h2d, d2h, net, disk"):
        m.record("nvlink", 1)
    with pytest.raises(DistError, match=">= 0"):
        m.record("peer", -1)
    with pytest.raises(DistError, match="unknown link kind"):
        m.delta({"pcie": {"bytes": 0}})


def test_thread_safe_totals():
    m = TrafficMeter()

    def work(k: int) -> None:
        for i in range(2000):
            m.record(LINK_KINDS[(k + i) % len(LINK_KINDS)], 3, messages=2)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    s = m.snapshot()
    assert sum(v["bytes"] for v in s.values()) == 8 * 2000 * 3
    assert sum(v["messages"] for v in s.values()) == 8 * 2000 * 2
    # record i of thread k goes to kind (k + i) % 6: a closed form per kind
    for j, kind in enumerate(LINK_KINDS):
        n = sum(1 for k in range(8) for i in range(2000) if (k + i) % len(LINK_KINDS) == j)
        assert s[kind] == {"bytes": 3 * n, "messages": 2 * n}
