import dataclasses
import math
import pickle
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from fleetgnn.cost import (
    LINK_KINDS,
    PROFILES,
    HardwareProfile,
    calibration,
    load_profile,
    local_profile,
)
from fleetgnn.cost.gpu_rates import measured_rates
from fleetgnn.errors import ConfigError

GB = 1e9
GiB = 2**30
NOTES = Path(__file__).resolve().parents[3] / "shared" / "notes" / "xgnn.md"

# ../shared/notes/xgnn.md, golden placement test: 8x V100 DGX-1, GB/s per direction, local 700
DROP = object()
XGNN_LINKS = (
    "0-1:25 0-2:25 0-3:50 0-6:50 1-2:50 1-3:25 1-7:50 2-3:50 2-4:25 3-5:25 4-5:50 4-6:25 "
    "4-7:50 5-6:50 5-7:25 6-7:25"
)


def _links(text):
    return {(int(i), int(j)): float(w) for i, j, w in re.findall(r"\b(\d)-(\d):(\d+)\b", text)}


def _matrix(links, n=8, local=700.0):
    m = np.zeros((n, n))
    np.fill_diagonal(m, local)
    for (i, j), w in links.items():
        m[i, j] = m[j, i] = w
    return m


# ------------------------------------------------------------------------------- built-ins
def test_link_kinds_match_the_traffic_meter():
    from fleetgnn.distributed.traffic import LINK_KINDS as METER_KINDS

    assert LINK_KINDS == METER_KINDS


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_builtin_profile_validates(name):
    p = PROFILES[name]
    assert p.name == name and p.kind == "gpu" and p.num_hosts == 1
    assert set(p.bandwidth) == set(LINK_KINDS)
    assert all(v > 0 and math.isfinite(v) for v in p.bandwidth.values())
    assert len(p.peer) == p.num_devices and all(len(r) == p.num_devices for r in p.peer)
    assert all(p.peer[i][i] == p.bandwidth["local"] for i in range(p.num_devices))
    assert min(p.gather_rate, p.spmm_rate, p.gemm_rate) > 0
    assert p.device_memory > 0 and p.host_memory > p.device_memory
    assert p.bandwidth["local"] > p.bandwidth["h2d"]  # device memory beats PCIe everywhere
    assert len(p.source) > 100
    again = HardwareProfile.from_dict(p.to_dict())
    assert again == p and hash(again) == hash(p)
    assert name in repr(p)


