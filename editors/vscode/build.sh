#!/usr/bin/env bash
# Build the VS Code extension into lintloop.vsix: install the pinned dependencies, compile, run the test
# (a real `lintloop server`: LINTLOOP_PYTHON, else `lintloop` on the PATH), then package.
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund
npm test
npx vsce package --out lintloop.vsix
