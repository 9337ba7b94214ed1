"""Per (step, layer) totals of a `Demand` over a SimConfig's batch and KV heads (the rules:
sim/demand/__init__.py), and the notes on how a config replays a trace beyond what it recorded. Never
imports torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sim.demand.records import BatchDemand, Demand
from sim.errors import SimInputError
from traces.models import ModelSpec

if TYPE_CHECKING:
    from sim.config import SimConfig

__all__ = ["batch_demand", "replay_notes"]


def replay_notes(demand: Demand | None, cfg: SimConfig) -> list[str]:
    """One line per way `cfg` replays a trace beyond what it recorded: more steps than it holds (cycled),
    a longer context, another page size or budget. Empty for synthetic demand, dense attention (nothing
    of it is replayed) or a faithful replay."""
    if demand is None or demand.synthetic or demand.dense_attention:
        return []
    notes = []
    held = max(demand.n_steps)
    if cfg.output_tokens > held:
        notes.append(
            f"the trace holds {held} decode steps per sequence past its budget; replayed cyclically to "
            f"{cfg.output_tokens} steps ({cfg.output_tokens / held:.1f}x what it recorded)"
        )
    recorded = demand.recorded_context_tokens
    target = cfg.max_context_tokens
    if recorded is not None and target > recorded:
        notes.append(
            f"the trace recorded contexts up to {recorded} tokens; replayed at up to {target} "
            f"({target / recorded:.1f}x longer: its correction and hit rates are assumed to hold)"
        )
    rt = demand.source_runtime
    for key, flag in (("page_size", "page size"), ("budget_tokens", "budget")):
        if isinstance(rt.get(key), int) and rt[key] != getattr(cfg, key):
            notes.append(f"the trace was recorded with {flag} {rt[key]}; replayed with {getattr(cfg, key)}")
    return notes


def batch_demand(
    demand: Demand | None, cfg: SimConfig, model: ModelSpec, rng: np.random.Generator | None = None
) -> BatchDemand:
    """Totals per (step, layer) over cfg.batch_size sequences and the KV heads (module docstring).

    demand None: no recall demand at all (for methods whose costs do not depend on a trace).
    rng: draws the step offsets of batch members beyond the first replay of each source sequence
    (default: evenly spread offsets).
    """
    if demand is None:
        return _empty_batch_demand(cfg, model)
    _check(demand, cfg, model)
    context, candidates, over, per_head = _context(cfg)
    totals = _batch_totals(demand, cfg, model.n_layers, over, rng)
    dense = _dense_mask(cfg, model.n_layers)
    selected = np.broadcast_to(per_head[:, None] * cfg.batch_size * model.n_kv_heads,
                               (cfg.output_tokens, model.n_layers))
    selected = np.where(dense[None], 0, selected).astype(np.int64)
    for arr in totals.values():
        arr[:, dense] = 0
    return BatchDemand(
        context_tokens=context,
        candidate_pages=candidates,
        over_budget=over,
        selected_per_head=per_head,
        any_corrected=totals["corrected_heads"] > 0,
        selected_pages=selected,
        dense_layer=dense,
        batch=cfg.batch_size,
        label=demand.label(),
        method=demand.method,
        **totals,
    )


def _check(demand: Demand, cfg: SimConfig, model: ModelSpec) -> None:
    if demand.model != model.name:
        raise SimInputError(
            f"the demand is for model {demand.model!r} but SimConfig.model is {model.name!r}; build it "
            f"with demand_from_trace(..., target_model={model.name!r})"
        )
    if cfg.tau is not None and demand.similarity is None:
        raise SimInputError(
            "SimConfig.tau recomputes corrections from recorded similarities, but synthetic demand has "
            "none: leave tau unset (None) and set the correction rate in the synthetic spec instead"
        )
    bad = [x for x in cfg.dense_layers if x >= model.n_layers]
    if bad:
        raise SimInputError(
            f"SimConfig.dense_layers {bad} out of range for {model.name} ({model.n_layers} layers)")


_TOTALS = ("corrected_heads", "missed_sync", "missed_bg", "fetched_sync_tokens", "fetched_bg_tokens",
           "evicted_tokens", "refactorised_heads")


def _batch_totals(demand: Demand, cfg: SimConfig, n_layers: int, over: np.ndarray,
                  rng: np.random.Generator | None) -> dict[str, np.ndarray]:
    """(S, L) int64 totals of every _TOTALS field over the batch: member b replays source sequence
    b mod n_seqs from an offset spreading the rounds over it (module docstring), on the steps past the
    budget only."""
    n_steps = cfg.output_tokens
    totals = {k: np.zeros((n_steps, n_layers), dtype=np.int64) for k in _TOTALS}
    n_seqs = len(demand.corrected)
    rounds = -(-cfg.batch_size // n_seqs)
    tables: dict[int, dict[str, np.ndarray]] = {}
    for b in range(cfg.batch_size):
        seq, round_ = b % n_seqs, b // n_seqs
        if seq not in tables:  # past the budget every step selects selected_pages per head
            tables[seq] = _source_tables(demand, seq, cfg)
        tab = tables[seq]
        s_len = tab["corrected_heads"].shape[0]
        if round_ == 0:
            offset = 0
        elif rng is None:
            offset = round_ * s_len // rounds
        else:
            offset = int(rng.integers(0, s_len))
        idx = ((offset + np.arange(n_steps)) % s_len)[over]  # steps within the budget: no demand
        for k in _TOTALS:
            totals[k][over] += tab[k][idx]
    return totals


def _context(cfg: SimConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(S,) context tokens, candidate pages, over the budget (bool), pages selected per head."""
    context = cfg.input_tokens + np.arange(cfg.output_tokens, dtype=np.int64) + 1
    over = ~cfg.fits_budget(context)
    return context, cfg.candidate_pages(context), over, np.where(over, cfg.selected_pages, 0).astype(np.int64)