def test_builtin_machines():
    assert {n: (p.num_devices, p.device_memory // GiB) for n, p in PROFILES.items()} == {
        "dgx-a100": (8, 40),
        "dgx1-v100": (8, 16),
        "4xa100-80g-nvlink": (4, 80),
        "4x3090ti-pcie": (4, 24),
        "h100": (1, 79),  # 81559 MiB as nvidia-smi shows it
        "h200": (1, 140),  # 143771 MiB
    }
    hongtu = PROFILES["4xa100-80g-nvlink"]
    assert hongtu.host_memory == 512 * GiB
    assert hongtu.bandwidth["h2d"] < 32 * GB  # HongTu's B_hg ~32 GB/s, derated
    assert hongtu.min_peer_bandwidth() > 3 * hongtu.bandwidth["h2d"]  # NVLink 3 >> PCIe
    gsplit = PROFILES["4x3090ti-pcie"]  # no NVLink: every peer byte goes through the host
    assert all(gsplit.peer[i][j] == 0 for i in range(4) for j in range(4) if i != j)
    assert gsplit.min_peer_bandwidth() == gsplit.bandwidth["h2d"]
    a100 = PROFILES["dgx-a100"]  # NVSwitch: every pair alike
    assert a100.min_peer_bandwidth() == a100.mean_peer_bandwidth() == 230 * GB


def test_dgx1_v100_matches_the_notes_and_is_asymmetric():
    p = PROFILES["dgx1-v100"]
    links = _links(XGNN_LINKS)
    if NOTES.exists():  # the notes beside the checkout: read the golden test's links there
        text = NOTES.read_text()
        golden = text[text.index("Golden test") :]
        golden = golden[: golden.index(")")]
        assert _links(golden) == links
        assert "local 700" in golden
    assert np.array_equal(np.array(p.peer) / GB, _matrix(links))
    off = {p.peer[i][j] for i in range(8) for j in range(8) if i != j}
    assert off == {0.0, 25 * GB, 50 * GB}  # some pairs have twice the NVLink of others
    assert p.peer_bandwidth(0, 3) == 50 * GB and p.peer_bandwidth(3, 0) == 50 * GB
    assert p.peer_bandwidth(0, 1) == 25 * GB
    assert p.peer[0][4] == 0 and p.peer_bandwidth(0, 4) == p.bandwidth["h2d"]  # via the host
    assert p.min_peer_bandwidth() == p.bandwidth["h2d"] < 25 * GB
    # 8 pairs at 25, 8 at 50, 12 unlinked pairs staged at 6 GB/s
    assert p.mean_peer_bandwidth() == pytest.approx((8 * 25 + 8 * 50 + 12 * 6) / 28 * GB)
    assert p.mean_peer_bandwidth([0, 3]) == 50 * GB
    assert p.mean_peer_bandwidth([0, 1, 2]) == pytest.approx((25 + 25 + 50) / 3 * GB)
    assert p.mean_peer_bandwidth([5]) == p.bandwidth["local"]
    # every GPU has 6 NVLink 2 links of 25 GB/s
    assert all(sum(r[j] for j in range(8) if j != i) == 150 * GB for i, r in enumerate(p.peer))


def test_dgx1_v100_feeds_the_placement_solver():
    from fleetgnn.config.topology import topology_matrix

    p = PROFILES["dgx1-v100"]
    for n in (4, 8):
        got = topology_matrix(np.array(p.with_devices(n).peer) / GB, n)
        assert np.array_equal(got, topology_matrix("dgx1-v100", n))


def test_peer_queries_check_indices():
    p = PROFILES["dgx1-v100"]
    assert p.peer_bandwidth(2, 2) == p.bandwidth["local"]
    for bad in ((8, 0), (0, -1), (0.5, 1)):
        with pytest.raises(ConfigError, match="out of range|device index"):
            p.peer_bandwidth(*bad)
    with pytest.raises(ConfigError, match="twice"):
        p.mean_peer_bandwidth([1, 1])
    single = PROFILES["h100"]
    local = measured_rates("h100").values["local"]  # the GPU check's device copy
    assert single.min_peer_bandwidth() == single.mean_peer_bandwidth() == local


# ---------------------------------------------------------------------------- with_devices
def test_with_devices_restricts_the_matrix():
    p = PROFILES["dgx1-v100"]
    two = p.with_devices(2)
    assert two.num_devices == 2 and two.device_memory == p.device_memory
    assert two.peer == ((700 * GB, 25 * GB), (25 * GB, 700 * GB))
    assert two.bandwidth["peer"] == 25 * GB  # one 25 GB/s link is all GPU 0 has left
    assert two.min_peer_bandwidth() == 25 * GB
    assert HardwareProfile.from_dict(two.to_dict()) == two
    assert p.with_devices(4).min_peer_bandwidth() == 25 * GB  # GPUs 0-3: fully linked quad
    assert p.with_devices(5).min_peer_bandwidth() == p.bandwidth["h2d"]  # GPU 4: no link to 0
    assert p.with_devices(8) is p
    nvswitch = PROFILES["dgx-a100"].with_devices(2)
    assert nvswitch.bandwidth["peer"] == 230 * GB
    for n in (0, 9, 2.0, True):
        with pytest.raises(ConfigError, match="with_devices"):
            p.with_devices(n)


# ----------------------------------------------------------------------------- round trips
def test_round_trip_dict_yaml_pickle(tmp_path):
    for p in PROFILES.values():
        d = p.to_dict()
        assert yaml.safe_load(yaml.safe_dump(d)) == d  # plain data
        path = p.to_yaml(tmp_path / f"{p.name}.yaml")
        assert HardwareProfile.from_yaml(path) == p
        assert load_profile(str(path)) == p
        assert pickle.loads(pickle.dumps(p)) == p
        assert load_profile(p.name) is p


def _user_profile():
    return {
        "name": "mybox",
        "kind": "gpu",
        "num_devices": 2,
        "device_memory": "24GiB",
        "host_memory": "128GiB",
        "bandwidth": {
            "local": "900GB/s",
            "h2d": "12GB/s",
            "d2h": 12e9,
            "net": "1.25GB",
            "disk": 3e9,
        },
        "peer": [[0, "20GB/s"], [20e9, 0]],
        "gather_rate": "3.6e11",  # YAML reads 3.6e11 as a string
        "spmm_rate": 5e10,
        "gemm_rate": 2.5e13,
    }


def test_user_yaml_with_units(tmp_path):
    path = tmp_path / "mybox.yaml"
    path.write_text(yaml.safe_dump(_user_profile()))
    p = HardwareProfile.from_yaml(path)
    assert p.device_memory == 24 * GiB and p.bandwidth["local"] == 900 * GB
    assert p.peer == ((900 * GB, 20 * GB), (20 * GB, 900 * GB))  # diagonal filled in
    assert p.bandwidth["peer"] == 20 * GB  # default: the sum of a device's links
    assert p.gather_rate == 3.6e11 and p.num_hosts == 1
    assert p.source == f"user profile {path}"
    text = path.read_text().replace("gemm_rate: 25000000000000.0", "gemm_rate: 1e13")
    path.write_text(text)
    assert HardwareProfile.from_yaml(path).gemm_rate == 1e13


@pytest.mark.parametrize(
    "change, field",
    [
        ({"bandwidth": {"local": 9e11, "h2d": -1, "d2h": 1, "net": 1, "disk": 1}}, "bandwidth.h2d"),
        ({"bandwidth": {"local": 9e11, "h2d": 1, "d2h": 1, "net": 1}}, "bandwidth.disk"),
        (
            {"bandwidth": {"local": 9e11, "h2d": 1, "d2h": 1, "net": 1, "disk": 1, "pcie": 1}},
            "bandwidth.pcie",
        ),
        ({"bandwidth": [1, 2]}, "bandwidth"),
        ({"peer": [[0, 1e9], [1e9, 0], [1e9, 1e9]]}, "peer"),
        ({"peer": [[0, 1e9, 1e9], [1e9, 0, 1e9]]}, "peer[0]"),
        ({"peer": [[0, 1e9], [1e9]]}, "peer[1]"),
        ({"peer": [[0, -1e9], [1e9, 0]]}, "peer[0][1]"),
        ({"peer": [[0, 1e9], [0, 0]]}, "peer[0][1]"),
        ({"peer": [[5e9, 1e9], [1e9, 0]]}, "peer[0][0]"),
        ({"peer": "fast"}, "peer"),
        ({"peer": None}, "peer"),
        ({"num_devices": 0}, "num_devices"),
        ({"num_devices": "2"}, "num_devices"),
        ({"num_hosts": 1.5}, "num_hosts"),
        ({"kind": "tpu"}, "kind"),
        ({"name": ""}, "name"),
        ({"device_memory": "lots"}, "device_memory"),
        ({"host_memory": -5}, "host_memory"),
        ({"spmm_rate": 0}, "spmm_rate"),
        ({"gemm_rate": "fast"}, "gemm_rate"),
        ({"gather_rate": float("nan")}, "gather_rate"),
        ({"gather_rate": True}, "gather_rate"),
        ({"bandwith": {}}, "bandwith"),  # unknown key (a typo)
        ({"spmm_rate": DROP}, "spmm_rate"),  # missing field
        ({"bandwidth": DROP}, "bandwidth"),
    ],
)
def test_bad_yaml_names_the_field(tmp_path, change, field):
    d = {k: v for k, v in {**_user_profile(), **change}.items() if v is not DROP}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(d))
    with pytest.raises(ConfigError) as e:
        HardwareProfile.from_yaml(path)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg
    assert re.search(rf"(^|[ '(]){re.escape(field)}([=' ]|$)", msg), msg


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot be read"):
        HardwareProfile.from_yaml(tmp_path / "none.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML") as e:
        HardwareProfile.from_yaml(bad)
    assert "\n" not in str(e.value)
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        HardwareProfile.from_yaml(bad)


