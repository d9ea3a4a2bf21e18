"""Hardware profiles: what a machine offers the cost model, as typed data.

A :class:`HardwareProfile` describes one kind of host (and how many of them): its devices and
their memory, the host's memory, the bandwidth of every link kind the traffic meter records
(:data:`LINK_KINDS`, the names of :mod:`fleetgnn.distributed.traffic` and ``metrics.jsonl``), the
device-to-device bandwidth matrix of one host, and compute rates. Every number is in bytes,
bytes/s or operations/s:

==================  ============================================================================
field               meaning
==================  ============================================================================
``bandwidth.local`` device memory bandwidth, bytes read + written per second (the vendors' and
                    STREAM's convention): copying ``n`` bytes within a device moves ``2 n``
``bandwidth.peer``  bytes/s ONE device sends to all its peers at once: an NVSwitch port, the
                    sum of its NVLinks, or its PCIe link when peer traffic goes via the host
``bandwidth.h2d``,  host -> device / device -> host bytes/s PER DEVICE while every device of
``bandwidth.d2h``   the host transfers at once (devices behind one PCIe switch share its uplink)
``bandwidth.net``   bytes/s one host sends to other hosts (all its NICs together)
``bandwidth.disk``  bytes/s of sequential reads from the host's local storage
``peer[i][j]``      bytes/s device ``i`` sends to device ``j`` over their direct link when that
                    pair alone communicates; ``0``: no direct link, traffic is staged through
                    host memory at ``min(d2h, h2d)`` (:meth:`~HardwareProfile.peer_bandwidth`).
                    The diagonal is ``bandwidth.local``. Links are two-way; rates may differ
                    per direction (XGNN's placement solver takes this matrix as it is)
``gather_rate``     bytes/s of rows gathered at random indices from device memory (rows of a
                    few hundred bytes), counting each gathered byte once
``spmm_rate``       multiply-adds/s of sparse aggregation: edges x feature width per second
``gemm_rate``       flop/s of dense float32 matrix products (``2 m n k`` flop each)
``elementwise_rate`` elements/s of fleetgnn's keyed dropout on a large tensor (hashing each
                    element's key; default ``local / 12``: read, write, one mask byte)
``layer_overhead``  seconds of framework work per layer and step whatever its size: the
                    forward and backward of a tiny layer (dropout, transform, aggregation,
                    activation), Python and kernel launches (default: per ``kind``)
``param_overhead``  seconds of the optimizer step per parameter tensor, whatever its size
                    (default: per ``kind``)
==================  ============================================================================

Built-in profiles (:data:`PROFILES`; every number's source is in a comment below and in the
profile's ``source``):

=====================  ==========================================================================
name                   machine
=====================  ==========================================================================
``dgx-a100``           8x A100-SXM4-40GB on NVSwitch, 1 TB host (MGG's and WholeGraph's machine)
``dgx1-v100``          8x V100-SXM2-16GB, asymmetric hybrid cube-mesh NVLink 25/50 GB/s, 256 GB
                       host (XGNN's machine)
``4xa100-80g-nvlink``  4x A100-SXM4-80GB, NVLink 3 (4 links per pair), PCIe 4, 512 GB host
                       (HongTu's machine)
``4x3090ti-pcie``      4x RTX 3090 Ti 24 GB on PCIe 3.0, no NVLink, 192 GB host (GSplit's machine)
``h100``               1x H100 80GB SXM (one GPU's share of an 8-GPU HGX/DGX H100 host)
``h200``               1x H200 141GB SXM (one GPU's share of an 8-GPU HGX/DGX H200 host)
=====================  ==========================================================================

:func:`local_profile` measures the current machine (CPU processes as devices) with a short
calibration cached per machine; :func:`load_profile` resolves a built-in name, ``"local"`` or a
user-written YAML file (:meth:`HardwareProfile.from_yaml`).
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import math
import os
import platform
import socket
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np
import torch
import yaml

from fleetgnn.config.suggest import nearest
from fleetgnn.config.textfile import load_yaml_file
from fleetgnn.config.topology import DGX1_V100_LINKS
from fleetgnn.config.units import parse_bytes
from fleetgnn.errors import ConfigError
from fleetgnn.ops import Adjacency, gspmm

#: Link kinds of the traffic meter, in report order (the same tuple as
#: :data:`fleetgnn.distributed.traffic.LINK_KINDS`, which this layer may not import).
LINK_KINDS: tuple[str, ...] = ("local", "peer", "h2d", "d2h", "net", "disk")

#: Link kinds every profile states; ``peer`` may be left out (see :class:`HardwareProfile`).
REQUIRED_LINKS: tuple[str, ...] = ("local", "h2d", "d2h", "net", "disk")

KINDS: tuple[str, ...] = ("gpu", "cpu")

#: Default fixed costs (s) of a profile that does not state them. GPU: a layer's forward and
#: backward launch some 30 kernels at ~5 us each from Python; Adam's step (foreach) about 20 us
#: per parameter tensor. CPU: what :func:`local_profile` measures on a 2-core EPYC VM.
FIXED_OVERHEADS: dict[str, dict[str, float]] = {
    "gpu": {"layer_overhead": 1.5e-4, "param_overhead": 2e-5},
    "cpu": {"layer_overhead": 1e-3, "param_overhead": 3e-5},
}

GB = 1e9  # bandwidths: decimal units, as vendors quote them
GiB = 2**30  # memory sizes: binary units (HBM and DIMMs come in powers of two)
MiB = 2**20
TFLOPS = 1e12


# ----------------------------------------------------------------------------------- validation
def _fail(field: str, value: Any, rule: str) -> ConfigError:
    return ConfigError(f"{field}={_short(value)} is invalid: {rule}")


def _short(value: Any, limit: int = 60) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _number(field: str, value: Any, rule: str) -> float:
    """A finite float from a number or a numeric string (YAML reads ``1e12`` as a string)."""
    if isinstance(value, bool):
        raise _fail(field, value, rule)
    if isinstance(value, (int, float, np.integer, np.floating)):
        out = float(value)
    elif isinstance(value, str):
        try:
            out = float(value.strip())
        except ValueError:
            raise _fail(field, value, rule) from None
    else:
        raise _fail(field, value, rule)
    if not math.isfinite(out):
        raise _fail(field, value, rule)
    return out


def _positive(field: str, value: Any, what: str) -> float:
    rule = f"must be a positive number of {what}"
    out = _number(field, value, rule)
    if out <= 0:
        raise _fail(field, value, rule)
    return out


def _bytes(field: str, value: Any) -> int:
    """Positive byte count: an int, a float, or a string with a unit (``"40GiB"``)."""
    rule = "must be a positive byte count (e.g. 42949672960 or '40GiB')"
    if isinstance(value, str):
        try:
            out = parse_bytes(value, field)
        except ConfigError:
            raise _fail(field, value, rule) from None
    else:
        out = int(_number(field, value, rule))
    if out <= 0:
        raise _fail(field, value, rule)
    return out


def _rate(field: str, value: Any, *, zero_ok: bool = False) -> float:
    """Bytes/s: a number, or a string with a byte unit and an optional ``/s`` (``"25GB/s"``)."""
    sign = "non-negative" if zero_ok else "positive"
    rule = f"must be a {sign} bandwidth in bytes/s (e.g. 25e9 or '25GB/s')"
    if isinstance(value, str) and not _is_float(value):
        text = value.strip()
        text = text[:-2] if text.lower().endswith("/s") else text
        try:
            out = float(parse_bytes(text, field))
        except ConfigError:
            raise _fail(field, value, rule) from None
    else:
        out = _number(field, value, rule)
    if out < 0 or (out == 0 and not zero_ok):
        raise _fail(field, value, rule)
    return out


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _count(field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise _fail(field, value, "must be an integer >= 1")
    return int(value)


def _check_bandwidth(value: Any) -> dict[str, float]:
    if not isinstance(value, Mapping):
        raise _fail(
            "bandwidth", value, "must be a mapping from link kind to bytes/s (e.g. {h2d: 25e9})"
        )
    unknown = [k for k in value if k not in LINK_KINDS]
    if unknown:
        raise ConfigError(
            f"bandwidth.{unknown[0]} is not a link kind; valid kinds: {', '.join(LINK_KINDS)}"
        )
    missing = [k for k in REQUIRED_LINKS if k not in value]
    if missing:
        raise ConfigError(
            f"bandwidth.{missing[0]} is missing; give bytes/s for every link kind: "
            f"{', '.join(REQUIRED_LINKS)} (peer optional)"
        )
    return {k: _rate(f"bandwidth.{k}", value[k]) for k in LINK_KINDS if k in value}


def _check_peer(value: Any, n: int, local: float) -> tuple[tuple[float, ...], ...]:
    shape_rule = (
        f"must be a {n} x {n} matrix (num_devices={n}) of bytes/s, one row per device, "
        "0 where two devices have no direct link"
    )
    if value is None and n == 1:
        return ((local,),)
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (Sequence, np.ndarray)):
        raise _fail("peer", value, shape_rule)
    rows = list(value)
    if len(rows) != n:
        raise ConfigError(f"peer has {len(rows)} rows, expected {n}: it {shape_rule}")
    out: list[tuple[float, ...]] = []
    for i, row in enumerate(rows):
        if isinstance(row, (str, bytes, Mapping)) or not isinstance(row, (Sequence, np.ndarray)):
            raise _fail(f"peer[{i}]", row, shape_rule)
        row = list(row)
        if len(row) != n:
            raise ConfigError(f"peer[{i}] has {len(row)} entries, expected {n}: peer {shape_rule}")
        vals = []
        for j, v in enumerate(row):
            if i == j:
                x = local if v is None else _rate(f"peer[{i}][{i}]", v, zero_ok=True)
                if x != 0 and not math.isclose(x, local, rel_tol=1e-6):
                    raise _fail(
                        f"peer[{i}][{i}]",
                        v,
                        f"the diagonal is the device's own memory bandwidth, bandwidth.local="
                        f"{local:.6g} (write that, or 0 to fill it in)",
                    )
                vals.append(local)
            else:
                vals.append(_rate(f"peer[{i}][{j}]", v, zero_ok=True))
        out.append(tuple(vals))
    for i in range(n):
        for j in range(i + 1, n):
            if (out[i][j] > 0) != (out[j][i] > 0):
                raise ConfigError(
                    f"peer[{i}][{j}]={out[i][j]:.6g} but peer[{j}][{i}]={out[j][i]:.6g}: links "
                    "are two-way, give both directions a rate (they may differ) or neither"
                )
    return tuple(out)


def _staged(bandwidth: Mapping[str, float]) -> float:
    """Device-to-device rate without a direct link: through host memory, d2h then h2d."""
    return min(bandwidth["h2d"], bandwidth["d2h"])


def _peer_total(peer: Sequence[Sequence[float]], bandwidth: Mapping[str, float]) -> float:
    """Default ``bandwidth.peer``: the largest sum of one device's direct links, else staged."""
    n = len(peer)
    direct = max((sum(peer[i][j] for j in range(n) if j != i) for i in range(n)), default=0.0)
    return direct if direct > 0 else _staged(bandwidth)


