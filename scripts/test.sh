#!/usr/bin/env bash
# Set up (idempotent) and run the checks: ruff, then pytest (slow tests listed as skipped unless enabled).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/python -m pytest "$@"
