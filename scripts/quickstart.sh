#!/usr/bin/env bash
# Set up (idempotent), then run the main job on the embedded default: the smoke study (smollm2-135m on
# CPU, real runtime + simulator) and its HTML report.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/dse sweep studies/smoke.yaml
.venv/bin/dse report studies/smoke.yaml --out reports/smoke.html
echo "report: $(pwd)/reports/smoke.html"
