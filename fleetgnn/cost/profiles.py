"""Built-in hardware profiles (published machines, every number sourced) and :func:`load_profile`.

Profiles (:data:`PROFILES`; every number's source is in a comment below and in the
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

Where a committed GPU check measured a profile's GPU (``h100``), its ``local``, pinned ``h2d``,
``gather_rate``, ``spmm_rate`` and ``sample_rate`` are the check's
(:mod:`fleetgnn.cost.gpu_rates`, package data copied from ``benchmarks/results/gpu/``), named
in the profile's ``rates_from`` and ``source``; the other figures stay the built-in ones.

:func:`load_profile` resolves a built-in name, ``"local"`` (measured:
:func:`~fleetgnn.cost.calibration.local_profile`) or a user-written YAML file
(:meth:`~fleetgnn.cost.hardware.HardwareProfile.from_yaml`). The fields are described in
:mod:`fleetgnn.cost.hardware`.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fleetgnn.config.topology import DGX1_V100_LINKS
from fleetgnn.cost.calibration import local_profile
from fleetgnn.cost.gpu_rates import measured_rates
from fleetgnn.cost.hardware import (
    DEFAULT_SAMPLE_RATE,
    GB,
    TFLOPS,
    GiB,
    HardwareProfile,
    MiB,
    uniform_peer,
)
from fleetgnn.errors import ConfigError

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
    """A GPU profile from its built-in figures, with the GPU check's rates where one measured them.

    :func:`~fleetgnn.cost.gpu_rates.measured_rates` gives ``local``, ``h2d``, ``gather_rate``,
    ``spmm_rate``, ``sample_rate`` and ``device_sample_rate`` of the profiles a committed check
    ran on; the rules of
    this module derive (gather, spmm) or assume (d2h, sample) the others, and ``source`` says
    which is which.
    """
    measured = measured_rates(name)
    got = dict(measured.values) if measured is not None else {}
    local = got.get("local", local)
    bandwidth = {"local": local, "h2d": got.get("h2d", h2d), "d2h": h2d, "net": net, "disk": disk}
    if peer is not None and "local" in got:  # the diagonal is the device's own bandwidth
        peer = [[local if i == j else v for j, v in enumerate(row)] for i, row in enumerate(peer)]
    if peer_total is not None:
        bandwidth["peer"] = peer_total
    rules = {
        "gather_rate": (
            f"gather_rate = {_GATHER_PER_LOCAL} x local (a gather reads and writes each row; "
            "partial sectors)"
        ),
        "spmm_rate": (
            "spmm_rate = local x 1.0e11/1.8e12 MAC/s per B/s, calibrated on HongTu Table 5 (DGL "
            "GCN on ogbn-products, 1x A100-80GB, 0.27 s/epoch = 2.4e10 multiply-adds, a lower "
            "bound)"
        ),
        "sample_rate": (
            f"sample_rate = {DEFAULT_SAMPLE_RATE:.3g} edges/s assumed (fleetgnn's numpy sampler "
            "on one host thread, the engines' path on GPU machines too)"
        ),
        "device_sample_rate": (
            "device_sample_rate not measured: minibatch's device sampling is priced at sample_rate"
        ),
        "layer_overhead": "layer_overhead = 150 us assumed (some 30 kernel launches at ~5 us)",
        "param_overhead": "param_overhead = 20 us per parameter tensor assumed (Adam, foreach)",
    }
    d2h = (
        f"d2h = the built-in h2d, {h2d / GB:.3g} GB/s (assumed: the GPU check measures "
        "host-to-device only)"
        if "h2d" in got
        else "d2h = h2d"
    )
    derived = [d2h, *(text for field, text in rules.items() if field not in got)]
    derived.append(
        "gemm_rate = float32 without TF32 (PyTorch's default), derated from the datasheet peak"
    )
    text = f"{source} Derived or assumed: {'; '.join(derived)}."
    if measured is not None:
        text += (
            f" Measured by the GPU check, replacing the figures above: {measured.rates_from}."
            f" How: {measured.detail}; elementwise_rate = local / 12 follows the measured local."
        )
    return HardwareProfile(
        name=name,
        kind="gpu",
        num_devices=num_devices,
        device_memory=device_memory,
        host_memory=host_memory,
        bandwidth=bandwidth,
        peer=peer,
        gather_rate=got.get("gather_rate", _GATHER_PER_LOCAL * local),
        spmm_rate=got.get("spmm_rate", _SPMM_PER_LOCAL * local),
        gemm_rate=gemm,
        sample_rate=got.get("sample_rate", DEFAULT_SAMPLE_RATE),
        device_sample_rate=got.get("device_sample_rate"),
        layer_overhead=got.get("layer_overhead"),  # None: FIXED_OVERHEADS["gpu"]
        param_overhead=got.get("param_overhead"),
        rates_from=measured.rates_from if measured is not None else "",
        source=text,
    )


# The 8x V100 hybrid cube-mesh (XGNN Sec. 6): the store's "dgx1-v100" topology, one copy.
_V100_LOCAL = 700 * GB  # XGNN notes' local bandwidth (V100 HBM2 900 GB/s datasheet, ~78%)


def _dgx1_v100_peer() -> list[list[float]]:
    m = uniform_peer(8, _V100_LOCAL, 0.0)
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
        peer=uniform_peer(8, a100_40_local, 230 * GB),
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
        peer=uniform_peer(4, a100_80_local, 90 * GB),
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
        peer=uniform_peer(4, rtx_local, 0.0),
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
        fix = f"give a YAML file, a built-in name ({', '.join(PROFILES)}) or 'local'"
        return HardwareProfile.from_yaml(text, fix=fix)
    hint = difflib.get_close_matches(name, [*PROFILES, "local"], n=1)
    tip = f" (did you mean {hint[0]!r}?)" if hint else ""
    raise ConfigError(
        f"unknown hardware profile {text!r}{tip}; built-in profiles: {', '.join(PROFILES)}; "
        "or 'local' (measured on this machine), or a path to a YAML profile file"
    )
