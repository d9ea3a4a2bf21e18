#!/usr/bin/env bash
# The prepared GPU check (see benchmarks/gpu/README.md):
#   bash benchmarks/gpu/check.sh OUT_DIR [--device cuda|cpu] [--tier parity|speed|all] [--budget-s S] ...
# Installs each wheel carried in .whl/ whose module does not import (pymetis; typing_extensions,
# which pymetis needs, where torch did not bring it) into /tmp/site, puts /tmp/site and this
# checkout first on PYTHONPATH (the GPU machine has no fleetgnn installed) and runs check.py.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 2
py="${PYTHON:-python3}"
if [ "$#" -lt 1 ] || [ "${1#-}" != "$1" ]; then
    echo "usage: bash benchmarks/gpu/check.sh OUT_DIR [--device cuda|cpu] [--tier parity|speed|all] [--budget-s S]" >&2
    exit 2
fi
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
installed=""
for whl in .whl/*.whl; do
    [ -e "$whl" ] || continue
    module="$(basename "$whl" | cut -d- -f1 | tr 'A-Z' 'a-z')"
    if "$py" -c "import $module" 2>/dev/null; then
        continue
    fi
    if "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/site "$whl" \
        || "$py" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall("/tmp/site")' \
            "$whl"; then  # without pip: a wheel with no scripts or data is its files, unpacked
        installed="$installed $(basename "$whl")"
    else
        echo "check.sh: could not install $whl" >&2
    fi
done
if [ -n "$installed" ]; then
    export PYTHONPATH="/tmp/site:$PYTHONPATH"
fi
if "$py" -c "import pymetis" 2>/dev/null; then
    export FLEETGNN_CHECK_PYMETIS="imports${installed:+ (installed from .whl/:$installed)}"
else
    export FLEETGNN_CHECK_PYMETIS="does not import (.whl/ holds: $(ls .whl 2>/dev/null | tr '\n' ' '))"
fi
echo "check.sh: pymetis $FLEETGNN_CHECK_PYMETIS" >&2
exec "$py" benchmarks/gpu/check.py "$@"
