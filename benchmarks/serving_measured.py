"""DistServe's measured per-request serving runs of OPT-13B on ShareGPT (vLLM and DistServe on A100 80GB
GPUs), which benchmarks/validate_serving_measured.py replays through the request-level serving model
(sim.serving). Data and where it is from; no constant of the simulator was set from these runs.

Source: LLMServe/DistServe, commit 20a1633 ("Add alignment data", 2024-04-23),
simdistserve/benchmarks/alignment/data-ground-truth/opt-13b-sharegpt/*.exp: real serving runs the authors
used to align their simulator (simdistserve/benchmarks/alignment/align_with_real.py at the same commit).
Extracted by scripts/extract_distserve_measured.py (its docstring has the command) into
benchmarks/data/distserve_opt13b_sharegpt_measured_{vllm,distserve}.csv: per request backend, config,
rate, n, request (index by issue time), prompt_len, output_len, issue_time_s (relative to the run's first
issue), ttft_ms, tpot_ms.

How the runs were made (DistServe's client, distserve/evaluation/2-benchmark-serving/ at commit 36306b0,
the version that writes this file format):
- Requests: the preprocessed ShareGPT set, shuffled once with the run's seed; a run of N requests takes
  the first N (2-benchmark-serving.py:147-154, 118), so every run of one invocation shares a prefix
  of the same requests. Each request asks for exactly output_len tokens (`max_tokens`, `ignore_eos`,
  backends.py:68-78); prompt + output is at most 2045 tokens here (OPT's 2048 positions).
- Arrivals: one Poisson process of 40000 exponential gaps drawn once after np.random.seed(seed)
  (2-benchmark-serving.py:133-142, 148, 158), shifted to start at 0 and scaled so the N-th request is
  issued at exactly N / rate (lines 124-125): the rate is exact, not a Poisson draw's. The files keep
  the issue times as issued (`issue_time`).
- Times are the client's (time.perf_counter around a streaming HTTP request, backends.py:25-57): TTFT =
  first streamed chunk - issue, so it includes HTTP, tokenisation and the engine's queueing; TPOT =
  (complete - first chunk) / (output_len - 1), 0 for a single output token (structs.py `ReqResult.
  from_http_request_result`, lines 51-69; DistServe's simulator divides by output_len instead,
  simdistserve/base/organize_data.py:126-130). vLLM's runs have no request of one output token.
- No warm-up request: runs of one invocation follow each other on the same server with a 5 s pause
  (2-benchmark-serving.py:205); by the clocks in the files, vllm-100-1 opened its invocation.

Runs (configs):
- `tp1`: vLLM (v0.2-era, the engine of DistServe's baselines) on one A100 80GB, TP 1, launched with
  --max-num-seqs 1024, --max-num-batched-tokens 16384, --gpu-memory-utilization 0.95, block size 16,
  --swap-space 16 (2-start-api-server.py, commit 8f13114 "Adjust vLLM startup parameters", 2024-04-22
  16:35 UTC, kept to today: evaluation/2-benchmark-serving/2-start-api-server.py:57-67). Before that
  commit max_num_batched_tokens was 65536; the runs are dated only by the data commit (2024-04-23 23:38
  UTC), so either may have been in force; at these rates no prefill iteration reaches 16384 tokens
  (validate_serving_measured.py prints the largest), so the two settings serve these runs alike.
  Rates 1, 1.5, 2, 2.5, 3, 3.5, 4 with N = 100 x rate, and one more run of 100 requests at rate 2.
- `c21d11`: DistServe with its context (prefill) instance on 2 GPUs (tensor parallel 2) and its decoding
  instance on 1 GPU (the launch default for OPT-13B, (2, 1, 1, 1) in 2-start-api-server.py at every
  commit; align_with_real.py:106 runs them at tp_prefill 2), context batches FCFS up to 128 prompts and
  8192 tokens, decoding up to 1024 sequences (2-start-api-server.py:108-114 at 82831f1; the artifact's
  launch script, evaluation/ae-scripts/e2e/opt-13b-distllm-server.sh, starts it with no other flag).
  Rates 3 to 12 (of the 3-GPU fleet) with N = 300, and 4.5 to 12 again with N = 100 x rate. Replayed as
  `disaggregated`: one prefill replica at tensor parallel 2, one decode replica at TP 1, the first token
  at the prefill's end (DistServe's context stage streams it before the KV migrates:
  distserve/single_stage_engine.py:374-403), and the KV migrated within the node over NVLink: DistServe
  places the context and decoding workers of a layer in one STRICT_PACK placement group (one node,
  distserve/engine.py:168-200) and copies the blocks GPU to GPU through CUDA IPC handles
  (distserve/worker.py:229-256), so the KV moves over the node's NVLink between A100 SXM GPUs: 300 GB/s
  per direction (A100 third-generation NVLink, 600 GB/s bidirectional per GPU, NVIDIA's A100 datasheet),
  so `KV_LINK_GBPS` is 300, not sim.serving's 50 GB/s NIC default.
- Not kept: `distserve-c21d12-*` (decode pipeline parallel 2: not modelled) and the unprefixed
  `distserve-{N}-{rate}.exp`, whose configuration no file states: by their clocks they ran between the
  vLLM runs on the same machine, and their attainment is not monotone in rate (at the alignment targets
  0.62 at 6 rps, 0.31 at 7.5, 0.82 at 8), so they do not form one configuration's curve.

SLOs:
- the authors' alignment targets: TTFT < 200 ms and TPOT < 100 ms, both strictly
  (align_with_real.py:28-29, 63-65 `--prefill-target 200`, `--decode-target 100`; its attainment
  compares with `<`);
- DistServe's chatbot SLO for OPT-13B: TTFT <= 0.25 s and TPOT <= 0.1 s (evaluation/2-benchmark-serving/
  plot.ipynb cell 2, `plot_fig8_upper`: "opt-13b-sharegpt" ... 0.25, 0.1; attainment with `<=`,
  `get_attainment` in cell 0), the SLO of the chatbot attainment plot it saves (chatbot-rate-p90.pdf);
  goodput = the rate where the attainment curve crosses 90% (cell 1 `find_intersection`).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["MeasuredRun", "Slo", "CONFIGS", "SLOS", "CSV_FILES", "KV_LINK_GBPS", "load_runs"]

_DATA = Path(__file__).resolve().parent / "data"
CSV_FILES = tuple(_DATA / f"distserve_opt13b_sharegpt_measured_{b}.csv" for b in ("vllm", "distserve"))
MODEL, GPU = "opt-13b", "a100-80g-sxm"
KV_LINK_GBPS = 300.0  # DistServe's KV migration: NVLink within one A100 SXM node, per direction (docstring)


@dataclass(frozen=True)
class Config:
    """How a config's runs were served and how sim.serving reproduces them (module docstring)."""

    backend: str
    text: str
    scheduler: str
    settings: dict[str, object]
    gpu_memory_utilization: float
    needs: tuple[str, ...] = ()
    prefill_tensor_parallel: int = 1  # disaggregated: GPUs of the prefill replica (the decode replica: 1)


