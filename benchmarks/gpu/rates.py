"""Copy the committed GPU checks' rates into the package: ``fleetgnn/cost/gpu_rates.json``.

After a new GPU check is committed under ``benchmarks/results/gpu/``::

    python benchmarks/gpu/rates.py           # rewrite fleetgnn/cost/gpu_rates.json
    python benchmarks/gpu/rates.py --check   # exit 1 if the package data is stale

The derivation (which figure gives which profile field, and how) is
:func:`fleetgnn.cost.gpu_rates.derive_rates`; ``tests/cost/test_gpu_rates.py`` checks that the
package data equals what it derives from the committed checks.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run from a checkout: this checkout's fleetgnn
    sys.path.insert(0, str(ROOT))

from fleetgnn.cost.gpu_rates import DATA_FILE, derive_rates, dumps, read_checks  # noqa: E402
from fleetgnn.errors import ConfigError  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "gpu"


def main(argv: list[str] | None = None) -> int:
    """Write (or, with ``--check``, compare) the package data; returns the exit status."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--results", type=Path, default=RESULTS, help="folder of GPU check JSONs")
    p.add_argument("--out", type=Path, default=DATA_FILE, help="package data file to write")
    p.add_argument("--check", action="store_true", help="only compare; exit 1 when stale")
    args = p.parse_args(argv)
    try:
        text = dumps(derive_rates(read_checks(args.results)))
    except ConfigError as e:
        print(f"rates.py: error: {e}", file=sys.stderr)
        return 2
    old = args.out.read_text() if args.out.exists() else None
    if args.check:
        if old != text:
            print(f"{args.out} is stale: run python benchmarks/gpu/rates.py", file=sys.stderr)
            return 1
        print(f"{args.out} is up to date")
        return 0
    args.out.write_text(text)
    print(f"{'unchanged' if old == text else 'wrote'} {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
