#!/usr/bin/env bash
# Prints a hash of the sources the lintloop wheel is built from, in DIR (default: this checkout).
# fetch_wheels.sh stores it beside the wheel; run.sh recomputes it on the device (no git there: `find`,
# over the files that travel) to tell whether the carried wheel is still the checkout's code.
set -euo pipefail
cd "${1:-$(dirname "$0")/../..}"
{ find lintloop rules runtime_probe tests/fixtures -name '*.py' -not -path '*/__pycache__/*' -print0
  printf '%s\0' setup.py pyproject.toml; } | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