def _fmt_rate(x: float, unit: str = "B/s") -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


# ------------------------------------------------------------------------------------- profile
@dataclasses.dataclass(frozen=True, kw_only=True)
class HardwareProfile:
    """One kind of host (``num_hosts`` of them): devices, memory, links, compute rates.

    The conventions of every field are in the module docstring's table. Constructing a profile
    validates and normalises it: numeric strings are accepted (``"25GB/s"``, ``"40GiB"``,
    ``"1e12"``), ``bandwidth`` becomes a read-only mapping with a ``peer`` entry (default: the
    largest sum of one device's direct links, or ``min(h2d, d2h)`` without any), ``peer``
    becomes a tuple of tuples with ``bandwidth.local`` on its diagonal.

    Attributes:
        name: Profile name (a built-in's key, ``"local"``, or the user's).
        kind: ``"gpu"`` or ``"cpu"`` (CPU processes act as devices sharing host memory).
        num_devices: Devices per host, the ranks one host runs.
        num_hosts: Hosts, linked by ``bandwidth.net``.
        device_memory: Bytes of memory per device.
        host_memory: Bytes of memory per host.
        bandwidth: Bytes/s per link kind: ``local``, ``peer`` (optional), ``h2d``, ``d2h``,
            ``net``, ``disk``.
        peer: ``num_devices x num_devices`` bytes/s between the devices of one host, ``0``
            where two devices have no direct link; the diagonal is ``bandwidth.local``.
            ``None`` is accepted for one device.
        gather_rate: Bytes/s of random row gathers from device memory.
        spmm_rate: Multiply-adds/s of sparse aggregation (edges x feature width per second).
        gemm_rate: Flop/s of dense float32 matrix products.
        source: Where the numbers come from.

    Example:
        >>> p = PROFILES["dgx1-v100"]
        >>> p.peer_bandwidth(0, 3) / 1e9, p.peer_bandwidth(0, 1) / 1e9
        (50.0, 25.0)
        >>> p.with_devices(4).min_peer_bandwidth() / 1e9
        25.0
    """

    name: str
    kind: str
    num_devices: int
    num_hosts: int = 1
    device_memory: int
    host_memory: int
    bandwidth: Mapping[str, float]
    peer: tuple[tuple[float, ...], ...] | None = None
    gather_rate: float
    spmm_rate: float
    gemm_rate: float
    elementwise_rate: float | None = None
    layer_overhead: float | None = None
    param_overhead: float | None = None
    source: str = ""

    #: Fields a profile file must give (the others have defaults).
    REQUIRED: ClassVar[tuple[str, ...]] = (
        "name",
        "kind",
        "num_devices",
        "device_memory",
        "host_memory",
        "bandwidth",
        "gather_rate",
        "spmm_rate",
        "gemm_rate",
    )

    def __post_init__(self) -> None:
        try:
            self._validate()
        except ConfigError as e:
            raise ConfigError(f"hardware profile {_short(self.name, 40)}: {e}") from None

    def _validate(self) -> None:
        set_ = object.__setattr__
        if not isinstance(self.name, str) or not self.name.strip():
            raise _fail("name", self.name, "must be a non-empty string")
        if self.kind not in KINDS:
            raise _fail("kind", self.kind, f"must be one of {', '.join(KINDS)}")
        set_(self, "num_devices", _count("num_devices", self.num_devices))
        set_(self, "num_hosts", _count("num_hosts", self.num_hosts))
        set_(self, "device_memory", _bytes("device_memory", self.device_memory))
        set_(self, "host_memory", _bytes("host_memory", self.host_memory))
        bw = _check_bandwidth(self.bandwidth)
        peer = _check_peer(self.peer, self.num_devices, bw["local"])
        bw.setdefault("peer", _peer_total(peer, bw))
        set_(self, "bandwidth", MappingProxyType({k: bw[k] for k in LINK_KINDS}))
        set_(self, "peer", peer)
        set_(self, "gather_rate", _positive("gather_rate", self.gather_rate, "bytes/s"))
        set_(self, "spmm_rate", _positive("spmm_rate", self.spmm_rate, "multiply-adds/s"))
        set_(self, "gemm_rate", _positive("gemm_rate", self.gemm_rate, "flop/s"))
        if self.elementwise_rate is None:
            set_(self, "elementwise_rate", bw["local"] / 12.0)
        set_(self, "elementwise_rate", _positive("elementwise_rate", self.elementwise_rate, "/s"))
        for name, default in FIXED_OVERHEADS[self.kind].items():
            value = default if getattr(self, name) is None else getattr(self, name)
            set_(self, name, _number(name, value, "must be a number of seconds >= 0"))
            if not 0 <= getattr(self, name) < 10:
                raise _fail(name, value, "must be seconds in [0, 10)")
        if not isinstance(self.source, str):
            raise _fail("source", self.source, "must be a string")

    # ------------------------------------------------------------------------------- queries
    @property
    def world_size(self) -> int:
        """Devices over all hosts, ``num_hosts * num_devices``."""
        return self.num_hosts * self.num_devices

    def _check_device(self, name: str, i: Any) -> int:
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise ConfigError(f"{name}={i!r} is invalid: must be a device index (an int)")
        if not 0 <= i < self.num_devices:
            raise ConfigError(
                f"{name}={i} is out of range: profile {self.name!r} has devices "
                f"0..{self.num_devices - 1}"
            )
        return int(i)

    def peer_bandwidth(self, i: int, j: int) -> float:
        """Bytes/s device ``i`` sends to device ``j`` of the same host.

        ``bandwidth.local`` for ``i == j``; the direct link's rate where there is one; else the
        rate of staging through host memory, ``min(d2h, h2d)``.

        Raises:
            ConfigError: A device index outside ``[0, num_devices)``.
        """
        i, j = self._check_device("i", i), self._check_device("j", j)
        assert self.peer is not None  # normalised in __post_init__
        if i == j:
            return self.bandwidth["local"]
        direct = self.peer[i][j]
        return direct if direct > 0 else _staged(self.bandwidth)

    def min_peer_bandwidth(self) -> float:
        """The slowest device-to-device rate over all ordered pairs (``local`` for one device)."""
        n = self.num_devices
        if n == 1:
            return self.bandwidth["local"]
        return min(self.peer_bandwidth(i, j) for i in range(n) for j in range(n) if i != j)

    def mean_peer_bandwidth(self, devices: Iterable[int] | None = None) -> float:
        """Arithmetic mean of :meth:`peer_bandwidth` over ordered pairs of distinct ``devices``.

        Args:
            devices: Device indices (default: all); fewer than two give ``bandwidth.local``.

        Raises:
            ConfigError: An index outside ``[0, num_devices)`` or a repeated index.
        """
        devs = list(range(self.num_devices)) if devices is None else list(devices)
        devs = [self._check_device("devices[]", d) for d in devs]
        if len(set(devs)) != len(devs):
            raise ConfigError(f"devices={devs} is invalid: an index appears twice")
        pairs = [self.peer_bandwidth(i, j) for i in devs for j in devs if i != j]
        return float(np.mean(pairs)) if pairs else self.bandwidth["local"]

    def with_devices(self, n: int) -> HardwareProfile:
        """This profile restricted to its first ``n`` devices per host (to plan fewer ranks).

        The peer matrix is cut to ``n x n``; ``bandwidth.peer`` is capped by what the remaining
        direct links carry; a CPU profile's ``device_memory`` becomes ``host_memory // n`` (its
        processes share host memory). Other per-device numbers are kept: h2d/d2h stay the rates
        with every device transferring, a conservative choice where devices share PCIe uplinks.

        Raises:
            ConfigError: ``n`` outside ``[1, num_devices]``.
        """
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
            raise ConfigError(f"with_devices(n={n!r}): n must be an int")
        if not 1 <= n <= self.num_devices:
            raise ConfigError(
                f"with_devices(n={n}): profile {self.name!r} has {self.num_devices} devices per "
                f"host; choose 1..{self.num_devices}"
            )
        n = int(n)
        if n == self.num_devices:
            return self
        assert self.peer is not None
        peer = tuple(tuple(row[:n]) for row in self.peer[:n])
        bw = dict(self.bandwidth)
        if n > 1:
            bw["peer"] = min(bw["peer"], _peer_total(peer, bw))
        memory = self.host_memory // n if self.kind == "cpu" else self.device_memory
        return dataclasses.replace(
            self,
            num_devices=n,
            device_memory=memory,
            bandwidth=bw,
            peer=peer,
            source=f"{self.source} [first {n} of its {self.num_devices} devices]".strip(),
        )

    # ---------------------------------------------------------------------------- conversion
    def to_dict(self) -> dict[str, Any]:
        """A plain JSON/YAML-ready dict of every field (``peer`` as a list of lists)."""
        assert self.peer is not None
        return {
            "name": self.name,
            "kind": self.kind,
            "num_devices": self.num_devices,
            "num_hosts": self.num_hosts,
            "device_memory": self.device_memory,
            "host_memory": self.host_memory,
            "bandwidth": {k: float(v) for k, v in self.bandwidth.items()},
            "peer": [[float(v) for v in row] for row in self.peer],
            "gather_rate": self.gather_rate,
            "spmm_rate": self.spmm_rate,
            "gemm_rate": self.gemm_rate,
            "elementwise_rate": self.elementwise_rate,
            "layer_overhead": self.layer_overhead,
            "param_overhead": self.param_overhead,
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> HardwareProfile:
        """Build and validate a profile from a mapping (:meth:`to_dict`'s shape).

        Raises:
            ConfigError: One line naming the field: an unknown or missing field, a value of the
                wrong type, a non-positive number, a peer matrix of the wrong shape.
        """
        if not isinstance(d, Mapping):
            raise ConfigError(
                f"a hardware profile must be a mapping of fields (got {type(d).__name__})"
            )
        fields = [f.name for f in dataclasses.fields(cls)]
        unknown = [k for k in d if k not in fields]
        if unknown:
            hint = nearest(str(unknown[0]), fields)
            tip = f" (did you mean {hint!r}?)" if hint is not None else ""
            raise ConfigError(
                f"unknown hardware profile field {unknown[0]!r}{tip}; valid fields: "
                f"{', '.join(fields)}"
            )
        missing = [k for k in cls.REQUIRED if k not in d]
        if missing:
            raise ConfigError(
                f"hardware profile field {missing[0]!r} is missing; required fields: "
                f"{', '.join(cls.REQUIRED)} (optional: num_hosts, peer, elementwise_rate, "
                f"layer_overhead, param_overhead, source)"
            )
        return cls(**{str(k): v for k, v in d.items()})

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str]) -> HardwareProfile:
        """Read a user-written profile (YAML, or JSON) with the fields of :meth:`to_dict`.

        Byte counts and bandwidths may carry units (``device_memory: 24GiB``,
        ``h2d: 12GB/s``); ``source`` defaults to the file's path.

        Raises:
            ConfigError: One line starting with the path: an unreadable file, invalid YAML, or
                any error of :meth:`from_dict`.
        """
        p = Path(path)
        fix = f"give a YAML file, a built-in name ({', '.join(PROFILES)}) or 'local'"
        raw = load_yaml_file(p, "hardware profile file", fix=fix)  # bounded, one line
        if isinstance(raw, Mapping) and not raw.get("source"):
            raw = {**raw, "source": f"user profile {p}"}
        try:
            return cls.from_dict(raw)
        except ConfigError as e:
            raise ConfigError(f"{p}: {e}") from None

    def to_yaml(self, path: str | os.PathLike[str]) -> Path:
        """Write :meth:`to_dict` as YAML to ``path`` (a template for a user profile)."""
        p = Path(path)
        p.write_text(yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=None))
        return p

    def __reduce__(self) -> tuple[Callable[[dict[str, Any]], HardwareProfile], tuple[Any, ...]]:
        return (_from_dict, (self.to_dict(),))

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_dict(), sort_keys=True))

    def __repr__(self) -> str:
        hosts = f"{self.num_hosts} hosts x " if self.num_hosts > 1 else ""
        bw = self.bandwidth
        peers = (
            f"peer {_fmt_rate(self.min_peer_bandwidth())} pair min, {_fmt_rate(bw['peer'])} total"
            if self.num_devices > 1
            else "no peers"
        )
        return (
            f"HardwareProfile({self.name!r}: {hosts}{self.num_devices} {self.kind} x "
            f"{self.device_memory / GiB:.3g} GiB, host {self.host_memory / GiB:.4g} GiB, "
            f"local {_fmt_rate(bw['local'])}, {peers}, "
            f"h2d {_fmt_rate(bw['h2d'])}, net {_fmt_rate(bw['net'])}, "
            f"disk {_fmt_rate(bw['disk'])}, gather {_fmt_rate(self.gather_rate)}, "
            f"spmm {_fmt_rate(self.spmm_rate, 'MAC/s')}, "
            f"gemm {_fmt_rate(self.gemm_rate, 'FLOP/s')})"
        )


