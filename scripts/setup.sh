#!/usr/bin/env bash
# Create .venv with the pinned dependencies (CPU torch 2.13.0) and install freekv-dse in it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# torch first, pinned, so nothing pulls a CUDA build.
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -e '.[dev]'
echo "freekv-dse installed in $(pwd)/.venv"
