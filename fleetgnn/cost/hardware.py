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
``narrow_gemm_rate`` flop/s of a GNN layer's transform to a narrow output (``[n, k] @ [k, 16]``
                   and its weight gradient), slower per flop than a square product on CPUs;
                   widths between 16 and 256 interpolate geometrically (default: ``gemm_rate``)
``elementwise_rate`` elements/s of fleetgnn's keyed dropout on a large tensor (hashing each
                    element's key; default ``local / 12``: read, write, one mask byte)
``layer_overhead``  seconds of framework work per layer and step whatever its size: the
                    forward and backward of a tiny layer (dropout, transform, aggregation,
                    activation), Python and kernel launches (default: per ``kind``)
``param_overhead``  seconds of the optimizer step per parameter tensor, whatever its size
                    (default: per ``kind``)
``sample_rate``     sampled edges/s per rank of the sampler the mini-batch engines run: fleetgnn's
                    numpy sampler on the host, on GPU machines too (default
                    :data:`DEFAULT_SAMPLE_RATE`; which engine samples where:
                    :mod:`fleetgnn.cost.gpu_rates`)
``temporal_sample_rate`` sampled edges/s per rank of fleetgnn's temporal sampler on the host
                    (:class:`~fleetgnn.sampling.TemporalSampler`: a binary search for every
                    node's candidates, disjoint per-seed subtrees), what temporal tasks' batches
                    are priced at (the ``local`` calibration measures it; default: not
                    measured, ``sample_rate`` is used and the plan says so)
``rates_from``      one line: where the measured rates come from (a GPU check's file, GPU,
                    torch version and date; a calibration); ``""``: the built-in figures
==================  ============================================================================

The built-in profiles are in :mod:`fleetgnn.cost.profiles` (with
:func:`~fleetgnn.cost.profiles.load_profile`, which resolves a name, ``"local"`` or a file), the
measured one in :mod:`fleetgnn.cost.calibration`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np
import yaml

from fleetgnn.config.suggest import nearest
from fleetgnn.config.textfile import load_yaml_file
from fleetgnn.config.units import parse_bytes
from fleetgnn.errors import ConfigError

#: Output widths where :meth:`HardwareProfile.gemm_rate_at` is the narrow rate (at or below
#: the first) and the square-product rate (at or above the second).
NARROW_GEMM_WIDTHS = (16, 256)

#: Link kinds of the traffic meter, in report order (the same tuple as
#: :data:`fleetgnn.distributed.traffic.LINK_KINDS`, which this layer may not import).
LINK_KINDS: tuple[str, ...] = ("local", "peer", "h2d", "d2h", "net", "disk")

#: Link kinds every profile states; ``peer`` may be left out (see :class:`HardwareProfile`).
REQUIRED_LINKS: tuple[str, ...] = ("local", "h2d", "d2h", "net", "disk")

KINDS: tuple[str, ...] = ("gpu", "cpu")

#: Default fixed costs (s) of a profile that does not state them. GPU: a layer's forward and
#: backward launch some 30 kernels at ~5 us each from Python; Adam's step (foreach) about 20 us
#: per parameter tensor. CPU: what :func:`~fleetgnn.cost.calibration.local_profile` measures on a
#: 2-core EPYC VM.
FIXED_OVERHEADS: dict[str, dict[str, float]] = {
    "gpu": {"layer_overhead": 1.5e-4, "param_overhead": 2e-5},
    "cpu": {"layer_overhead": 1e-3, "param_overhead": 3e-5},
}

#: Sampled edges/s per rank where a profile does not state ``sample_rate``: fleetgnn's numpy
#: sampler on one host thread, the path the engines take on CPUs and GPUs alike. It drew 4.7-5.2 M
#: edges/s on a 2-core EPYC VM and 4.4 M on the H100 check's Xeon host (fanouts 15,10,5).
DEFAULT_SAMPLE_RATE = 5e6

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


def positive_arg(field: str, value: Any, what: str) -> float:
    """``value`` as a float > 0 (a one-line ConfigError naming ``field`` otherwise)."""
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


def count_arg(field: str, value: Any) -> int:
    """``value`` as an int >= 1 (a one-line ConfigError naming ``field`` otherwise)."""
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
        narrow_gemm_rate: Flop/s of a transform to 16 output columns (forward and weight
            gradient); ``None``: ``gemm_rate`` (see :meth:`gemm_rate_at`).
        sample_rate: Sampled edges/s per rank of the host sampler the mini-batch engines run;
            ``None``: :data:`DEFAULT_SAMPLE_RATE`.
        device_sample_rate: Sampled edges/s per rank of the torch sampler over a CSC replica
            in device memory (``minibatch`` with ``store.sampling`` resolved to ``device``);
            ``None``: not measured (the host rate is used).
        temporal_sample_rate: Sampled edges/s per rank of the host temporal sampler (temporal
            tasks' batches); ``None``: not measured (``sample_rate`` is used).
        rates_from: Where the measured rates come from, in one line (``""``: built-in).
        source: Where the numbers come from.

    Example:
        >>> from fleetgnn.cost.profiles import PROFILES
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
    narrow_gemm_rate: float | None = None
    elementwise_rate: float | None = None
    layer_overhead: float | None = None
    param_overhead: float | None = None
    sample_rate: float | None = None
    device_sample_rate: float | None = None
    temporal_sample_rate: float | None = None
    rates_from: str = ""
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
        set_(self, "num_devices", count_arg("num_devices", self.num_devices))
        set_(self, "num_hosts", count_arg("num_hosts", self.num_hosts))
        set_(self, "device_memory", _bytes("device_memory", self.device_memory))
        set_(self, "host_memory", _bytes("host_memory", self.host_memory))
        bw = _check_bandwidth(self.bandwidth)
        peer = _check_peer(self.peer, self.num_devices, bw["local"])
        bw.setdefault("peer", _peer_total(peer, bw))
        set_(self, "bandwidth", MappingProxyType({k: bw[k] for k in LINK_KINDS}))
        set_(self, "peer", peer)
        set_(self, "gather_rate", positive_arg("gather_rate", self.gather_rate, "bytes/s"))
        set_(self, "spmm_rate", positive_arg("spmm_rate", self.spmm_rate, "multiply-adds/s"))
        set_(self, "gemm_rate", positive_arg("gemm_rate", self.gemm_rate, "flop/s"))
        if self.narrow_gemm_rate is not None:
            rate = positive_arg("narrow_gemm_rate", self.narrow_gemm_rate, "flop/s")
            set_(self, "narrow_gemm_rate", rate)
        if self.elementwise_rate is None:
            set_(self, "elementwise_rate", bw["local"] / 12.0)
        set_(
            self, "elementwise_rate", positive_arg("elementwise_rate", self.elementwise_rate, "/s")
        )
        for name, default in FIXED_OVERHEADS[self.kind].items():
            value = default if getattr(self, name) is None else getattr(self, name)
            set_(self, name, _number(name, value, "must be a number of seconds >= 0"))
            if not 0 <= getattr(self, name) < 10:
                raise _fail(name, value, "must be seconds in [0, 10)")
        sample = DEFAULT_SAMPLE_RATE if self.sample_rate is None else self.sample_rate
        set_(self, "sample_rate", positive_arg("sample_rate", sample, "sampled edges/s"))
        if self.device_sample_rate is not None:
            rate = positive_arg("device_sample_rate", self.device_sample_rate, "sampled edges/s")
            set_(self, "device_sample_rate", rate)
        if self.temporal_sample_rate is not None:
            rate = positive_arg(
                "temporal_sample_rate", self.temporal_sample_rate, "sampled edges/s"
            )
            set_(self, "temporal_sample_rate", rate)
        for name in ("rates_from", "source"):
            if not isinstance(getattr(self, name), str):
                raise _fail(name, getattr(self, name), "must be a string")

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

    def gemm_rate_at(self, width: int) -> float:
        """Flop/s of a transform to ``width`` output columns (and its weight gradient).

        :attr:`narrow_gemm_rate` at 16 columns or fewer, :attr:`gemm_rate` at 256 or more,
        geometric interpolation in ``log2(width)`` between (``gemm_rate`` alone when no narrow
        rate was measured).
        """
        narrow, wide = self.narrow_gemm_rate, float(self.gemm_rate)
        if narrow is None or width >= NARROW_GEMM_WIDTHS[1]:
            return wide
        lo, hi = NARROW_GEMM_WIDTHS
        t = max(0.0, math.log2(max(width, 1) / lo) / math.log2(hi / lo))
        return float(narrow) * (wide / float(narrow)) ** t

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
            "narrow_gemm_rate": self.narrow_gemm_rate,
            "elementwise_rate": self.elementwise_rate,
            "layer_overhead": self.layer_overhead,
            "param_overhead": self.param_overhead,
            "sample_rate": self.sample_rate,
            "device_sample_rate": self.device_sample_rate,
            "temporal_sample_rate": self.temporal_sample_rate,
            "rates_from": self.rates_from,
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
                f"{', '.join(cls.REQUIRED)} (optional: num_hosts, peer, narrow_gemm_rate, "
                f"elementwise_rate, layer_overhead, param_overhead, sample_rate, "
                f"device_sample_rate, temporal_sample_rate, rates_from, source)"
            )
        return cls(**{str(k): v for k, v in d.items()})

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str], fix: str | None = None) -> HardwareProfile:
        """Read a user-written profile (YAML, or JSON) with the fields of :meth:`to_dict`.

        Byte counts and bandwidths may carry units (``device_memory: 24GiB``,
        ``h2d: 12GB/s``); ``source`` defaults to the file's path. ``fix``: what an error
        suggests (:func:`~fleetgnn.cost.profiles.load_profile` names the built-in profiles).

        Raises:
            ConfigError: One line starting with the path: an unreadable file, invalid YAML, or
                any error of :meth:`from_dict`.
        """
        p = Path(path)
        fix = fix or "give a readable YAML or JSON hardware profile file"
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
            f"gemm {_fmt_rate(self.gemm_rate, 'FLOP/s')}, "
            f"sample {_fmt_rate(float(self.sample_rate or 0), ' edges/s')})"
        )


def _from_dict(d: dict[str, Any]) -> HardwareProfile:
    return HardwareProfile.from_dict(d)


def uniform_peer(n: int, local: float, link: float) -> list[list[float]]:
    """An ``n x n`` peer matrix: ``local`` on the diagonal, ``link`` between every pair."""
    return [[local if i == j else link for j in range(n)] for i in range(n)]