# vLLM's launch flags: sim.serving.SchedulerSettings fields (the same as serving_published's
# _DISTSERVE_VLLM, which cites them)
CONFIGS: dict[str, Config] = {
    "tp1": Config("vllm", "vLLM, 1 A100 80GB (TP 1)", "prefill-first",
                  {"max_seqs": 1024, "max_batched_tokens": 16384}, 0.95),
    "c21d11": Config("distserve", "DistServe, prefill TP 2 + decode TP 1 (3 A100 80GB)", "disaggregated",
                     {"prefill_gpus": 1, "decode_gpus": 1, "max_batched_tokens": 8192, "max_seqs": 1024,
                      "kv_link_gbps": KV_LINK_GBPS, "first_token": "prefill"},
                     0.95, prefill_tensor_parallel=2),
}


@dataclass(frozen=True)
class Slo:
    """A TTFT and TPOT limit on each request; `strict`: within means < (else <=)."""

    name: str
    ttft_ms: float
    tpot_ms: float
    strict: bool
    source: str

    def within(self, ttft_ms: np.ndarray, tpot_ms: np.ndarray) -> np.ndarray:
        """Per request: both met (NaN, a request never served, never meets)."""
        ttft, tpot = np.nan_to_num(ttft_ms, nan=np.inf), np.nan_to_num(tpot_ms, nan=np.inf)
        if self.strict:
            return (ttft < self.ttft_ms) & (tpot < self.tpot_ms)
        return (ttft <= self.ttft_ms) & (tpot <= self.tpot_ms)


SLOS = (
    Slo("align", 200.0, 100.0, True,
        "LLMServe/DistServe@20a1633 simdistserve/benchmarks/alignment/align_with_real.py:28-29, 91-92"),
    Slo("chatbot", 250.0, 100.0, False,
        "LLMServe/DistServe@82831f1 evaluation/2-benchmark-serving/plot.ipynb cell 2 (OPT-13B chatbot)"),
)


@dataclass(frozen=True)
class MeasuredRun:
    """One measured run: its requests in issue order and what the client measured."""

    backend: str
    config: str
    rate: float
    n: int
    prompt_len: np.ndarray
    output_len: np.ndarray
    issue_time_s: np.ndarray
    ttft_ms: np.ndarray
    tpot_ms: np.ndarray

    @property
    def key(self) -> str:
        prefix = "vllm" if self.config == "tp1" else f"distserve-{self.config}"
        return f"{prefix}-{self.n}-{self.rate:g}"

    @property
    def on_curve(self) -> bool:
        """Whether the run is on its config's attainment curve: vLLM's runs of N = 100 x rate (the one
        complete series; the extra run of 100 requests at rate 2 is not), DistServe's of N = 300 (100
        per GPU on 3 GPUs at every rate, as plot.ipynb's `load_result` picks them and align_with_real.py
        replays them)."""
        return self.n == (300 if self.config == "c21d11" else round(100 * self.rate))


def load_runs(paths: tuple[Path, ...] = CSV_FILES) -> list[MeasuredRun]:
    """Every run in the files, ordered by config, rate and N."""
    groups: dict[tuple[str, str, float, int], list[dict[str, str]]] = {}
    for path in paths:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                key = (row["backend"], row["config"], float(row["rate"]), int(row["n"]))
                groups.setdefault(key, []).append(row)
    runs = []
    for (backend, config, rate, n), rows in sorted(groups.items(), key=lambda kv: (kv[0][1], *kv[0][2:])):
        rows.sort(key=lambda r: int(r["request"]))
        if len(rows) != n or [int(r["request"]) for r in rows] != list(range(n)):
            raise ValueError(f"run {backend} {config} {rate:g} {n}: requests are not 0..{n - 1}")

        def col(name: str, kind: type, rows: list[dict[str, str]] = rows) -> np.ndarray:
            return np.array([kind(r[name]) for r in rows])

        runs.append(MeasuredRun(backend, config, rate, n, col("prompt_len", int), col("output_len", int),
                                col("issue_time_s", float), col("ttft_ms", float), col("tpot_ms", float)))
    return runs
