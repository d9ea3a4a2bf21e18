"""Rates the prepared GPU check measured, as package data for the built-in GPU profiles.

``benchmarks/gpu/check.py`` measures a lent GPU and its JSON output is committed under
``benchmarks/results/gpu/``. :func:`derive_rates` turns those files into the table that
``fleetgnn/cost/gpu_rates.json`` holds (package data: the ``benchmarks`` folder is not
installed); ``python benchmarks/gpu/rates.py`` regenerates it after a new check, and
``tests/cost/test_gpu_rates.py`` fails when the two differ. :mod:`fleetgnn.cost.profiles`
applies the table to the profile each GPU maps to (:data:`GPU_PROFILES`) and records where every
rate came from; a rate the checks did not measure keeps the profile's built-in figure.

=================  ===============================================  ==============================
profile field      the check's figure (``steps.bench.figures.``)    conversion
=================  ===============================================  ==============================
``local``          ``copy_gbps``: ``copy_`` of 1 GiB on the device  GB/s -> B/s (read + written)
``h2d``            ``h2d.pinned_gbps``: one 1 GiB copy from pinned  GB/s -> B/s
                   host memory
``gather_rate``    ``gather_tiers.kernels``: the fastest exact      GB/s -> B/s (each gathered
                   row-gather kernel (``kernels.MEASURED``'s        byte once: read + written
                   choice) of random feature rows;                  halved)
                   ``device_gbps`` (``index_select``) in a check
                   without kernels
``spmm_rate``      ``gspmm`` sum and mean forward+backward          ``2 E D`` multiply-adds per
                   (``sizes.gspmm``: ``E`` edges, width ``D``)      case over the summed medians
``sample_rate``    ``sampler.m_edges_per_s["fleetgnn numpy          M edges/s -> edges/s
                   (CPU)"]``: fanouts 15,10,5, batch 1024
``device_sample_   ``sampler.m_edges_per_s["fleetgnn"]``: the torch  M edges/s -> edges/s
rate``             sampler over a device CSC, the same case
``layer_           ``overheads.layer_overhead_s``: a tiny layer's   s
overhead``         forward and backward on the device
                   (``calibration.measure_overheads``)
``param_           ``overheads.param_overhead_s``: Adam's step      s
overhead``         per tiny tensor on the device
=================  ===============================================  ==============================

A figure counts only when its bench part passed; for each field the newest check (by its
``host.date``) that measured it wins.

Sampling: ``sample_rate`` is the rate of fleetgnn's numpy sampler on the host, the path
``reference`` and ``split`` take on a GPU machine (a :class:`~fleetgnn.sampling.GraphTopology`
sampled from CPU seeds), and ``minibatch`` with ``store.sampling=host``. ``device_sample_rate``
is the torch sampler's over a :class:`~fleetgnn.sampling.DeviceTopology`, what ``minibatch``
runs with ``store.sampling`` resolved to ``device`` (``auto`` on a GPU when the CSC replica
takes at most half the device budget).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from fleetgnn.errors import ConfigError

#: GPU names as the check records them (``host.gpu``: torch's device name) -> built-in profile.
#: Only single-GPU profiles: a check measures one GPU alone, and a shared PCIe uplink or an
#: NVLink fabric would make its figures another profile's.
GPU_PROFILES: Mapping[str, str] = {"NVIDIA H100 80GB HBM3": "h100", "NVIDIA H200": "h200"}

#: The package data file (written by ``benchmarks/gpu/rates.py``).
DATA_FILE = Path(__file__).with_name("gpu_rates.json")

FORMAT = 1

#: Profile fields a check can give, in the order they are reported.
FIELDS: tuple[str, ...] = (
    "local",
    "h2d",
    "gather_rate",
    "spmm_rate",
    "sample_rate",
    "device_sample_rate",
    "layer_overhead",
    "param_overhead",
)

#: The host sampler's entry in the check's sampler figures (the CUDA sampler is ``fleetgnn``).
HOST_SAMPLER = "fleetgnn numpy (CPU)"

_LABELS = {
    "local": ("local", "B/s"),
    "h2d": ("h2d pinned", "B/s"),
    "gather_rate": ("gather", "B/s"),
    "spmm_rate": ("spmm", "MAC/s"),
    "sample_rate": ("sample", "edges/s"),
    "device_sample_rate": ("device sample", "edges/s"),
    "layer_overhead": ("layer overhead", "s"),
    "param_overhead": ("param overhead", "s"),
}


def profile_for_gpu(gpu: Any, file: str = "") -> str:
    """The built-in profile a GPU check on ``gpu`` measures (:data:`GPU_PROFILES`).

    Raises:
        ConfigError: A GPU no built-in profile describes (one line, naming the known ones).
    """
    if gpu in GPU_PROFILES:
        return GPU_PROFILES[gpu]
    known = ", ".join(f"{g!r} -> {p}" for g, p in GPU_PROFILES.items())
    where = f"{file}: " if file else ""
    raise ConfigError(
        f"{where}host.gpu={gpu!r} matches no built-in GPU profile (known: {known}); add the "
        "GPU to fleetgnn.cost.gpu_rates.GPU_PROFILES, or drop the file from the derivation"
    )


def _positive(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def _passed(bench: Mapping[str, Any], part: str) -> bool:
    return bench.get("parts", {}).get(part, {}).get("status") == "passed"


def _spmm(check: Mapping[str, Any], figures: Mapping[str, Any]) -> tuple[float, str] | None:
    size = check.get("sizes", {}).get("gspmm", {})
    edges, dim = _positive(size.get("edges")), _positive(size.get("dim"))
    cases = {
        name: _positive(v.get("median_s"))
        for name, v in figures.get("gspmm", {}).items()
        if "forward+backward" in name
    }
    if edges is None or dim is None or not cases or None in cases.values():
        return None
    seconds = sum(s for s in cases.values() if s is not None)
    rate = 2 * edges * dim * len(cases) / seconds  # forward and backward: one E x D pass each
    what = (
        f"gspmm {' and '.join(n.split()[1] for n in cases)} forward+backward, "
        f"{edges:.0f} edges x D={dim:.0f}: 2 E D multiply-adds per case over the summed medians"
    )
    return rate, what


def check_rates(check: Mapping[str, Any], file: str) -> dict[str, dict[str, Any]]:
    """The profile rates one GPU check measured, by field (a field it did not measure is absent).

    Each entry: ``value`` (B/s, MAC/s or edges/s), ``figure`` (where in the check it is) and
    ``what`` (how it was measured). ``file`` names the check in errors.

    Raises:
        ConfigError: A check that did not run on CUDA.
    """
    if check.get("device") != "cuda" or not check.get("host", {}).get("gpu"):
        raise ConfigError(
            f"{file}: device={check.get('device')!r} with no host.gpu: only a check run with "
            "--device cuda measures a GPU profile's rates"
        )
    bench = check.get("steps", {}).get("bench", {})
    figs = bench.get("figures", {})
    out: dict[str, dict[str, Any]] = {}

    def put(field: str, value: Any, scale: float, figure: str, what: str) -> None:
        v = _positive(value)
        if v is not None:
            out[field] = {"value": v * scale, "figure": figure, "what": what}

    if _passed(bench, "copy"):
        put("local", figs.get("copy_gbps"), 1e9, "copy_gbps", str(figs.get("copy_what", "")))
    if _passed(bench, "h2d"):
        h2d = figs.get("h2d", {})
        nbytes = h2d.get("bytes", 0)
        what = f"one {nbytes / 2**20:.0f} MiB copy from pinned host memory"
        put("h2d", h2d.get("pinned_gbps"), 1e9, "h2d.pinned_gbps", what)
    if _passed(bench, "gather_tiers"):
        tiers = figs.get("gather_tiers", {})
        rows = f"{tiers.get('rows', 0):,} random rows of {tiers.get('row_bytes', 0)} B"
        kernels = {  # the row-gather kernels the check timed and found exact: the fastest
            k: v["read_written_gbps"] / 2
            for k, v in tiers.get("kernels", {}).items()
            if isinstance(v, dict) and v.get("equal") and _positive(v.get("read_written_gbps"))
        }
        if kernels:
            best = max(kernels, key=kernels.__getitem__)
            what = f"{best} (the fastest exact gather kernel) of {rows} on the device, "
            what += "gathered bytes counted once"
            put("gather_rate", kernels[best], 1e9, f"gather_tiers.kernels.{best}", what)
        else:
            what = f"index_select of {rows} on the device, gathered bytes counted once"
            put("gather_rate", tiers.get("device_gbps"), 1e9, "gather_tiers.device_gbps", what)
    if _passed(bench, "gspmm"):
        spmm = _spmm(check, figs)
        if spmm is not None:
            put("spmm_rate", spmm[0], 1.0, "gspmm", spmm[1])
    if _passed(bench, "sampler"):
        sampler = figs.get("sampler", {})
        rates = sampler.get("m_edges_per_s", {})
        what = f"fleetgnn's numpy sampler on the host ({sampler.get('case', '')})"
        figure = f"sampler.m_edges_per_s[{HOST_SAMPLER!r}]"
        put("sample_rate", rates.get(HOST_SAMPLER), 1e6, figure, what)
        device = {  # the device sampler under each Fisher-Yates kernel it ran with: the fastest
            k: v
            for k, v in rates.items()
            if (k == "fleetgnn" or k.startswith("fleetgnn, fisher_yates=")) and _positive(v)
        }
        if device:
            best = max(device, key=device.__getitem__)
            kernel = best.partition("fisher_yates=")[2] or sampler.get("fisher_yates", "default")
            what = (
                f"fleetgnn's torch sampler over the CSC on the device, Fisher-Yates kernel "
                f"{kernel} (the fastest it ran with; {sampler.get('case', '')})"
            )
            put("device_sample_rate", device[best], 1e6, f"sampler.m_edges_per_s[{best!r}]", what)
    if _passed(bench, "overheads"):
        fixed = figs.get("overheads", {})
        what = (
            "forward and backward of a 32-node layer on the device (keyed dropout, transform, "
            "gspmm, ReLU), synchronised, best of 20"
        )
        put(
            "layer_overhead", fixed.get("layer_overhead_s"), 1.0, "overheads.layer_overhead_s", what
        )
        what = "Adam's step and zero_grad over 16 tiny tensors on the device, per tensor"
        put(
            "param_overhead", fixed.get("param_overhead_s"), 1.0, "overheads.param_overhead_s", what
        )
    return out


def derive_rates(checks: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """The package data from GPU checks, given as ``(file name, parsed JSON)`` pairs.

    Per profile (:func:`profile_for_gpu` of each check's GPU) and field, the rate of the newest
    check (``host.date``, then the file name) that measured it; ``checks`` lists the files that
    gave a rate, with their GPU, torch and CUDA versions, date and commit.

    Raises:
        ConfigError: A check not run on CUDA, or on a GPU that maps to no profile.
    """
    best: dict[str, dict[str, tuple[tuple[str, str], dict[str, Any]]]] = {}
    meta: dict[str, dict[str, Any]] = {}
    for file, check in checks:
        host = check.get("host", {})
        rates = check_rates(check, file)
        profile = profile_for_gpu(host.get("gpu"), file)
        meta[file] = {
            "profile": profile,
            "gpu": host.get("gpu"),
            "torch": host.get("torch"),
            "cuda": host.get("cuda"),
            "date": host.get("date") or check.get("started"),
            "git_commit": host.get("git_commit"),
        }
        order = (str(meta[file]["date"]), file)
        for field, rate in rates.items():
            have = best.setdefault(profile, {}).get(field)
            if have is None or order > have[0]:
                best[profile][field] = (order, {**rate, "check": file})
    profiles: dict[str, Any] = {}
    for profile in sorted(best):
        rates = {f: best[profile][f][1] for f in FIELDS if f in best[profile]}
        used = sorted({r["check"] for r in rates.values()})
        gpus = {meta[f]["gpu"] for f in used}
        profiles[profile] = {
            "gpu": gpus.pop() if len(gpus) == 1 else sorted(gpus),
            "checks": {f: {k: v for k, v in meta[f].items() if k != "profile"} for f in used},
            "rates": rates,
        }
    return {
        "format": FORMAT,
        "generated_by": (
            "python benchmarks/gpu/rates.py, from benchmarks/results/gpu/*.json "
            "(fleetgnn.cost.gpu_rates.derive_rates); do not edit"
        ),
        "profiles": profiles,
    }


def read_checks(directory: str | Path) -> list[tuple[str, dict[str, Any]]]:
    """Every ``*.json`` GPU check in ``directory``, as ``(file name, parsed JSON)``, by name.

    Raises:
        ConfigError: A directory without checks, or a file that is not JSON.
    """
    paths = sorted(Path(directory).glob("*.json"))
    if not paths:
        raise ConfigError(f"{directory}: no GPU check (*.json) to derive rates from")
    out = []
    for p in paths:
        try:
            out.append((p.name, json.loads(p.read_text())))
        except (OSError, ValueError) as e:
            raise ConfigError(f"{p}: not a readable GPU check JSON ({e})") from None
    return out


def dumps(data: Mapping[str, Any]) -> str:
    """The package data file's text (stable: sorted keys, one field per line)."""
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


@cache
def load_rates() -> dict[str, Any]:
    """The package data (:data:`DATA_FILE`): ``{"profiles": {name: {...}}, ...}``.

    Raises:
        ConfigError: The file is missing, unreadable, or of another format.
    """
    try:
        data = json.loads(DATA_FILE.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(
            f"{DATA_FILE}: the GPU profiles' measured rates are unreadable ({e}); regenerate "
            "them with python benchmarks/gpu/rates.py"
        ) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigError(
            f"{DATA_FILE}: format {data.get('format') if isinstance(data, dict) else None!r}, "
            f"expected {FORMAT}; regenerate it with python benchmarks/gpu/rates.py"
        )
    return data


@dataclasses.dataclass(frozen=True)
class MeasuredRates:
    """The measured rates of one profile and where they come from.

    Attributes:
        values: Rate by profile field (``local``, ``h2d``, ``gather_rate``, ``spmm_rate``,
            ``sample_rate``); a field the checks did not measure is absent.
        rates_from: One line: the check file(s), GPU, torch version and date, and each rate.
        detail: Each rate's figure and how it was measured (for the profile's ``source``).
    """

    values: Mapping[str, float]
    rates_from: str
    detail: str


def _fmt(x: float, unit: str) -> str:
    if unit == "s":  # fixed costs: microseconds
        return f"{x * 1e6:.3g} us"
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M")):
        if x >= scale:
            return f"{x / scale:.3g} {prefix}{' ' if unit[0].islower() else ''}{unit}"
    return f"{x:.3g} {unit}"


def measured_rates(profile: str, data: Mapping[str, Any] | None = None) -> MeasuredRates | None:
    """The rates the GPU checks measured for built-in ``profile`` (``None``: none measured).

    Args:
        profile: A built-in profile name.
        data: The table (default: the package data, :func:`load_rates`).
    """
    entry = (load_rates() if data is None else data).get("profiles", {}).get(profile)
    if not entry or not entry.get("rates"):
        return None
    rates = entry["rates"]
    by_check: dict[str, list[str]] = {}
    for field in FIELDS:
        if field in rates:
            label, unit = _LABELS[field]
            text = f"{label} {_fmt(rates[field]['value'], unit)}"
            by_check.setdefault(rates[field]["check"], []).append(text)
    parts = []
    for file, texts in by_check.items():
        c = entry["checks"][file]
        date = str(c.get("date") or "?")[:10]
        parts.append(f"{file} ({c.get('gpu')}, torch {c.get('torch')}, {date}): {', '.join(texts)}")
    detail = "; ".join(
        f"{f} = {rates[f]['value']:.6g} from {rates[f]['check']} {rates[f]['figure']} "
        f"({rates[f]['what']})"
        for f in FIELDS
        if f in rates
    )
    return MeasuredRates(
        values={f: float(rates[f]["value"]) for f in FIELDS if f in rates},
        rates_from="; ".join(parts),
        detail=detail,
    )
