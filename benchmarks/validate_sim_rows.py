"""The rows of benchmarks/validate_sim.py: each published number (benchmarks/validate_sim_published.py)
with the simulator runs that predict it, in either implementation mode.

Imported by validate_sim.py, which puts the repository and benchmarks/ on sys.path.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from validate_sim_published import (
    ARKVALE_MAX_SPEEDUP,
    ARKVALE_MEAN_SPEEDUP,
    ARKVALE_RECALLS,
    INFINIGEN_FETCHED_TOKENS_2048,
    INFINIGEN_SOURCE,
    INFINIGEN_SPEEDUP_OVER_FLEXGEN_2048,
    INFINIGEN_THROUGHPUT,
    QUEST_E2E_SPEEDUP,
    QUEST_SELF_ATTENTION_SPEEDUP,
    SHADOWKV_BATCHES,
    SHADOWKV_BUDGET,
    SHADOWKV_PUBLISHED,
    SHADOWKV_SVD_64K_S,
    SHADOWKV_TARGET_MODELS,
)

from sim.config import SimConfig
from sim.demand import Demand
from sim.engine import prepare, run_simulation
from sim.methods.base import Kernel
from sim.synthetic import synthetic_demand
from traces.models import get_model

__all__ = ["Row", "all_rows", "authors_infinite_batch"]


@dataclass(frozen=True)
class Row:
    """One published number and how to predict it (predict(mode) -> value in the row's unit)."""

    key: str
    source: str
    setup: str
    unit: str
    published: float
    predict: Callable[[str], float]
    note: str = ""
    # one of the target rows (the first validation's 19: its 80% target counts these); False: added since
    named: bool = True
    measured: bool = True  # False: the authors' own projection, not a measurement (tallied apart)
    # the simulated method whose prediction the row checks (a speedup over full attention: the sparse
    # method; full attention's own throughput: "dense"); sim/validation_bands.py tallies rows by it
    method: str = ""


@functools.cache
def _synthetic(spec: str, model: str) -> Demand:
    return synthetic_demand(spec, model, seed=0)


def _throughput(cfg: SimConfig, demand: Demand | None = None) -> float:
    """Decode throughput (tokens/s) of a config: batch * steps / decode time (prefill excluded)."""
    res = run_simulation(cfg, demand)
    if res.oom:
        raise SystemExit(f"validate_sim: {cfg.method} batch {cfg.batch_size}: {res.oom_message}")
    return cfg.batch_size * len(res.step_latency_s) / float(res.step_latency_s.sum())


# ----- ShadowKV (Sun et al., arXiv 2410.21465, Table "Generation throughput (tokens/s) on an A100") -----
def authors_infinite_batch(model: str, ctx_k: int) -> float:
    """tokens/s of full attention at an infinite batch as the ShadowKV table's figures are computed:
    2 TiB/s (the A100's nominal 2 TB/s read as 2048 GiB/s) over one sequence's bf16 K+V bytes."""
    kv_bytes = ctx_k * 1024 * get_model(model).kv_bytes_per_token(2)
    return 2 * 2**40 / kv_bytes


_SHADOWKV_DEMAND = "correction=1.0,hit=0.6"


# "assuming unlimited GPU memory": the projection rows raise the GPU's capacity only (1 PiB), so the
# memory fit does not report out of memory; bandwidth and compute stay the A100's
_UNLIMITED_GPU_MEMORY = {"gpu.memory_bytes": 2**50}
# the published runs are research code (plain PyTorch), which may fill the whole GPU: no serving engine's
# headroom (sim.memory's gpu_memory_utilization, 0.9 by default as vLLM keeps)
_RESEARCH_CODE_MEMORY_SHARE = 1.0


def _shadowkv_cfg(
    model: str, ctx_k: int, method: str, batch: int, mode: str, unlimited_memory: bool = False
) -> SimConfig:
    sparse = SHADOWKV_BUDGET[ctx_k]
    return SimConfig(
        gpu_memory_utilization=_RESEARCH_CODE_MEMORY_SHARE,
        model=model,
        hardware="a100-80g-sxm",
        method=method,
        batch_size=batch,
        input_tokens=ctx_k * 1024,
        output_tokens=100,
        page_size=8,
        sink_tokens=0,
        window_tokens=32,
        budget_tokens=sparse + 32,
        implementation=mode,  # type: ignore[arg-type]
        method_options={"svd_interval_tokens": 10**9} if method == "shadowkv" else {},
        hardware_overrides=_UNLIMITED_GPU_MEMORY if unlimited_memory else {},
    )


def _shadowkv_rows() -> list[Row]:
    rows = []
    for (model, ctx_k), published in SHADOWKV_PUBLISHED.items():
        rows.extend(_shadowkv_cell_rows(model, ctx_k, published))
    return rows


def _shadowkv_cell_rows(model: str, ctx_k: int, published: tuple[float, float, float]) -> list[Row]:
    """The three rows of one (model, context) cell of the table: full attention, ShadowKV, and full
    attention at ShadowKV's batch (the authors' projection)."""
    src = "ShadowKV (arXiv 2410.21465) throughput table, A100; repo index.html; batches: test/e2e.py"
    full, shadow, full_big = published
    sparse, (b_full, b_sk) = SHADOWKV_BUDGET[ctx_k], SHADOWKV_BATCHES[model, ctx_k]
    named = model in SHADOWKV_TARGET_MODELS
    base = f"{model}, A100 80GB (a100-80g-sxm), {ctx_k}K ctx, 100 tokens decoded"
    return [
        Row(
            f"shadowkv/{model}/{ctx_k}k/full",
            src,
            f"{base}, full attention (FlashAttention, all KV on GPU), batch {b_full}",
            "tok/s",
            full,
            lambda mode, m=model, c=ctx_k, b=b_full: _throughput(_shadowkv_cfg(m, c, "dense", b, mode)),
            named=named,
            method="dense",
        ),
        Row(
            f"shadowkv/{model}/{ctx_k}k/shadowkv",
            src,
            f"{base}, ShadowKV sparse budget {sparse}, batch {b_sk}",
            "tok/s",
            shadow,
            lambda mode, m=model, c=ctx_k, b=b_sk: _throughput(
                _shadowkv_cfg(m, c, "shadowkv", b, mode), _synthetic(_SHADOWKV_DEMAND, m)
            ),
            f"synthetic demand {_SHADOWKV_DEMAND} (the paper: its cache cuts fetched data by 60%)",
            named=named,
            method="shadowkv",
        ),
        Row(
            f"shadowkv/{model}/{ctx_k}k/full-at-{b_sk}",
            src,
            f"{base}, full attention at ShadowKV's batch {b_sk} assuming unlimited GPU memory",
            "tok/s",
            full_big,
            lambda mode, m=model, c=ctx_k, b=b_sk: _throughput(
                _shadowkv_cfg(m, c, "dense", b, mode, unlimited_memory=True)
            ),
            "authors' projection, not measured (does not fit in 80 GB; simulated with gpu.memory_bytes "
            "raised" + ("; same value for both Llama-3 models)" if named else ")"),
            named=named,
            measured=False,
            method="dense",
        ),
    ]


def _shadowkv_svd_s(mode: str) -> float:
    """One layer's SVD at prefill (the model's prefill_svd over its sparse layers), batch 1, 64K prompt."""
    cfg = _shadowkv_cfg("llama-3-8b-1m", 60, "shadowkv", 1, mode).replace(input_tokens=65536, output_tokens=4)
    res = run_simulation(cfg, _synthetic(_SHADOWKV_DEMAND, "llama-3-8b-1m"))
    return float(res.prefill_breakdown_s["prefill_svd"]) / get_model("llama-3-8b-1m").n_layers


def _shadowkv_svd_row() -> Row:
    return Row(
        "shadowkv/svd/64k",
        "ShadowKV (arXiv 2410.21465) appendix Table 12, as quoted in ByteDance-Seed/ShadowKV issue #13",
        "Llama-3-8B-1M keys, A100: torch.svd of one layer's (65536 x 1024) fp32 pre-RoPE key matrix, batch 1 "
        "(shape inferred: the table was not read here)",
        "s",
        SHADOWKV_SVD_64K_S,
        _shadowkv_svd_s,
        "the model's SVD rate is the estimate svd_flops_fraction (0.01 of the FP16 tensor peak, range "
        "0.003-0.0625, the FP32 CUDA-core share); at this shape 17.19 ms needs 25 TFLOP/s on the R-SVD "
        "count, above the A100's 19.5 TFLOP/s FP32 peak, so the shape read here is in doubt",
        named=False,
        method="shadowkv",
    )


# ----- Quest (Tang et al., ICML 2024, arXiv 2406.10774) -----
def _quest_cfg(model: str, hardware: str, dense_layers: tuple[int, ...], mode: str) -> SimConfig:
    return SimConfig(
        gpu_memory_utilization=_RESEARCH_CODE_MEMORY_SHARE,
        model=model,
        hardware=hardware,
        method="quest",
        batch_size=1,
        input_tokens=32768 - 64,
        output_tokens=64,
        page_size=16,
        sink_tokens=0,
        window_tokens=16,
        budget_tokens=2048,
        dense_layers=dense_layers,
        implementation=mode,  # type: ignore[arg-type]
    )


def _quest_self_attention_speedup(mode: str) -> float:
    """GPU time of one layer's self-attention: FlashInfer over 32K vs Quest's estimate + top-k + sparse
    attention (the paper profiles kernels; host costs do not enter)."""
    sparse = prepare(_quest_cfg("llama-2-7b", "rtx-4090", (), mode), None).work
    full = prepare(_quest_cfg("llama-2-7b", "rtx-4090", tuple(range(32)), mode), None).work

    def at(work: dict, op: str) -> float:
        item = work[op]
        assert isinstance(item, Kernel)
        return float(np.asarray(item.seconds)[-1, 5])

    return at(full, "attention") / (at(sparse, "select") + at(sparse, "attention"))


def _quest_e2e_speedup(mode: str) -> float:
    dense = tuple(range(32))
    full = run_simulation(_quest_cfg("longchat-7b-v1.5-32k", "rtx-6000-ada", dense, mode))
    quest = run_simulation(_quest_cfg("longchat-7b-v1.5-32k", "rtx-6000-ada", (0, 1), mode))
    return float(full.step_latency_s.mean() / quest.step_latency_s.mean())


def _quest_rows() -> list[Row]:
    return [
        Row(
            "quest/self-attention/32k",
            "Quest (arXiv 2406.10774) Sec. 4.3.1, Fig. 9",
            "Llama-2-7B, RTX 4090, 32K ctx, batch 1, page 16, budget 2048: self-attention time, "
            "FlashInfer / Quest (estimate + top-k + sparse attention)",
            "x",
            QUEST_SELF_ATTENTION_SPEEDUP,
            _quest_self_attention_speedup,
            method="quest",
        ),
        Row(
            "quest/e2e/32k/fp16",
            "Quest (arXiv 2406.10774) Sec. 4.3.2, Fig. 10",
            "LongChat-7B-v1.5-32K FP16, RTX 6000 Ada, 32K ctx, batch 1, page 16, budget 2048, first 2 "
            "layers dense: decode latency, full KV (FlashInfer) / Quest",
            "x",
            QUEST_E2E_SPEEDUP,
            _quest_e2e_speedup,
            method="quest",
        ),
    ]


# ----- ArkVale (Chen et al., NeurIPS 2024), Sec. 6.5, Fig. 9a -----
@functools.cache
def _arkvale_speedups(mode: str) -> tuple[float, ...]:
    out = []
    model = "longchat-7b-v1.5-32k"
    for ctx in (10_000, 20_000, 30_000):
        for budget, recalls in ARKVALE_RECALLS.items():
            common = dict(
                model=model,
                hardware="a100-80g-pcie",
                method="arkvale",
                batch_size=4,
                input_tokens=ctx,
                output_tokens=64,
                page_size=32,
                sink_tokens=32,
                window_tokens=64,
                budget_tokens=budget,
                implementation=mode,
                method_options={"group_heads": 32},
            )
            common["gpu_memory_utilization"] = _RESEARCH_CODE_MEMORY_SHARE
            cfg = SimConfig(dense_layers=(0, 1), **common)  # type: ignore[arg-type]
            sparse_layers = 30
            hit = 1.0 - recalls / (sparse_layers * cfg.selected_pages)
            demand = _synthetic(f"correction=1.0,hit={hit:.5f}", model)
            ark = run_simulation(cfg, demand)
            full = run_simulation(SimConfig(dense_layers=tuple(range(32)), **common), demand)  # type: ignore[arg-type]
            out.append(float(full.step_latency_s.mean() / ark.step_latency_s.mean()))
    return tuple(out)


def _arkvale_rows() -> list[Row]:
    setup = (
        "LongChat-7B-v1.5-32K, A100 80GB PCIe, batch 4, page 32, ctx ~10K/20K/30K x budget 512-4096 "
        "(12 settings): decode latency, full KV / ArkVale"
    )
    note = "synthetic demand: ArkVale Fig. 4b recalls per step"
    return [
        Row(
            "arkvale/latency/max",
            "ArkVale (NeurIPS 2024) Sec. 6.5, Fig. 9a: 'up to 2.2x'",
            setup + ", max",
            "x",
            ARKVALE_MAX_SPEEDUP,
            lambda mode: max(_arkvale_speedups(mode)),
            note,
            method="arkvale",
        ),
        Row(
            "arkvale/latency/mean",
            "ArkVale (NeurIPS 2024) Sec. 6.5, Fig. 9a: '1.7x in average'",
            setup + ", mean",
            "x",
            ARKVALE_MEAN_SPEEDUP,
            lambda mode: float(np.mean(_arkvale_speedups(mode))),
            note,
            method="arkvale",
        ),
    ]


# ----- InfiniGen (Lee et al., OSDI 2024) on FlexGen, RTX A6000 + PCIe 3.0 (speedup/scripts) -----
_INFINIGEN_PROMPT, _INFINIGEN_GEN = 1920, 128


def _infinigen_cfg(method: str, batch: int, mode: str) -> SimConfig:
    """OPT-13B, 1920 + 128 tokens on the rtx-a6000-pcie3 profile: InfiniGen prefetching the paper's
    average important-token count per head (page 1: token granularity), or FlexGen's own loop with the whole
    KV in pageable host memory (full-offload, runtime flexgen)."""
    fetched = INFINIGEN_FETCHED_TOKENS_2048
    return SimConfig(
        gpu_memory_utilization=_RESEARCH_CODE_MEMORY_SHARE,
        model="opt-13b",
        hardware="rtx-a6000-pcie3",
        method=method,
        batch_size=batch,
        input_tokens=_INFINIGEN_PROMPT,
        output_tokens=_INFINIGEN_GEN,
        page_size=1,
        sink_tokens=0,
        window_tokens=1,
        budget_tokens=fetched,
        implementation=mode,  # type: ignore[arg-type]
        method_options={"runtime": "flexgen"} if method == "full-offload" else {},
    )


@functools.cache
def _flexgen_total_s(method: str, batch: int, mode: str) -> float:
    """FlexGen's total latency: prefill (which yields the first token) + the other 127 decode steps
    (flex_opt.py run_flexgen: decode_latency over gen_len - 1 steps)."""
    res = run_simulation(_infinigen_cfg(method, batch, mode))
    if res.oom:
        raise SystemExit(f"validate_sim: {method} batch {batch}: {res.oom_message}")
    return float(res.prefill_s) + float(res.step_latency_s[: _INFINIGEN_GEN - 1].sum())


def _infinigen_rows() -> list[Row]:
    setup = (
        "OPT-13B, RTX A6000 48GB on PCIe 3.0 x16 (rtx-a6000-pcie3), FlexGen --percent 100 0 0 100 100 0 "
        "--overlap false (KV in pageable host memory), 1920 prompt + 128 generated tokens"
    )
    note = (
        f"synthetic demand: {INFINIGEN_FETCHED_TOKENS_2048} tokens prefetched per head (the paper's average "
        "count above max - alpha at 2048, Fig. 16a)"
    )
    rows = [
        Row(
            f"infinigen/throughput/b{b}",
            f"{INFINIGEN_SOURCE}, Fig. 15: 'InfiniGen 27.36 -> 41.99 tokens/s' (batch 4 -> 20)",
            f"{setup}, batch {b}, InfiniGen --alpha 4 --partial-weight-ratio 0.2 --max-num-kv 409 "
            "(figure15/run.sh): batch x 128 / total latency",
            "tok/s",
            published,
            lambda mode, b=b: b * _INFINIGEN_GEN / _flexgen_total_s("infinigen", b, mode),
            note,
            named=False,
            method="infinigen",
        )
        for b, published in INFINIGEN_THROUGHPUT.items()
    ]
    rows.append(
        Row(
            "infinigen/speedup-over-flexgen/2048",
            f"{INFINIGEN_SOURCE}, Fig. 16a: speedup over FlexGen 'up to 5.28x' (sequence 512-2048)",
            f"{setup}, batch 8 (figure16a/run.sh, prompt 1920): FlexGen's total latency / InfiniGen's",
            "x",
            INFINIGEN_SPEEDUP_OVER_FLEXGEN_2048,
            lambda mode: _flexgen_total_s("full-offload", 8, mode) / _flexgen_total_s("infinigen", 8, mode),
            note + "; FlexGen priced as its loop runs (full-offload, runtime flexgen)",
            named=False,
            method="infinigen",
        )
    )
    return rows


def all_rows() -> list[Row]:
    """Every validation row, in table order."""
    return _shadowkv_rows() + [_shadowkv_svd_row()] + _quest_rows() + _arkvale_rows() + _infinigen_rows()