def _from_dict(d: dict[str, Any]) -> HardwareProfile:
    return HardwareProfile.from_dict(d)


# ----------------------------------------------------------------------------------- built-ins
# Derating rules shared by the GPU profiles (each number's own source is beside it):
# - HBM: 90% of the datasheet bandwidth is achievable by a streaming copy. Measured on this
#   workplace's lent GPUs (.library/device/KINDS.md): an H100 SXM copied at 3.0 TB/s of 3.35, an
#   H200 at 4.3 TB/s of 4.8 (bytes read + written), both ~0.9.
# - Random row gathers: a gather reads and writes each row once, so at best local / 2; rows of a
#   few hundred bytes lose another ~20% to partial sectors -> 0.4 x local (an estimate).
# - SpMM is memory-bound: rates scale with local bandwidth from one calibration point, HongTu
#   Table 5 on 1x A100-80GB: DGL's 2-layer GCN (hidden 256) on ogbn-products takes 0.27 s/epoch
#   for 123.7M directed edges x (100 + 47 forward + 47 backward) = 2.4e10 multiply-adds; with
#   ~25 ms of GEMMs taken out that is ~1.0e11 MAC/s at a local bandwidth of 1.8 TB/s. A lower
#   bound (all other epoch time is charged to SpMM); reddit's denser graph gives ~3.6e11.
# - PCIe: ~80% of the raw rate moves pinned memory (Gen3 x16: 12 of 15.75 GB/s; Gen4: 25 of
#   31.5; Gen5: 50 of 63), halved where two GPUs share one switch uplink and all transfer.
# - Dense float32 GEMM: PyTorch computes float32 matmuls without TF32 by default
#   (torch.backends.cuda.matmul.allow_tf32 = False), so the rate is the FP32 (non-tensor) peak
#   derated: ~90% for cuBLAS SGEMM on V100/A100, ~75% on Hopper and GA102 (estimates).
_HBM_EFFICIENCY = 0.9
_GATHER_PER_LOCAL = 0.4
_SPMM_PER_LOCAL = 1.0e11 / 1.8e12  # multiply-adds per byte/s of local bandwidth (see above)