def test_constructor_validates_too():
    d = _user_profile()
    with pytest.raises(ConfigError, match="mybox.*bandwidth.net"):
        HardwareProfile(**{**d, "bandwidth": {**d["bandwidth"], "net": 0}})
    p = HardwareProfile(**d)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.num_devices = 3
    with pytest.raises(TypeError):
        p.bandwidth["h2d"] = 1.0  # read-only mapping


# ---------------------------------------------------------------------------- load_profile
def test_load_profile_unknown_name_lists_builtins():
    with pytest.raises(ConfigError) as e:
        load_profile("dgx-a10")
    msg = str(e.value)
    assert "did you mean 'dgx-a100'" in msg
    assert all(name in msg for name in PROFILES) and "local" in msg
    with pytest.raises(ConfigError, match="only to 'local'"):
        load_profile("h100", quick=True)
    assert load_profile("H100") is PROFILES["h100"]


# ---------------------------------------------------------------------------- local_profile
_MEASUREMENTS = ("_measure_copy", "_measure_gather", "_measure_spmm", "_measure_gemm")


def _forbid_measuring(monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("measured again instead of reading the cache")

    for fn in (*_MEASUREMENTS, "_measure_disk", "_calibrate"):
        monkeypatch.setattr(calibration, fn, boom)


def test_local_profile_measures_and_caches(tmp_path, monkeypatch):
    p = local_profile(2, cache_dir=tmp_path, quick=True)
    assert p.name == "local" and p.kind == "cpu" and p.num_devices == 2
    assert min(p.bandwidth.values()) > 0 and min(p.gather_rate, p.spmm_rate, p.gemm_rate) > 0
    assert p.device_memory == p.host_memory // 2
    assert p.bandwidth["local"] == 2 * p.bandwidth["h2d"]  # bytes read + written
    assert p.peer_bandwidth(0, 1) == p.bandwidth["h2d"] / 2 == p.bandwidth["net"]
    assert "ESTIMATE" in p.source and "share host memory" in p.source and "disk" in p.source
    assert p.rates_from.startswith("this machine's calibration") and "sample_rate" in p.source
    assert len(list(tmp_path.glob("*.json"))) == 1
    assert HardwareProfile.from_dict(p.to_dict()) == p

    _forbid_measuring(monkeypatch)
    assert local_profile(2, cache_dir=tmp_path, quick=True) == p
    assert load_profile("local", 2, cache_dir=tmp_path, quick=True) == p

    # a probe given later is run once and cached; the calibration itself is not repeated
    calls = []
    probed = local_profile(
        2, cache_dir=tmp_path, quick=True, comm_probe=lambda: calls.append(1) or 3e9
    )
    assert calls == [1] and probed.peer_bandwidth(1, 0) == 3e9 == probed.bandwidth["net"]
    assert "comm_probe" in probed.source and "ESTIMATE" not in probed.source
    again = local_profile(2, cache_dir=tmp_path, quick=True, comm_probe=lambda: 1 / 0)
    assert again == probed


def test_local_profile_refresh_and_keys(tmp_path, monkeypatch):
    calls = []

    def fake(rate):
        def measure(*args):
            calls.append(rate)
            return rate

        return measure

    for name in _MEASUREMENTS:
        monkeypatch.setattr(calibration, name, fake(1e9))
    monkeypatch.setattr(calibration, "_measure_disk", lambda n, d: (5e8, "fake disk"))
    p = local_profile(3, cache_dir=tmp_path, threads=1)
    assert len(calls) == 4 and p.num_devices == 3 and p.spmm_rate == 1e9
    assert p.bandwidth["disk"] == 5e8 and "fake disk" in p.source
    local_profile(3, cache_dir=tmp_path, threads=1)
    assert len(calls) == 4  # cached
    local_profile(3, cache_dir=tmp_path, threads=1, refresh=True)
    assert len(calls) == 8
    local_profile(2, cache_dir=tmp_path, threads=1)  # another nproc: another key
    assert len(calls) == 12
    assert len(list(tmp_path.glob("*.json"))) == 2
    cached = next(tmp_path.glob("*-n3-*.json"))
    cached.write_text("{not json")  # a broken cache is measured again, not an error
    local_profile(3, cache_dir=tmp_path, threads=1)
    assert len(calls) == 16
    with pytest.raises(ConfigError, match="comm_probe"):
        local_profile(3, cache_dir=tmp_path, threads=1, comm_probe=lambda: -1.0)
    with pytest.raises(ConfigError, match="nproc"):
        local_profile(0, cache_dir=tmp_path)
    assert p.with_devices(1).device_memory == p.host_memory  # CPU: processes share host memory


def test_narrow_transforms_run_at_the_narrow_rate_and_interpolate_to_the_square_one():
    """16 columns or fewer: the narrow rate; 256 or more: gemm_rate; geometric between."""
    base = PROFILES["dgx-a100"]
    assert base.gemm_rate_at(16) == base.gemm_rate  # no narrow rate measured: one rate
    p = dataclasses.replace(base, narrow_gemm_rate=base.gemm_rate / 4)
    assert p.gemm_rate_at(8) == p.gemm_rate_at(16) == pytest.approx(base.gemm_rate / 4)
    assert p.gemm_rate_at(64) == pytest.approx(base.gemm_rate / 2)  # halfway in log2(width)
    assert p.gemm_rate_at(256) == p.gemm_rate_at(4096) == base.gemm_rate
    again = type(p).from_dict(p.to_dict())
    assert again.narrow_gemm_rate == p.narrow_gemm_rate
    with pytest.raises(ConfigError, match="narrow_gemm_rate"):
        dataclasses.replace(base, narrow_gemm_rate=-1.0)
