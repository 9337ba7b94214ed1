#!/usr/bin/env bash
# Install Debian's headless-capable Chromium for the report rendering test (tests/dse/test_report_chromium.py).
# Idempotent: does nothing when /usr/bin/chromium already runs. Needs root (or sudo) and the Debian mirror.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 && chromium --version >/dev/null 2>&1; then
  echo "chromium present: $(chromium --version)"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "chromium.sh: need root or sudo to apt-get install chromium" >&2; exit 1; }
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# fonts-liberation: readable text in screenshots on a minimal image.
$SUDO apt-get install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null
echo "chromium installed: $(chromium --version)"