def _gpu(
    name: str,
    *,
    num_devices: int,
    device_memory: int,
    host_memory: int,
    local: float,
    h2d: float,
    net: float,
    disk: float,
    peer: Sequence[Sequence[float]] | None,
    peer_total: float | None,
    gemm: float,
    source: str,
) -> HardwareProfile:
    bandwidth = {"local": local, "h2d": h2d, "d2h": h2d, "net": net, "disk": disk}
    if peer_total is not None:
        bandwidth["peer"] = peer_total
    derived = (
        f" Derived: d2h = h2d; gather_rate = {_GATHER_PER_LOCAL} x local (a gather reads and "
        "writes each row; partial sectors); spmm_rate = local x 1.0e11/1.8e12 MAC/s per B/s, "
        "calibrated on HongTu Table 5 (DGL GCN on ogbn-products, 1x A100-80GB, 0.27 s/epoch = "
        "2.4e10 multiply-adds, a lower bound); gemm_rate = float32 without TF32 (PyTorch's "
        "default), derated from the datasheet peak."
    )
    return HardwareProfile(
        name=name,
        kind="gpu",
        num_devices=num_devices,
        device_memory=device_memory,
        host_memory=host_memory,
        bandwidth=bandwidth,
        peer=peer,
        gather_rate=_GATHER_PER_LOCAL * local,
        spmm_rate=_SPMM_PER_LOCAL * local,
        gemm_rate=gemm,
        source=source + derived,
    )


def _uniform(n: int, local: float, link: float) -> list[list[float]]:
    return [[local if i == j else link for j in range(n)] for i in range(n)]


# The 8x V100 hybrid cube-mesh (XGNN Sec. 6): the store's "dgx1-v100" topology, one copy.
_V100_LOCAL = 700 * GB  # XGNN notes' local bandwidth (V100 HBM2 900 GB/s datasheet, ~78%)


def _dgx1_v100_peer() -> list[list[float]]:
    m = _uniform(8, _V100_LOCAL, 0.0)
    for link in DGX1_V100_LINKS.split():
        ij, rate = link.split(":")
        i, j = (int(v) for v in ij.split("-"))
        m[i][j] = m[j][i] = float(rate) * GB
    return m


