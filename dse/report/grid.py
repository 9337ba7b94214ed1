"""The capacity grid of one profile: simulator runs over batch sizes and context lengths.

The configuration is the profile's recommendation (else the untuned-FreeKV baseline, else the most
accurate trial), compared with dense attention on the same grid. Each point is the study's whole
decode (its output length) after a prompt of the given length: memory at the final context (prompt +
output), latency sampled over the decode (dse/report/sampled.py), replaying that trial's measured
demand (see dse/report/simulate.py). Batch and context grids: the study's
workload values plus powers of two, bounded by the model's maximum positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dse.report.data import ReportData, Run
from dse.report.sampled import sampled_decode
from dse.report.simulate import ReplayDemand, memory_of, sim_config, sim_method, workload

__all__ = ["CapacityGrid", "capacity_grid", "GRID_BATCHES"]

GRID_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
_CONTEXTS = (2048, 8192, 32768, 131072)
_MAX_CONTEXTS = 5


@dataclass(frozen=True)
class CapacityGrid:
    """by_batch[method]: [(batch, SimResult dict)] at input_tokens; by_context[method]: [(context, dict)]
    at batch_size; memory[(method, context)]: [(batch, memory dict)]; max_batch[(method, context)]: int,
    all at the final context (prompt + output_tokens). method: the simulator method of `run` (compared
    with "dense"). output_tokens: the study's whole decode; sampled: how its latency was sampled."""

    profile: str
    model: str
    run: Run
    method: str
    input_tokens: int
    output_tokens: int
    batch_size: int
    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    by_batch: dict[str, list[tuple[int, dict]]]
    by_context: dict[str, list[tuple[int, dict]]]
    memory: dict[tuple[str, int], list[tuple[int, dict]]]
    max_batch: dict[tuple[str, int], int]
    gpu_memory_bytes: int
    mapped_from: str | None
    synthetic: str | None

    @property
    def sampled(self) -> str:
        """How the decode's latency was sampled (dse/report/sampled.py), e.g. '64 of 16384 decode steps'."""
        labels = [d.get("sampled", {}).get("label") for rows in self.by_batch.values() for _, d in rows]
        return next((x for x in labels if x and not x.startswith("not simulated")), "")

    def largest_under_slo(
        self, method: str, slo_s: float | None, stat: str = "mean"
    ) -> tuple[int, dict] | None:
        """(batch, result) of the largest simulated batch that fits memory and whose per-token latency
        (`stat`) meets the SLO (any that fits when slo_s is None); None when none does."""
        ok = [
            (b, r) for b, r in self.by_batch[method]
            if not r.get("oom") and (slo_s is None or r["per_token_latency_s"][stat] <= slo_s)
        ]
        return ok[-1] if ok else None

    @property
    def priced(self) -> tuple[str, ...]:
        """How the grid's latencies were priced (implementation mode and software profile)."""
        from dse.report.provenance import pricing_sources

        lists = (*self.by_batch.values(), *self.by_context.values())
        return pricing_sources(d for rows in lists for _, d in rows)


def capacity_grid(
    data: ReportData, profile: str, run: Run, demand: ReplayDemand, seed: int = 0
) -> CapacityGrid:
    """Simulate the grid of `profile` for `run` replaying `demand` (see simulate.plan_replays)."""
    from sim import load_profile
    from traces.models import get_model

    w = workload(data)
    max_pos = get_model(data.model).max_position_tokens
    steps = int(w["output_tokens"])
    input_tokens = int(w["input_tokens"])
    batch0 = int(w["batch_sizes"][0])
    batches = tuple(sorted(set(GRID_BATCHES) | {int(b) for b in w["batch_sizes"]}))
    wanted = sorted({input_tokens, *(int(c) for c in w["context_lengths"]), *_CONTEXTS})
    # Prompts past the model's limit are clipped to it (prompt + output <= max positions).
    contexts = tuple(sorted({max(1, min(c, max_pos - steps)) for c in wanted}))[:_MAX_CONTEXTS]
    method = sim_method(run.config)
    loaded = load_profile(profile)

    def point(m: str, batch: int, context: int) -> dict[str, Any]:
        cfg = sim_config(
            data, run.config, profile, batch_size=batch, input_tokens=context, output_tokens=steps, method=m
        )
        return sampled_decode(cfg, demand.demand, seed, loaded)

    methods = tuple(dict.fromkeys((method, "dense")))
    by_batch = {m: [(b, point(m, b, input_tokens)) for b in batches] for m in methods}
    by_context = {m: [(c, point(m, batch0, c)) for c in contexts] for m in methods}
    memory: dict[tuple[str, int], list[tuple[int, dict]]] = {}
    max_batch: dict[tuple[str, int], int] = {}
    for m in methods:
        for c in contexts:
            cfg = sim_config(
                data, run.config, profile, batch_size=1, input_tokens=c, output_tokens=steps, method=m
            )
            memory[(m, c)] = [(b, memory_of(cfg.replace(batch_size=b), loaded, demand.demand))
                              for b in batches]
            max_batch[(m, c)] = int(memory[(m, c)][0][1]["max_batch"])
    return CapacityGrid(
        profile=profile,
        model=data.model,
        run=run,
        method=method,
        input_tokens=input_tokens,
        output_tokens=steps,
        batch_size=batch0,
        batches=batches,
        contexts=contexts,
        by_batch=by_batch,
        by_context=by_context,
        memory=memory,
        max_batch=max_batch,
        gpu_memory_bytes=int(memory[(method, contexts[0])][0][1]["gpu_capacity_bytes"]),
        mapped_from=demand.mapped_from,
        synthetic=demand.synthetic,
    )