def _dense_mask(cfg: SimConfig, n_layers: int) -> np.ndarray:
    """(L,) bool: the layers kept dense (indices past the model's layers are ignored, as in `memory`)."""
    dense = np.zeros(n_layers, dtype=bool)
    dense[[x for x in cfg.dense_layers if x < n_layers]] = True
    return dense


def _empty_batch_demand(cfg: SimConfig, model: ModelSpec) -> BatchDemand:
    context, candidates, over, per_head = _context(cfg)
    zeros = np.zeros((cfg.output_tokens, model.n_layers), dtype=np.int64)
    dense = _dense_mask(cfg, model.n_layers)
    return BatchDemand(
        context_tokens=context,
        candidate_pages=candidates,
        over_budget=over,
        selected_per_head=per_head,
        corrected_heads=zeros,
        any_corrected=zeros > 0,
        selected_pages=zeros,
        missed_sync=zeros,
        missed_bg=zeros,
        dense_layer=dense,
        batch=cfg.batch_size,
        label="none",
    )


def _corrected(demand: Demand, seq: int, tau: float | None) -> np.ndarray:
    """(S_src, L, H) corrected flags: recorded, or recomputed as similarity < tau (NaN: never)."""
    if tau is not None:
        return demand.similarity[seq] < tau
    return demand.corrected[seq]


def _source_tables(demand: Demand, seq: int, cfg: SimConfig) -> dict[str, np.ndarray]:
    """Per source step of sequence `seq`, on cfg's capacity (selected_pages per head, budget - sink -
    window tokens): corrected heads; missed pages (rint(ratio * selected_pages)) and fetched tokens
    (rint(ratio * capacity tokens)) of corrected heads and of the others; evicted tokens; re-factorised
    heads. Each (S_src, L) int64, summed over heads."""
    corr = _corrected(demand, seq, cfg.tau)
    ratio = demand.fetch_ratio[seq]
    capacity = np.float32(cfg.selected_pages * cfg.page_size)
    missed = np.rint(ratio * np.float32(cfg.selected_pages)).astype(np.int64)
    fetched = np.rint(ratio * capacity).astype(np.int64)
    missed_sync = np.where(corr, missed, 0).sum(axis=2)
    fetched_sync = np.where(corr, fetched, 0).sum(axis=2)
    out = {
        "corrected_heads": corr.sum(axis=2).astype(np.int64),
        "missed_sync": missed_sync,
        "missed_bg": missed.sum(axis=2) - missed_sync,
        "fetched_sync_tokens": fetched_sync,
        "fetched_bg_tokens": fetched.sum(axis=2) - fetched_sync,
    }
    zeros = np.zeros(corr.shape, dtype=np.float32)
    evict = demand.evict_ratio[seq] if demand.evict_ratio is not None else zeros
    out["evicted_tokens"] = np.rint(evict * capacity).astype(np.int64).sum(axis=2)
    refac = demand.refactorised[seq] if demand.refactorised is not None else zeros > 0
    out["refactorised_heads"] = refac.sum(axis=2).astype(np.int64)
    return out