def _builtin_profiles() -> dict[str, HardwareProfile]:
    out: dict[str, HardwareProfile] = {}

    # DGX A100 (MGG Sec. 5, WholeGraph Sec. IV): 8x A100-SXM4-40GB, 6 NVSwitches, 2x EPYC 7742,
    # 1 TB host memory (MGG: "1TB host memory"; DGX A100 datasheet).
    a100_40_local = _HBM_EFFICIENCY * 1555 * GB  # A100 40GB datasheet: 1,555 GB/s HBM2
    out["dgx-a100"] = _gpu(
        "dgx-a100",
        num_devices=8,
        device_memory=40 * GiB,  # A100 40GB datasheet
        host_memory=1024 * GiB,  # MGG Sec. 5 / DGX A100 datasheet: 1 TB
        local=a100_40_local,
        # PCIe 4.0 x16 moves ~25 GB/s; WholeGraph Sec. IV: two GPUs (and two NICs) share each
        # PCIe 4 switch's x16 uplink, "each GPU can get only one half" -> 12.5 GB/s per GPU.
        h2d=12.5 * GB,
        # DGX A100 datasheet: 8x 200 Gb/s HDR InfiniBand for compute = 200 GB/s, 90% achievable
        net=180 * GB,
        # DGX A100 user guide: 15 TB internal NVMe (4x 3.84 TB U.2, RAID 0), ~6-7 GB/s each;
        # 20 GB/s for the array (estimate)
        disk=20 * GB,
        # NVSwitch: 12 NVLink 3 links = 300 GB/s per direction per GPU (600 GB/s bidirectional,
        # MGG / WholeGraph). WholeGraph Fig. 8 measured random gathers across the 8 GPUs at a
        # bus bandwidth of ~230 GB/s for rows >= 128 B: every pair gets that alone, and one GPU
        # gets it in total (the switch port is shared by its 7 peers).
        peer=_uniform(8, a100_40_local, 230 * GB),
        peer_total=230 * GB,
        gemm=17.5 * TFLOPS,  # A100 datasheet FP32 19.5 TFLOPS, ~90%
        source=(
            "DGX A100 as in MGG Sec. 5 and WholeGraph Sec. IV: 8x A100-SXM4-40GB (40 GiB, "
            "1,555 GB/s HBM2 datasheet -> 1.40 TB/s at 90%), NVSwitch 300 GB/s per direction "
            "per GPU with ~230 GB/s measured for random gathers (WholeGraph Fig. 8) per pair and "
            "per GPU in total, PCIe 4.0 x16 ~25 GB/s shared by two GPUs per switch -> 12.5 GB/s "
            "each (WholeGraph Sec. IV), 1 TB host (MGG), 8x HDR 200 Gb/s -> 180 GB/s net and "
            "4x 3.84 TB NVMe RAID 0 -> ~20 GB/s disk (DGX A100 datasheet/user guide, derated "
            "estimates), FP32 19.5 TFLOPS -> 17.5e12 flop/s."
        ),
    )

    # XGNN Sec. 6: 8x V100-SXM2-16GB in the asymmetric hybrid cube-mesh (Fig. 2b), one Xeon
    # Platinum 8163, 256 GB RAM. Network and disk are not stated: a DGX-1's.
    out["dgx1-v100"] = _gpu(
        "dgx1-v100",
        num_devices=8,
        device_memory=16 * GiB,  # XGNN Sec. 6: V100 16GB SXM2
        host_memory=256 * GiB,  # XGNN Sec. 6: 256GB RAM (a DGX-1 ships with 512 GB)
        local=_V100_LOCAL,
        # PCIe 3.0 x16 moves ~12 GB/s; the hybrid cube-mesh boards put two GPUs behind each
        # PCIe switch (DGX-1 V100 system architecture) -> 6 GB/s per GPU when all transfer
        h2d=6 * GB,
        net=45 * GB,  # DGX-1 datasheet: 4x 100 Gb/s EDR InfiniBand = 50 GB/s, 90%
        disk=1.8 * GB,  # DGX-1 datasheet: 4x 1.92 TB SSD RAID 0 (SATA, ~0.5 GB/s each), 90%
        peer=_dgx1_v100_peer(),  # XGNN notes' matrix; 0 = no NVLink (staged at 6 GB/s)
        peer_total=150 * GB,  # V100: 6 NVLink 2 links x 25 GB/s per direction (300 bidirectional)
        gemm=14 * TFLOPS,  # V100 SXM2 datasheet FP32 15.7 TFLOPS, ~90%
        source=(
            "XGNN Sec. 6: 8x V100-SXM2-16GB, Xeon 8163, 256 GB host; NVLink matrix of XGNN's "
            "DGX-1 topology (../shared/notes/xgnn.md golden test: 25/50 GB/s per direction, "
            "local 700 GB/s, 0 = no NVLink, staged through the host); 150 GB/s of NVLink per "
            "GPU (6 links x 25); PCIe 3.0 x16 ~12 GB/s shared by two GPUs per switch -> 6 GB/s "
            "each; net 4x EDR 100 Gb/s -> 45 GB/s and disk 4x SATA SSD RAID 0 -> 1.8 GB/s from "
            "the DGX-1 datasheet (not stated by XGNN); FP32 15.7 TFLOPS -> 14e12 flop/s."
        ),
    )

    # HongTu Sec. 7 (Environments) and Fig. 1: 4x A100 80GB, NVLink 3.0 "200GB/s inter-GPU
    # bandwidth" (4 links per pair: 100 GB/s per direction, 200 bidirectional), each GPU on its
    # own PCIe 4.0 link to a CPU ("up to 32GB/s"), 4x EPYC 7543, 512 GB (4 NUMA nodes x 128 GB).
    a100_80_local = _HBM_EFFICIENCY * 2039 * GB  # A100 80GB SXM datasheet: 2,039 GB/s HBM2e
    out["4xa100-80g-nvlink"] = _gpu(
        "4xa100-80g-nvlink",
        num_devices=4,
        device_memory=80 * GiB,  # HongTu: A100 (80GB)
        host_memory=512 * GiB,  # HongTu: 512GB DRAM
        local=a100_80_local,
        h2d=25 * GB,  # HongTu B_hg ~32 GB/s (PCIe 4.0 x16 raw), ~80% moves pinned memory
        net=11 * GB,  # not stated by HongTu: one 100 Gb/s NIC assumed, 90%
        disk=5 * GB,  # not stated: one PCIe 4.0 NVMe SSD assumed (~7 GB/s raw)
        # HongTu B_gg ~200 GB/s is the bidirectional rate of a pair's 4 NVLink 3 links: 100 GB/s
        # per direction, 90% achievable; one GPU reaches its 3 peers at 270 GB/s together.
        peer=_uniform(4, a100_80_local, 90 * GB),
        peer_total=270 * GB,
        gemm=17.5 * TFLOPS,  # A100 datasheet FP32 19.5 TFLOPS, ~90%
        source=(
            "HongTu Sec. 7: 4x A100-SXM4-80GB (80 GiB, 2,039 GB/s HBM2e datasheet -> 1.84 TB/s "
            "at 90%), NVLink 3.0 '200GB/s' = 4 links per pair = 100 GB/s per direction -> "
            "90 GB/s per pair and 270 GB/s per GPU to its 3 peers, each GPU on its own PCIe 4.0 "
            "link (B_hg ~32 GB/s raw) -> 25 GB/s, 512 GB host; network (one 100 Gb/s NIC -> "
            "11 GB/s) and disk (one PCIe 4.0 NVMe -> 5 GB/s) are assumptions, not in the paper; "
            "FP32 19.5 TFLOPS -> 17.5e12 flop/s."
        ),
    )

    # GSplit Sec. 5.1, the "PCIe" host: 4x RTX 3090 Ti 24 GB "connected using a PCIe 3.0 bus"
    # (the cards are PCIe 4.0, the Xeon Silver 4214R host is PCIe 3.0), no NVLink, 192 GB RAM.
    rtx_local = _HBM_EFFICIENCY * 1008 * GB  # RTX 3090 Ti: 1,008 GB/s GDDR6X
    out["4x3090ti-pcie"] = _gpu(
        "4x3090ti-pcie",
        num_devices=4,
        device_memory=24 * GiB,  # GSplit: 24 GB per GPU
        host_memory=192 * GiB,  # GSplit: "192 GB RAM" (read as the host's total)
        local=rtx_local,
        h2d=12 * GB,  # PCIe 3.0 x16 (GSplit), 15.75 GB/s raw, ~12 moves pinned memory
        net=1.1 * GB,  # not stated by GSplit: one 10 Gb/s Ethernet port assumed, 90%
        disk=3 * GB,  # not stated: one PCIe 3.0 NVMe SSD assumed (~3.5 GB/s raw)
        # No NVLink, and GeForce drivers do not enable PCIe peer-to-peer: device-to-device
        # traffic is staged through host memory (NCCL's shared-memory transport) at min(d2h, h2d)
        peer=_uniform(4, rtx_local, 0.0),
        peer_total=None,  # default: staged, 12 GB/s through the GPU's own PCIe link
        gemm=25 * TFLOPS,  # RTX 3090 Ti FP32 40 TFLOPS (dual-issue peak), SGEMM reaches ~60%
        source=(
            "GSplit Sec. 5.1 'PCIe' host: 4x RTX 3090 Ti (24 GiB, 1,008 GB/s GDDR6X -> 0.91 "
            "TB/s at 90%) on PCIe 3.0 (the paper's bus; the cards themselves are PCIe 4.0) -> "
            "12 GB/s per GPU, no NVLink and no GeForce PCIe peer-to-peer, so peer traffic is "
            "staged through host memory at 12 GB/s, 192 GB host; network (10 Gb/s Ethernet -> "
            "1.1 GB/s) and disk (one PCIe 3.0 NVMe -> 3 GB/s) are assumptions, not in the "
            "paper; FP32 40 TFLOPS peak -> ~25e12 flop/s for SGEMM (estimate)."
        ),
    )

    # One H100 SXM, with one GPU's share of an 8-GPU HGX/DGX H100 host (DGX H100 datasheet:
    # 2 TB memory, 8x ConnectX-7 400 Gb/s, 8x 3.84 TB NVMe U.2 data drives).
    h100_local = 3.0e12  # measured here (KINDS.md): device copy 3.0 TB/s of 3.35 datasheet
    out["h100"] = _gpu(
        "h100",
        num_devices=1,
        device_memory=81559 * MiB,  # nvidia-smi on this workplace's H100 80GB HBM3 (KINDS.md)
        host_memory=256 * GiB,  # 2 TB / 8 GPUs (DGX H100 datasheet)
        local=h100_local,
        h2d=50 * GB,  # PCIe 5.0 x16: 63 GB/s raw, ~80%
        net=45 * GB,  # one ConnectX-7 400 Gb/s per GPU = 50 GB/s, 90%
        disk=6 * GB,  # 1/8 of 8x 3.84 TB NVMe U.2 (~50 GB/s together; estimate)
        peer=None,
        peer_total=None,
        gemm=50 * TFLOPS,  # H100 SXM datasheet FP32 67 TFLOPS, ~75% for SGEMM (estimate)
        source=(
            "1x H100 80GB HBM3 SXM: 81,559 MiB and a 3.0 TB/s device copy measured on this "
            "workplace's lent H100 (.library/device/KINDS.md; datasheet 3.35 TB/s); one GPU's "
            "share of a DGX H100 (datasheet: 2 TB host / 8 = 256 GiB, ConnectX-7 400 Gb/s -> "
            "45 GB/s, 8x NVMe U.2 / 8 -> ~6 GB/s disk, estimate); PCIe 5.0 x16 -> 50 GB/s; FP32 "
            "67 TFLOPS -> ~50e12 flop/s for SGEMM (estimate)."
        ),
    )

    # One H200 SXM: the H100's chip with 141 GB HBM3e at 4.8 TB/s (datasheet), same host share.
    h200_local = 4.3e12  # measured here (KINDS.md): device copy 4.3 TB/s of 4.8 datasheet
    out["h200"] = _gpu(
        "h200",
        num_devices=1,
        device_memory=143771 * MiB,  # nvidia-smi on this workplace's H200 (KINDS.md); "141 GB"
        host_memory=256 * GiB,  # 2 TB / 8 GPUs (DGX H200 datasheet)
        local=h200_local,
        h2d=50 * GB,  # PCIe 5.0 x16: 63 GB/s raw, ~80%
        net=45 * GB,  # one ConnectX-7 400 Gb/s per GPU = 50 GB/s, 90%
        disk=6 * GB,  # 1/8 of 8x 3.84 TB NVMe U.2 (estimate)
        peer=None,
        peer_total=None,
        gemm=50 * TFLOPS,  # same FP32 rate as the H100 SXM (67 TFLOPS), ~75% (estimate)
        source=(
            "1x H200 141GB HBM3e SXM: 143,771 MiB and a 4.3 TB/s device copy measured on this "
            "workplace's lent H200 (.library/device/KINDS.md; datasheet 4.8 TB/s); one GPU's "
            "share of a DGX H200 (datasheet: 2 TB host / 8 = 256 GiB, ConnectX-7 400 Gb/s -> "
            "45 GB/s, ~6 GB/s disk share, estimate); PCIe 5.0 x16 -> 50 GB/s; the H100's FP32 "
            "67 TFLOPS -> ~50e12 flop/s for SGEMM (estimate)."
        ),
    )
    return out


