"""The SLO and scheduler options of `dse serve` (sim/serving/slos.py, sim/serving/schedulers.py): which
per-token statistic the SLO binds, the schedulers and their settings, the router."""

from __future__ import annotations

from collections.abc import Callable

import click

from dse.commands.number_types import number
from sim.serving.slos import TOKEN_STATS
from traces.numbers import MILLISECONDS, SECONDS, TOKENS, Range

__all__ = ["slo_options", "scheduler_options"]

SEQS = Range(1, 1 << 16, integer=True, unit="sequences", why="at most 65536 per GPU")
LINK_GBPS = Range(0, 1e5, lo_open=True, unit="GB/s")
TENSOR_PARALLEL = Range(1, 64, integer=True, unit="GPUs per replica", why="at most 64")


def _apply(command: Callable, options: list[Callable]) -> Callable:
    """Decorate `command` with `options` as if written top to bottom above it."""
    for option in reversed(options):
        command = option(command)
    return command


def slo_options(command: Callable) -> Callable:
    """--ttft-slo-s, --tpot-slo-ms, --token-slo-stat, --queue-slo-s."""
    return _apply(command, [
        click.option(
            "--ttft-slo-s", type=number(SECONDS), default=None,
            help="p99 time-to-first-token SLO, seconds [none: the fleet must only keep up, --queue-slo-s]",
        ),
        click.option(
            "--tpot-slo-ms", type=number(MILLISECONDS), default=50.0, show_default=True,
            help="per-token latency SLO, milliseconds, on the statistic --token-slo-stat",
        ),
        click.option(
            "--token-slo-stat", type=click.Choice(list(TOKEN_STATS)), default="tpot-p99", show_default=True,
            help="what --tpot-slo-ms binds: tpot-p99 = p99 over requests of a request's mean time per output "
            "token (DistServe, Vidur); tbt-pN = the N-th percentile over every gap between two tokens of "
            "every request (Sarathi-Serve's capacity criterion at p99: a prefill stall counts in full)",
        ),
        click.option(
            "--queue-slo-s", type=number(SECONDS), default=5.0, show_default=True,
            help="without --ttft-slo-s: p99 queueing delay a fleet that keeps up stays under (Vidur's "
            "capacity-search bound)",
        ),
    ])


def scheduler_options(command: Callable) -> Callable:
    """--scheduler, --router, --chunk-tokens, --kv-link-gbps, --first-token, --max-seqs, --max-batched-tokens,
    --engine,
    --tensor-parallel, --prefill-tensor-parallel, --decode-tensor-parallel."""
    return _apply(command, [
        click.option(
            "--scheduler", "schedulers", default="blocking,chunked,disaggregated", show_default=True,
            help="comma-separated: blocking (prefill blocks decode, as the research runtimes run), "
            "prefill-first (vLLM v0.2-v0.3: waiting prompts prefilled together, decode waits), "
            "chunked (Sarathi-Serve / vLLM chunked prefill), disaggregated (prefill and decode pools)",
        ),
        click.option(
            "--router", type=click.Choice(["least-loaded", "round-robin"]), default="least-loaded",
            show_default=True, help="how a fleet routes requests (and prefilled KV) to its GPUs",
        ),
        click.option(
            "--chunk-tokens", type=number(TOKENS), default=512, show_default=True,
            help="chunked: tokens per iteration (decode + prefill chunks; Sarathi-Serve's and Vidur's 512)",
        ),
        click.option(
            "--kv-link-gbps", type=number(LINK_GBPS), default=50.0, show_default=True,
            help="disaggregated: GB/s of the KV transfer from a prefill to a decode GPU (one 400 Gb/s "
            "InfiniBand NIC per GPU)",
        ),
        click.option(
            "--first-token", type=click.Choice(["handoff", "prefill"]), default="handoff", show_default=True,
            help="disaggregated: when a request's first token reaches the user: at the KV handoff to its "
            "decode GPU, or at the end of its prefill, before the KV moves (DistServe's context stage "
            "streams it then; the wait for a decode GPU and the transfer then count in TPOT)",
        ),
        click.option(
            "--max-seqs", type=number(SEQS), default=None,
            help="sequences one GPU runs at most, as a serving engine's max_num_seqs [none: memory alone]",
        ),
        click.option(
            "--max-batched-tokens", type=number(TOKENS), default=None,
            help="prefill-first and disaggregated: prompt tokens one prefill iteration takes at most, "
            "vLLM's max_num_batched_tokens, DistServe's context max_tokens_per_batch [none: prefill-first "
            "memory alone, disaggregated one prompt per iteration]",
        ),
        click.option(
            "--engine", default="none", show_default=True,
            help="serving engine whose host time per iteration (scheduling, input preparation, sampling, "
            "output processing) adds to every iteration: none (kernels only) or an engine profile "
            "(sim/engine_profiles: sarathi-serve-a100, Vidur's profile of Sarathi-Serve's vLLM-0.2-era "
            "engine), or a whole-step profile that replaces the step model's iteration times on the model "
            "and GPU it was measured on (distserve-vllm-opt13b-a100, distserve-opt13b-a100: DistServe's "
            "profiles of vLLM and of its engine, OPT-13B on an A100 80GB), or a path to such a YAML file; "
            "NAME@low or NAME@high puts every term at that end of its range. A profile prices the tensor-"
            "parallel degree it was measured at: the NAME-tpN profiles in sim/engine_profiles (e.g. "
            "sarathi-serve-a100-tp2, distserve-opt66b-a100-tp4) serve --tensor-parallel N",
        ),
        click.option(
            "--tensor-parallel", type=number(TENSOR_PARALLEL), default=1, show_default=True,
            help="GPUs per replica (Megatron-style tensor parallelism as vLLM runs it: each GPU holds 1/T of "
            "the heads, FFN and vocabulary and its heads' KV; two all-reduces per layer priced from measured "
            "NCCL times, sim/interconnect_profiles); GPU counts and prices are replicas x T",
        ),
        click.option(
            "--prefill-tensor-parallel", type=number(TENSOR_PARALLEL), default=None,
            help="disaggregated: GPUs per prefill replica [--tensor-parallel]",
        ),
        click.option(
            "--decode-tensor-parallel", type=number(TENSOR_PARALLEL), default=None,
            help="disaggregated: GPUs per decode replica [--tensor-parallel]",
        ),
    ])
