#!/usr/bin/env bash
# What one command on the GPU machine runs (from the repository root, with .whl carried; see
# scripts/gpu_wheels.sh): install the missing wheels into /tmp/site, then the GPU suite, writing under
# /tmp/gpu_suite. The device tool brings back at most 8 files from $OUT, no more than 2 folders down, 16
# MiB each, so the whole directory comes back as ONE archive, $OUT/gpu_suite.tgz, beside the few files
# worth reading at once (suite.json, suite.log, environment.txt, microbench.json, table.md). Extra arguments go to benchmarks/gpu_suite.py, e.g.
#   scripts/gpu_run.sh --parts tests,microbench,kernels,parity     # ~3-5 min on an H100 (estimate)
#   scripts/gpu_run.sh --parts decode --contexts 8192,32768
#   scripts/gpu_run.sh --parts decode --contexts 65536
#   scripts/gpu_run.sh --parts decode --contexts 32768 --batches 1 --methods peers
#   scripts/gpu_run.sh --quick                                     # everything, small: a first smoke run
# The suite stops itself after GPU_SUITE_TIMEOUT_S (default 560 s) so that the 600 s command limit never
# cuts it mid-write; suite.json and every finished part are already on disk by then.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/runs/gpu_out}"
SUITE=/tmp/gpu_suite
mkdir -p "$OUT" "$SUITE"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/*.whl || exit 1
  export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
  echo "no .whl/ here: run scripts/gpu_wheels.sh first and carry .whl (continuing with the image's packages)"
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1 FREEKV_DSE_CACHE="${FREEKV_DSE_CACHE:-/tmp/freekv-dse-cache}"
{ nvidia-smi || true; python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'cuda',
torch.version.cuda, 'triton', triton.__version__, 'transformers', transformers.__version__)"; } \
  > "$SUITE/environment.txt" 2>&1
timeout --signal=INT "${GPU_SUITE_TIMEOUT_S:-560}" python3 benchmarks/gpu_suite.py --out "$SUITE" "$@" \
  2>&1 | tee "$SUITE/suite.log"
status=${PIPESTATUS[0]}
tar czf "$OUT/gpu_suite.tgz" -C "$(dirname "$SUITE")" "$(basename "$SUITE")"
for f in suite.json suite.log environment.txt microbench.json decode/table.md; do
  [ -f "$SUITE/$f" ] && cp "$SUITE/$f" "$OUT/"
done
exit "$status"