#: Built-in profiles by name.
PROFILES: dict[str, HardwareProfile] = _builtin_profiles()


# ------------------------------------------------------------------------------- calibration
@dataclasses.dataclass(frozen=True)
class _Sizes:
    copy_bytes: int  # tensor copied for local/h2d/d2h
    table_bytes: int  # table random rows are gathered from
    gather_rows: int  # rows gathered per timing
    width: int  # feature width of gathers and SpMM (float32)
    spmm_nodes: int
    spmm_edges: int
    gemm_n: int  # n x n @ n x n
    disk_bytes: int
    repeats: int


_FULL = _Sizes(64 * MiB, 64 * MiB, 131072, 64, 100_000, 1_000_000, 1024, 64 * MiB, 3)
_QUICK = _Sizes(4 * MiB, 4 * MiB, 8192, 64, 8_000, 50_000, 256, 4 * MiB, 2)


def _best_time(fn: Callable[[], object], repeats: int) -> float:
    """Seconds of the fastest of ``repeats`` calls after one warm-up (positive)."""
    fn()
    best = math.inf
    for _ in range(max(1, repeats)):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return max(best, 1e-9)


def _measure_copy(nbytes: int, repeats: int) -> float:
    """Bytes/s copied by ``Tensor.copy_`` of ``nbytes`` (each byte read once, written once)."""
    src = torch.empty(nbytes // 4, dtype=torch.float32).fill_(1.0)
    dst = torch.empty_like(src).fill_(0.0)  # touch both so page faults stay out of the timing
    return src.numel() * 4 / _best_time(lambda: dst.copy_(src), repeats)


def _measure_gather(table_bytes: int, rows: int, width: int, repeats: int) -> float:
    """Bytes/s of ``index_select`` of ``rows`` random rows of ``width`` float32 (output bytes)."""
    g = torch.Generator().manual_seed(0)
    n = max(1, table_bytes // (4 * width))
    table = torch.rand(n, width, generator=g)
    idx = torch.randint(0, n, (rows,), generator=g)
    return rows * width * 4 / _best_time(lambda: torch.index_select(table, 0, idx), repeats)


def _measure_spmm(nodes: int, edges: int, width: int, repeats: int) -> float:
    """Multiply-adds/s of :func:`fleetgnn.ops.gspmm` (sum) on a uniform random graph."""
    g = torch.Generator().manual_seed(0)
    src = torch.randint(0, nodes, (edges,), generator=g)
    dst = torch.randint(0, nodes, (edges,), generator=g)
    adj = Adjacency.from_edges(src, dst, nodes, nodes)
    x = torch.rand(nodes, width, generator=g)
    with torch.no_grad():
        return edges * width / _best_time(lambda: gspmm(adj, x, "sum"), repeats)


def _measure_gemm(n: int, repeats: int) -> float:
    """Flop/s of ``torch.mm`` of two ``n x n`` float32 matrices (``2 n^3`` flop)."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.rand(n, n, generator=g), torch.rand(n, n, generator=g)
    return 2.0 * n**3 / _best_time(lambda: torch.mm(a, b), repeats)


def _measure_overheads(repeats: int) -> dict[str, float]:
    """Keyed dropout's elements/s on a 4M-element tensor, and the fixed costs of a step.

    ``layer``: forward and backward of one tiny layer (32 nodes, 128 edges, width 16: keyed
    dropout, a dense transform, :func:`fleetgnn.ops.gspmm`, ReLU), where the size costs
    nothing and Python and the framework everything. ``param``: Adam's step and ``zero_grad``
    over 16 tiny parameter tensors, per tensor.
    """
    from fleetgnn.ops.random import keyed_dropout

    g = torch.Generator().manual_seed(0)
    big = torch.rand(2048, 2048, generator=g)  # 16 MiB: beyond the caches, as features are
    big_ids = torch.arange(2048)
    rate = big.numel() / _best_time(lambda: keyed_dropout(big, 0.5, 0, 1, 0, big_ids), repeats)
    n, e, w = 32, 128, 16
    adj = Adjacency.from_edges(
        torch.randint(0, n, (e,), generator=g), torch.randint(0, n, (e,), generator=g), n, n
    )
    x = torch.rand(n, w, generator=g, requires_grad=True)
    weight = torch.rand(w, w, generator=g, requires_grad=True)
    ids = torch.arange(n)

    def layer() -> None:
        h = keyed_dropout(x, 0.5, 0, 1, 0, ids) @ weight
        gspmm(adj, h, "sum").relu().sum().backward()

    params = [torch.rand(4, generator=g, requires_grad=True) for _ in range(16)]
    opt = torch.optim.Adam(params)
    for q in params:
        q.grad = torch.ones_like(q)

    def step() -> None:
        opt.step()
        opt.zero_grad(set_to_none=False)

    reps = max(repeats, 20)  # microsecond timings: more repeats against noise
    return {
        "keyed_dropout": rate,
        "layer_overhead": _best_time(layer, reps),
        "param_overhead": _best_time(step, reps) / len(params),
    }


def _read_file(path: str, buf: bytearray) -> int:
    view, total = memoryview(buf), 0
    with open(path, "rb", buffering=0) as f:
        while True:
            got = f.readinto(view)
            if not got:
                return total
            total += got


def _measure_disk(nbytes: int, directory: Path) -> tuple[float, str]:
    """Bytes/s reading back a fresh ``nbytes`` file, and how it was read (for ``source``).

    The file is written, fsync'ed and dropped from the page cache with
    ``posix_fadvise(POSIX_FADV_DONTNEED)`` (no root needed; the kernel drops clean pages where
    it honours the advice). When the cold read is not clearly slower than a second, cached
    read, the pages were not dropped (or the file system lives in memory): the rate is then a
    page-cache read and the note says so.
    """
    directory.mkdir(parents=True, exist_ok=True)
    block = os.urandom(min(nbytes, 4 * MiB))
    fd, path = tempfile.mkstemp(prefix="fleetgnn-disk-", dir=directory)
    try:
        written = 0
        while written < nbytes:
            written += os.write(fd, block[: nbytes - written])
        os.fsync(fd)
        advised = hasattr(os, "posix_fadvise")
        if advised:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        buf = bytearray(len(block))
        t = time.perf_counter()
        _read_file(path, buf)
        cold = nbytes / max(time.perf_counter() - t, 1e-9)
        warm = nbytes / _best_time(lambda: _read_file(path, buf), 1)
    finally:
        os.close(fd)
        os.unlink(path)
    size = f"{nbytes / MiB:.0f} MiB file in {directory}"
    if advised and cold < 0.8 * warm:
        return cold, f"read of a {size} after fsync + posix_fadvise(DONTNEED) (from the device)"
    return cold, (
        f"BUFFERED read of a {size}: the file stayed in the page cache (dropping it needs root "
        "or posix_fadvise, which this kernel/file system did not honour), so this is the "
        "page-cache rate and overstates the disk"
    )


def _calibrate(sizes: _Sizes, directory: Path) -> dict[str, Any]:
    """Run every measurement; returns raw rates and notes (the cache's ``measurements``)."""
    t0 = time.perf_counter()
    copy = _measure_copy(sizes.copy_bytes, sizes.repeats)
    gather = _measure_gather(sizes.table_bytes, sizes.gather_rows, sizes.width, sizes.repeats)
    spmm = _measure_spmm(sizes.spmm_nodes, sizes.spmm_edges, sizes.width, sizes.repeats)
    gemm = _measure_gemm(sizes.gemm_n, sizes.repeats)
    disk, disk_note = _measure_disk(sizes.disk_bytes, directory)
    fixed = _measure_overheads(sizes.repeats)
    return {
        **fixed,
        "copy": copy,
        "gather": gather,
        "spmm": spmm,
        "gemm": gemm,
        "disk": disk,
        "disk_note": disk_note,
        "sizes": dataclasses.asdict(sizes),
        "seconds": time.perf_counter() - t0,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def _probe(comm_probe: Callable[[], float]) -> float:
    value = comm_probe()
    try:
        return _positive("comm_probe()", value, "bytes/s (measured all-to-all rate)")
    except ConfigError as e:
        raise ConfigError(f"local_profile: {e}") from None


# ------------------------------------------------------------------------------ local machine
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown cpu"


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _host_memory() -> tuple[int, str]:
    """Bytes of host memory and where the number comes from."""
    total, note = 0, ""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                total, note = int(line.split()[1]) * 1024, "/proc/meminfo MemTotal"
                break
    except (OSError, ValueError, IndexError):
        pass
    if not total:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        note = "sysconf physical pages"
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            limit = int(Path(limit_file).read_text().strip())
        except (OSError, ValueError):
            continue
        if 0 < limit < total:
            total, note = limit, f"{note} capped by the cgroup limit in {limit_file}"
        break
    return total, note


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fleetgnn" / "hardware"


def _resolve_threads(threads: int | None, nproc: int) -> int:
    if threads is not None:
        return _count("threads", threads)
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) >= 1:
        return int(env)
    return max(1, _usable_cores() // nproc)


def _machine_key(nproc: int, threads: int, quick: bool) -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "cpu": _cpu_model(),
        "torch": torch.__version__,
        "nproc": nproc,
        "threads": threads,
        "quick": quick,
    }


def _cache_path(cache_dir: Path, key: Mapping[str, Any]) -> Path:
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    host = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(key["hostname"]))
    return cache_dir / f"{host[:40]}-n{key['nproc']}-{digest}.json"


def _read_cache(path: Path, key: Mapping[str, Any]) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != dict(key):
        return None
    m = data.get("measurements")
    needed = ("copy", "gather", "spmm", "gemm", "disk", "keyed_dropout", "layer_overhead")
    if not isinstance(m, dict) or not all(
        isinstance(m.get(k), (int, float)) and m[k] > 0 for k in needed
    ):
        return None
    return m


def _write_cache(
    path: Path, key: Mapping[str, Any], m: Mapping[str, Any], profile: HardwareProfile
) -> None:
    data = {"key": dict(key), "measurements": dict(m), "profile": profile.to_dict()}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)
    except OSError as e:
        warnings.warn(
            f"local_profile: could not cache the calibration in {path} ({e}); it will run "
            "again next time",
            stacklevel=3,
        )


def _local_from(
    nproc: int, key: Mapping[str, Any], m: Mapping[str, Any], host_memory: int, mem_note: str
) -> HardwareProfile:
    copy = float(m["copy"])
    local = 2.0 * copy  # bytes read + written, the convention of every profile's "local"
    if "peer" in m:
        peer = float(m["peer"])
        peer_note = "peer = net = the comm_probe's all-to-all rate between 2 processes"
    else:
        peer = copy / 2.0
        peer_note = (
            "peer = net = copy rate / 2, an ESTIMATE (no comm_probe given: pass one to measure "
            "the all-to-all rate between processes)"
        )
    sizes = m.get("sizes", {})
    matrix = _uniform(nproc, local, peer)
    source = (
        f"measured on host {key['hostname']!r} ({key['cpu']}, {_usable_cores()} usable cores, "
        f"torch {key['torch']}) on {m.get('date', '?')}, one process with {key['threads']} "
        f"thread(s) (the share of each of nproc={nproc} ranks), in {m.get('seconds', 0):.1f} s"
        f"{' (quick sizes)' if key['quick'] else ''}: local = 2 x the copy rate of a "
        f"{sizes.get('copy_bytes', 0) / MiB:.0f} MiB tensor (bytes read + written); h2d = d2h "
        "= that copy rate (CPU: no separate device memory); gather = index_select of "
        f"{sizes.get('gather_rows', 0)} random rows of {4 * sizes.get('width', 0)} B; spmm = "
        f"fleetgnn.ops.gspmm sum over {sizes.get('spmm_edges', 0):,} random edges x width "
        f"{sizes.get('width', 0)}; gemm = torch.mm of {sizes.get('gemm_n', 0)}^2 float32; "
        "elementwise = keyed dropout of 2048^2 float32; layer_overhead = forward + backward of "
        "a 32-node layer; param_overhead = Adam's step per parameter tensor; "
        f"disk = {m.get('disk_note', '?')}; {peer_note} (one host, no NIC between its "
        f"processes); device_memory = host_memory / {nproc} (processes share host memory); "
        f"host_memory from {mem_note}. Rates are one process's alone: concurrent ranks share "
        "memory bandwidth."
    )
    return HardwareProfile(
        name="local",
        kind="cpu",
        num_devices=nproc,
        device_memory=host_memory // nproc,
        host_memory=host_memory,
        bandwidth={
            "local": local,
            "peer": peer,
            "h2d": copy,
            "d2h": copy,
            "net": peer,
            "disk": float(m["disk"]),
        },
        peer=matrix,
        gather_rate=float(m["gather"]),
        spmm_rate=float(m["spmm"]),
        gemm_rate=float(m["gemm"]),
        elementwise_rate=float(m["keyed_dropout"]),
        layer_overhead=float(m["layer_overhead"]),
        param_overhead=float(m.get("param_overhead", FIXED_OVERHEADS["cpu"]["param_overhead"])),
        source=source,
    )


def local_profile(
    nproc: int,
    *,
    comm_probe: Callable[[], float] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    refresh: bool = False,
    quick: bool = False,
    threads: int | None = None,
) -> HardwareProfile:
    """The current machine, ``nproc`` CPU processes as devices, from a short calibration.

    Measures (about 2-5 s on a 2-core machine; ``quick=True`` shrinks every size, well under a
    second): the copy rate of a 64 MiB tensor (``local`` = 2x it, counting reads and writes;
    ``h2d`` = ``d2h`` = it), random row gathers, :func:`fleetgnn.ops.gspmm` on a random graph
    of 1M edges x width 64, ``torch.mm`` of 1024^2 float32, and reading back a 64 MiB temp file
    (dropped from the page cache with ``posix_fadvise`` where the kernel allows; otherwise a
    buffered read, and ``source`` says so). ``peer`` (every pair of processes) and ``net`` are
    ``comm_probe()`` if given, else the copy rate / 2 (an estimate, noted in ``source``).
    ``device_memory`` is ``host_memory // nproc``: the processes share host memory.

    The measurements are cached as JSON under ``cache_dir``, keyed by hostname, CPU model, torch
    version, ``nproc``, threads and ``quick``, and reused unless ``refresh``; a cached
    calibration without a peer measurement runs only ``comm_probe`` when one is given.

    Args:
        nproc: Processes (ranks) this host will run, ``>= 1``.
        comm_probe: Returns the all-to-all bytes/s measured between 2 processes (e.g. over
            gloo); called at most once, and not at all when the cache holds its result.
        cache_dir: Cache directory (default ``$XDG_CACHE_HOME/fleetgnn/hardware``, i.e.
            ``~/.cache/fleetgnn/hardware``); the disk probe's temp file is written there too.
        refresh: Measure again even when a cached calibration exists.
        quick: Tiny sizes (tests): rates are noisier and lower than the full calibration's.
        threads: Torch intra-op threads to measure with (default ``$OMP_NUM_THREADS``, else
            the usable cores divided by ``nproc``, as ``fleetgnn train`` gives each rank).

    Returns:
        A ``kind="cpu"`` profile named ``"local"`` with ``nproc`` devices.

    Raises:
        ConfigError: ``nproc`` or ``threads`` below 1, or a non-positive probe result.
    """
    nproc = _count("nproc", nproc)
    threads = _resolve_threads(threads, nproc)
    directory = Path(cache_dir) if cache_dir is not None else _default_cache_dir()
    key = _machine_key(nproc, threads, bool(quick))
    path = _cache_path(directory, key)
    m = None if refresh else _read_cache(path, key)
    changed = m is None
    if m is None:
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            m = _calibrate(_QUICK if quick else _FULL, directory)
        finally:
            torch.set_num_threads(before)
    if comm_probe is not None and "peer" not in m:
        m["peer"] = _probe(comm_probe)
        changed = True
    host_memory, mem_note = _host_memory()
    profile = _local_from(nproc, key, m, host_memory, mem_note)
    if changed:
        _write_cache(path, key, m, profile)
    return profile


def load_profile(name_or_path: str, nproc: int = 1, **local_kwargs: Any) -> HardwareProfile:
    """A built-in profile by name, ``"local"`` (measured), or a user's YAML file.

    Built-in profiles come whole (all their devices): restrict them with
    :meth:`HardwareProfile.with_devices`.

    Args:
        name_or_path: A key of :data:`PROFILES`, ``"local"``, or a path to a YAML/JSON file.
        nproc: Processes for ``"local"`` (ignored otherwise).
        **local_kwargs: Keyword arguments of :func:`local_profile` (``"local"`` only).

    Raises:
        ConfigError: An unknown name (the message lists the built-ins), keyword arguments with a
            name other than ``"local"``, or an invalid file.
    """
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise ConfigError(
            f"hardware={name_or_path!r} is invalid: give a profile name or a YAML file path"
        )
    text = os.fspath(name_or_path)
    name = text.strip().lower()
    if name == "local":
        return local_profile(nproc, **local_kwargs)
    if local_kwargs:
        raise ConfigError(
            f"hardware={text!r}: options {sorted(local_kwargs)} apply only to 'local'"
        )
    if name in PROFILES:
        return PROFILES[name]
    if Path(text).suffix.lower() in (".yaml", ".yml", ".json") or Path(text).exists():
        return HardwareProfile.from_yaml(text)
    hint = difflib.get_close_matches(name, [*PROFILES, "local"], n=1)
    tip = f" (did you mean {hint[0]!r}?)" if hint else ""
    raise ConfigError(
        f"unknown hardware profile {text!r}{tip}; built-in profiles: {', '.join(PROFILES)}; "
        "or 'local' (measured on this machine), or a path to a YAML profile file"
    )
