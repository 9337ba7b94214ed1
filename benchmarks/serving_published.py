"""Published serving results the request-level model (sim.serving) was not fitted to, each with the setup of
the published run, as benchmarks/validate_serving.py reproduces them. Data only: no constant of the
simulator was set from these rows (held-out checks).

Each row: where the number is published (paper, section, figure or table, the sentence it is in), the
model and GPU (registry names), the workload (request lengths), the SLO and capacity criterion the paper
used, the scheduler(s) its number is about with the settings the published run used, the published value
and what our run must support to reproduce it (`needs`: features sim.serving lacks, so such rows are
listed and never run). A row run at tensor parallelism says so in its settings (`tensor_parallel`: GPUs
per replica, sim/serving/tensor_parallel.py), its baseline's too.

Schedulers, as the papers' systems map onto sim.serving's:
- vLLM as Sarathi-Serve and DistServe ran it (v0.2-v0.3, before chunked prefill): `prefill-first`
  (sim/serving/prefill_first.py: waiting prompts batched into one prefill-only iteration, decode waits),
  with the run's `max_num_seqs` and `max_num_batched_tokens`: Sarathi-Serve 128 and 8192
  (microsoft/sarathi-serve osdi-experiments/figure-5-6/mistral7b_strict.yml `batch_size: 128`;
  sarathi/benchmark/capacity_search/config/config.py:65 `vllm_scheduler_max_tokens_in_batch` = the
  trace's max_seq_len 8192; commit ceaa066), DistServe 1024 and 16384 (LLMServe/DistServe
  evaluation/2-benchmark-serving/2-start-api-server.py:57-67).
- Sarathi-Serve: `chunked` with the paper's token budget and its 128 sequences (the same yml).
- DistServe: `disaggregated` (prefill and decode GPUs); Figure 1's prefill-only system: vLLM's
  `prefill-first` with one output token.

Engines (`engine`: the sim/engine_profiles profile of the engine the published run used, sim/serving/
engine.py): Sarathi-Serve ran its own LLMEngine for both its vLLM baseline and Sarathi-Serve on an A100
80GB PCIe; Vidur profiled that engine's host time per iteration on an A100 80GB node: `sarathi-serve-a100`
(added to the step model); at tensor parallel 2 (the Yi-34B rows) Vidur's profile of the same engine at
TP 2, `sarathi-serve-a100-tp2` (its Ray messaging to the workers adds about 6 ms per iteration). DistServe
ran vLLM and its own engine on OPT-13B on A100 80GB GPUs and profiled both per iteration (whole forward
passes, fitted): `distserve-vllm-opt13b-a100` and `distserve-opt13b-a100`, whole-step profiles that
replace the step model's iteration times, so those rows run on the engine they measured. `diagnostics`:
other engines each row also runs, printed as diagnostic lines (`none`: the step
model's kernels alone; `sarathi-serve-a100`: the proxy those rows used before).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["PublishedServing", "ROWS", "SHAREGPT_REQUESTS_CSV", "QUANTITIES", "FEATURES"]

SHAREGPT_REQUESTS_CSV = Path(__file__).resolve().parent / "data" / "sarathi_sharegpt_2048.csv"
# How the file was made: microsoft/sarathi-serve commit 72339db, data/processed_traces/
# sharegpt_8k_filtered_stats_llama2_tokenizer.csv (30731 requests: num_prefill_tokens, num_decode_tokens;
# median 1730 / P90 5696 prompt tokens, median 415 / P90 834 output tokens, as the paper's Table 2 states),
# shuffled as sarathi/benchmark/request_generator/trace_request_length_generator.py does
# (DataFrame.sample(frac=1, random_state=42) = numpy RandomState(42).permutation), the first 2048 kept
# (osdi-experiments/figure-5-6/mistral7b_strict.yml: num_requests 2048; no request exceeds its max_seq_len
# 8192, so none is clipped).

QUANTITIES = ("capacity_ratio", "goodput_rps", "decode_iteration_s")
FEATURES = ("LongBench request lengths",)


@dataclass(frozen=True)
class PublishedServing:
    """One published number and its setup (module docstring).

    quantity: "capacity_ratio" (scheduler's highest rate / the baseline's, same setup), "goodput_rps"
        (highest rate meeting the criterion, per GPU), or "decode_iteration_s" (one decode step).
    workload: {"requests_csv": path} (lengths from a file, Poisson arrivals) or {"input_tokens": n,
        "output_tokens": n} (fixed lengths, Poisson arrivals); a decode step: {"batch": b, "context": n}.
    criterion: what "meets" means in the paper: {"tbt_p99_s", "scheduling_delay_p50_s"} (Sarathi-Serve's
        capacity search), {"ttft_s", "tpot_s", "attainment"} (DistServe's SLO attainment: the share of
        requests meeting both at least `attainment`) or {"ttft_s", "tpot_s", "each_percentile"} (each SLO's
        percentile on its own, as Figure 1 plots them and DistServe's goodput search tests them).
    scheduler / baseline: sim.serving scheduler names; settings / baseline_settings: theirs
        (sim.serving.SchedulerSettings fields, and the pools: prefill_gpus, decode_gpus).
    engine: the engine profile (sim/engine_profiles) of the published run's engine (module docstring).
    diagnostics: other engine profiles to run the row with, printed as diagnostic lines.
    needs: features sim.serving lacks (FEATURES).
    tensor_parallel: GPUs per replica of the published run (both its scheduler and its baseline).
    """

    key: str
    source: str
    model: str
    gpu: str
    gpus_in_paper: str
    workload: dict[str, object]
    criterion: dict[str, float]
    quantity: str
    scheduler: str
    published: float
    published_note: str
    baseline: str | None = None
    settings: dict[str, object] = field(default_factory=dict)
    baseline_settings: dict[str, object] = field(default_factory=dict)
    engine: str = "sarathi-serve-a100"
    diagnostics: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()
    mapping: str = ""
    tensor_parallel: int = 1


_SARATHI = ("Agrawal et al., Taming Throughput-Latency Tradeoff in LLM Inference with Sarathi-Serve "
            "(OSDI 2024, arXiv 2403.02310)")
_DISTSERVE = ("Zhong et al., DistServe: Disaggregating Prefill and Decoding for Goodput-optimized LLM "
              "Serving (OSDI 2024, arXiv 2401.09670)")
# Table 3's strict SLO; the median scheduling delay bound of sarathi/benchmark/capacity_search/main.py:34-37
_SARATHI_CAPACITY = {"tbt_p99_s": 0.1, "scheduling_delay_p50_s": 2.0}
_SARATHI_SETTINGS = {"chunk_tokens": 512, "max_seqs": 128}
_SARATHI_VLLM = {"max_seqs": 128, "max_batched_tokens": 8192}
_DISTSERVE_VLLM = {"max_seqs": 1024, "max_batched_tokens": 16384}
# DistServe's own engine as its evaluation launched it (evaluation/2-benchmark-serving/2-start-api-server.py:
# 108-114): context stage FCFS, at most 8192 prompt tokens per batch (and 128 prompts: never binding at 512
# tokens), decoding stage at most 1024 sequences
_DISTSERVE_ENGINE = {"max_batched_tokens": 8192, "max_seqs": 1024}
_VLLM_ENGINE, _DISTSERVE_OWN = "distserve-vllm-opt13b-a100", "distserve-opt13b-a100"
_KERNELS = ("none", "sarathi-serve-a100")
# Sarathi-Serve's engine at tensor parallel 2 (Vidur's profile of it, CodeLlama-34B at TP 2): the Yi-34B rows
_SARATHI_TP2 = "sarathi-serve-a100-tp2"
# the Mistral-7B capacity runs of Sarathi-Serve (osdi-experiments/figure-5-6/mistral7b_strict.yml)
_SARATHI_MISTRAL: dict[str, Any] = {
    "model": "mistral-7b", "gpu": "a100-80g-pcie", "gpus_in_paper": "1 A100 80GB PCIe",
    "workload": {"requests_csv": "sarathi_sharegpt_2048.csv"}, "criterion": _SARATHI_CAPACITY,
    "quantity": "capacity_ratio", "scheduler": "chunked", "baseline": "prefill-first",
    "settings": _SARATHI_SETTINGS, "baseline_settings": _SARATHI_VLLM,
}
# Figure 1's SLOs: drawn in the figure, not in the paper's text; the values are from a summary of the paper
# (besthub.dev, "Why Separate Prefill and Decode? A Deep Dive into DistServe's Split Inference
# Architecture", July 2024: "SLOs: P90 TTFT = 0.4 s, P90 TPOT = 0.04 s" for this experiment). The paper
# itself could not be read offline.
# Figure 1 plots P90 TTFT and P90 TPOT, each against its SLO, and its goodput is "constrained by the more
# stringent one": each SLO's P90 on its own (`each_percentile`), as DistServe's goodput search tests them
# (simdistserve/benchmarks/search_binary.py:92-101 on simulate_dist.py:298-316: P90 TTFT < its target and
# P90 TPOT < its target, each over all requests), not 90% of requests within both
_DISTSERVE_FIG1 = {"ttft_s": 0.4, "tpot_s": 0.04, "each_percentile": 90.0}

ROWS: tuple[PublishedServing, ...] = (
    PublishedServing(
        key="sarathi-table3-mistral-decode",
        source=f"{_SARATHI}, section 5.1 and Table 3: the strict P99 TBT SLO is 5x 'the execution time of a "
        "decode iteration for a request (with prefill length of 4k and 32 batch size) running without any "
        "prefill interference'; Mistral-7B's strict SLO is 0.1 s (relaxed 0.5 s = 25x)",
        model="mistral-7b", gpu="a100-80g-pcie", gpus_in_paper="1 A100 80GB PCIe (Azure NC96ads v4)",
        workload={"batch": 32, "context": 4096}, criterion={}, quantity="decode_iteration_s",
        scheduler="blocking", published=0.020,
        published_note="0.1 s / 5 (the SLO is given to one digit: the decode iteration is 0.018-0.022 s if "
        "0.1 is rounded to the nearest 0.01 s)",
        mapping="StepCosts.decode_s(32, 4096): the decode step the serving model runs",
    ),
    PublishedServing(
        key="sarathi-5.2-mistral-strict",
        source=f"{_SARATHI}, section 5.2 (Figure 12): 'Sarathi-Serve achieves 3.5x higher capacity "
        "compared to vLLM under strict SLO (100ms, Mistral-7B) using a small token budget of 512' "
        "(openchat_sharegpt4; the OSDI abstract's 2.6x for Mistral-7B is row sarathi-abstract-mistral)",
        **_SARATHI_MISTRAL, published=3.5,
        published_note="Figure 12 at 100 ms",
        mapping="vLLM (max_num_seqs 128, max_num_batched_tokens 8192) -> prefill-first; Sarathi-Serve "
        "token budget 512, 128 sequences -> chunked 512",
    ),
    PublishedServing(
        key="sarathi-abstract-mistral",
        source=f"{_SARATHI}, abstract (OSDI 2024 version): 'For Mistral-7B on single A100 GPUs, we achieve "
        "2.6x higher serving capacity [...] as compared to vLLM'; the capacity search of section 5.1, which "
        "the OSDI artifact runs for Mistral-7B with microsoft/sarathi-serve "
        "osdi-experiments/figure-5-6/mistral7b_strict.yml (vLLM and Sarathi-Serve 512 at batch 128, the "
        "chat trace, 2048 requests; commit ceaa066)",
        **_SARATHI_MISTRAL, published=2.6,
        published_note="the abstract does not say at which SLO and trace the 2.6x is; read here as the "
        "strict SLO on the chat trace, the setup mistral7b_strict.yml runs (the Yi-34B figure of the same "
        "sentence, 3.7x, is its strict chat-trace capacity: row sarathi-5.1-yi34b-strict); unconfirmed",
        mapping="as sarathi-5.2-mistral-strict: the same runs, the abstract's number",
    ),
    PublishedServing(
        key="distserve-fig1-vllm",
        source=f"{_DISTSERVE}, section 1 and Figure 1: a 13B LLM (OPT-13B, the paper's 13B model), input 512 "
        "and output 64 tokens, one A100 80GB: 'Under the SLO attainment of 90%, the maximum achievable "
        "goodput on a single A100 GPU [...] is about 1.6 requests per second (rps)' for vLLM",
        model="opt-13b", gpu="a100-80g-sxm", gpus_in_paper="1 A100 80GB (SXM, the paper's cluster)",
        workload={"input_tokens": 512, "output_tokens": 64}, criterion=_DISTSERVE_FIG1,
        quantity="goodput_rps", scheduler="prefill-first", settings=_DISTSERVE_VLLM, engine=_VLLM_ENGINE,
        diagnostics=_KERNELS, published=1.6,
        published_note="'about 1.6'; SLOs P90 TTFT 0.4 s and P90 TPOT 0.04 s from a summary of the paper "
        "(the figure draws them; the text does not state them)",
        mapping="vLLM (max_num_seqs 1024, max_num_batched_tokens 16384) -> prefill-first; goodput = the "
        "highest Poisson rate at which >= 90% of requests meet both SLOs",
    ),
    PublishedServing(
        key="distserve-fig1-prefill-only",
        source=f"{_DISTSERVE}, section 1 and Figure 1: the same setup served prefill-only "
        "'achieve[s] per-GPU goodput of 5.6 rps for the prefill phase'",
        model="opt-13b", gpu="a100-80g-sxm", gpus_in_paper="1 A100 80GB",
        workload={"input_tokens": 512, "output_tokens": 1},
        criterion={"ttft_s": 0.4, "each_percentile": 90.0},
        quantity="goodput_rps", scheduler="prefill-first", settings=_DISTSERVE_VLLM, engine=_VLLM_ENGINE,
        diagnostics=(_DISTSERVE_OWN, *_KERNELS), published=5.6,
        published_note="TTFT SLO as the row above (from the same summary); which engine served 'only the "
        "prefill phase' is not said in what could be read",
        mapping="a prefill-only GPU = vLLM (prefill-first, DistServe's vLLM flags) with one output token "
        "per request (the prefill emits it), on DistServe's vLLM profile; DistServe's engine profile is a "
        "diagnostic",
    ),
    PublishedServing(
        key="distserve-fig1-disaggregated",
        source=f"{_DISTSERVE}, section 1: 'by allocating 2 GPUs for prefill and 1 GPU for decoding, we can "
        "effectively serve the model with an overall goodput of 10 rps, or equally 3.3 rps per GPU'",
        model="opt-13b", gpu="a100-80g-sxm", gpus_in_paper="3 A100 80GB (2 prefill + 1 decode)",
        workload={"input_tokens": 512, "output_tokens": 64}, criterion=_DISTSERVE_FIG1,
        quantity="goodput_rps", scheduler="disaggregated",
        settings={"prefill_gpus": 2, "decode_gpus": 1, **_DISTSERVE_ENGINE}, engine=_DISTSERVE_OWN,
        diagnostics=(_VLLM_ENGINE, *_KERNELS), published=3.3,
        published_note="the authors' arithmetic from the two separate-phase goodputs (10 rps / 3 GPUs), "
        "not a run of the disaggregated system",
        mapping="DistServe -> disaggregated with 2 prefill and 1 decode GPU, its engine's batching limits "
        "(8192 prompt tokens per prefill batch, 1024 decode sequences); per-GPU goodput = fleet rate / 3",
    ),
    PublishedServing(
        key="sarathi-table3-yi34b-decode",
        source=f"{_SARATHI}, section 5.1 and Table 3: the strict P99 TBT SLO is 5x 'the execution time of a "
        "decode iteration for a request (with prefill length of 4k and 32 batch size) running without any "
        "prefill interference'; Yi-34B's strict SLO is 0.2 s (microsoft/sarathi-serve osdi-experiments/"
        "figure-5-6/README.md@02d2567: `--tbt-slo-value 0.2` for yi34b_strict.yml, tensor parallel 2 on A100 "
        "80GB PCIe GPUs NVLinked in pairs, Azure NC96ads v4)",
        model="yi-34b", gpu="a100-80g-pcie", gpus_in_paper="2 A100 80GB PCIe, tensor parallel 2",
        workload={"batch": 32, "context": 4095}, criterion={}, quantity="decode_iteration_s",
        scheduler="blocking", published=0.040, tensor_parallel=2, engine=_SARATHI_TP2, diagnostics=("none",),
        published_note="0.2 s / 5 (the SLO is given to one digit: 0.036-0.044 s if 0.2 is rounded to the "
        "nearest 0.02 s)",
        mapping="StepCosts.decode_s(32, 4096) at tensor parallel 2: one shard's decode step plus its "
        "all-reduces; the context is 4095 + the new token, Yi-34B's 4096 positions",
    ),
    PublishedServing(
        key="sarathi-5.1-yi34b-strict",
        source=f"{_SARATHI}, section 5.1: 'Sarathi-Serve can sustain [...] 3.7x higher load than vLLM under "
        "strict SLO (Yi-34B, openchat_sharegpt4)'; its run: microsoft/sarathi-serve osdi-experiments/"
        "figure-5-6/yi34_strict.yml@02d2567 (vLLM batch 128, Sarathi-Serve chunk 512 batch 128, the chat "
        "trace, 2048 requests, tp_dimension 2) with `--tbt-slo-value 0.2` (README.md of that folder)",
        model="yi-34b", gpu="a100-80g-pcie",
        gpus_in_paper="2 A100 80GB PCIe (NVLinked pair), tensor parallel 2",
        workload={"requests_csv": "sarathi_sharegpt_2048.csv"},
        criterion={"tbt_p99_s": 0.2, "scheduling_delay_p50_s": 2.0},
        quantity="capacity_ratio", scheduler="chunked", baseline="prefill-first", settings=_SARATHI_SETTINGS,
        baseline_settings=_SARATHI_VLLM, published=3.7, published_note="section 5.1 text",
        tensor_parallel=2, engine=_SARATHI_TP2, diagnostics=("none",),
        mapping="vLLM (max_num_seqs 128, max_num_batched_tokens 8192) -> prefill-first; Sarathi-Serve "
        "token budget 512, 128 sequences -> chunked 512; both on replicas of 2 GPUs (tensor parallel 2); "
        "the trace's requests as they are, up to 8192 tokens: Sarathi-Serve's capacity search sets the "
        "model's max_model_len to the trace's max_seq_len 8192 (sarathi/benchmark/capacity_search/config/"
        "config.py:60) and, past Yi-34B's 4096 positions, forces a linear rope scaling instead of refusing "
        "(sarathi/utils/hf_utils.py:104-117, commit 96f9911)",
    ),
    PublishedServing(
        key="distserve-6.2-summarization",
        source=f"{_DISTSERVE}, section 6.2 (Figure 9b): summarization with OPT-66B on LongBench, DistServe "
        "sustains 4.3x the per-GPU rate of vLLM at 90% SLO attainment (TTFT 15 s, TPOT 0.15 s, Table 1)",
        model="opt-66b", gpu="a100-80g-sxm", gpus_in_paper="A100 80GB, vLLM intra-op 4",
        workload={"dataset": "LongBench (not shipped)"},
        criterion={"ttft_s": 15.0, "tpot_s": 0.15, "attainment": 0.9},
        quantity="capacity_ratio", scheduler="disaggregated", baseline="prefill-first", published=4.3,
        published_note="section 6.2 text",
        needs=("LongBench request lengths",), tensor_parallel=4,
        mapping="not reproducible here: tensor parallelism is modelled (intra-op 4 on the a100-80g-sxm's "
        "measured a100_dgx all-reduces, or DistServe's profiled OPT-66B steps at TP 4), but the LongBench "
        "request lengths are not shipped",
    ),
)
