#!/usr/bin/env bash
# Set up (idempotent) and run the checks: ruff, then pytest. Slow tests are listed as skipped unless
# --run-slow is given. Where this runs as root with apt-get (CI, a fresh container), Debian's PostgreSQL
# and Chromium are installed first, for the two-worker sweep test and the report rendering test;
# elsewhere those tests skip with their reason (in CI, CI=true, they fail instead).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  bash scripts/postgres.sh install || echo "warning: PostgreSQL could not be installed; its test will say so" >&2
  bash scripts/chromium.sh || echo "warning: Chromium could not be installed; its test will say so" >&2
fi
.venv/bin/ruff check .
.venv/bin/python -m pytest "$@"
