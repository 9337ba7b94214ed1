"""Recall demand: what the model needed, step by step, mapped onto the target model and workload.

Two forms:
- `Demand`: per source sequence, arrays (S_i, L, H) on the TARGET model's layers and KV heads:
  `corrected` (bool), `fetch_ratio` (tokens copied host -> GPU at the step over the trace's selection
  capacity budget - sink - window; for FreeKV exactly missed / selected pages),
  `evict_ratio` (tokens the head's GPU cache gave up, over the same capacity), `refactorised` (bool,
  ShadowKV's re-factorisation) and, for real traces, `similarity` (to recompute corrections for another
  tau). `method` names the runtime policy whose demand it is (the trace's meta.runtime["method"], absent:
  "freekv"; None for synthetic demand). Built by `demand_from_trace` (optionally transplanted from
  another model) or `sim.synthetic.synthetic_demand`.
- a trace of dense attention (the runtime's `dense` policy, "full" in older traces, or any policy with
  every layer dense) selected and recalled nothing: it loads into a Demand with method `DENSE_POLICY`
  ("dense", `dense_attention` True), zero corrections and ratios (similarity NaN) on its recorded steps.
  It holds no recall demand: no method model prices it (`Method.uses_demand` is False); the models that
  need demand refuse it, also with `SimConfig.transplant_method` (sim.engine.check_replay), the others
  replay it in closed form.
- `BatchDemand`: what the engine and methods consume: per (step, layer) totals over the batch and KV
  heads for one SimConfig (context length, budget, batch), see `batch_demand`.

Mapping rules (documented in every output through `transplanted_from` / `synthetic`):
- transplant: target layer l reads source layer round(l * (Ls - 1) / (Lt - 1)) (moved to the nearest
  source layer that was not dense), target KV head h reads source head floor(h * Hs / Ht).
- steps: batch member b replays source sequence b mod n_seqs from a step offset that spreads members
  over the sequence, cycling when the target generates more steps than the trace holds. Only the trace's
  steps past its own budget (see "budget") are kept: the others checked, selected and recalled nothing.
- budget: while the target's context fits its budget (traces.retrieval_knobs `fits_budget`: ceil(context
  / p) <= budget_tokens // p, the official runtime's `kvc.n_pages > budget` test) nothing is checked,
  selected or recalled. Those steps have no corrected heads, no selected and no missed pages, whatever
  the trace recorded there.
- pages: past the budget the target selects selected_pages per head (budget of the SimConfig, context of
  the target: input_tokens + step + 1); the missed pages are that count times the recorded fetch ratio,
  rounded to the nearest integer; the fetched tokens are the target's capacity (budget - sink - window
  tokens) times the ratio, rounded; evicted tokens likewise with the eviction ratio; re-factorised
  heads are counted as recorded. The fetch ratio of a (step, layer, head) is fetched_tokens / the
  trace's capacity in tokens (format-1 traces: fetched = missed pages x page size, so FreeKV's ratio is
  missed / selected pages, its selection filling the capacity past the budget). A trace without its
  budget, sink, window or page size falls back to missed / selected pages (where the source selected
  nothing, the mean ratio of the same layer and head is used) and replays no evictions.
- methods: a dropping method (StreamingLLM, H2O, SnapKV, RaaS, RazorAttention) never fetches: its
  ratio is 0 and its evictions are what it dropped.
- probe (RazorAttention's retrieval heads, meta.extra["policy_probe"], traces.probe): `retrieval_share` is
  the share of retrieval KV heads of the traced model over all its layers; `retrieval_share_per_layer`
  gives target layer l the share of its source layer round(l * (Ls - 1) / (Lt - 1)) (`layer_map` without
  the move off dense layers: the probe measured every layer, dense ones too). A share transfers to
  another model's head count as it is. Absent (None) when the trace records no probe.
- candidate pages: ceil(context / p) - sink pages - window pages (at least 0): traces.retrieval_knobs
  `candidate_pages`, as the runtime's store (freekv_runtime/kv_store.py `candidate_range`) and the
  official runtime ([ns, n_pages - nw)).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from os import PathLike
from typing import TYPE_CHECKING

import numpy as np

from sim.errors import SimInputError
from traces.catalogue import DENSE
from traces.models import ModelSpec, get_model
from traces.probe import retrieval_heads_of
from traces.retrieval_knobs import budget_fit_tokens

if TYPE_CHECKING:
    from sim.config import SimConfig
    from traces import RunMetadata, TraceReader

__all__ = ["Demand", "BatchDemand", "demand_from_trace", "batch_demand", "layer_map", "head_map",
           "replay_notes", "DENSE_POLICY"]

DENSE_POLICY = DENSE  # the runtime's dense-attention policy (traces.catalogue)


@dataclass(frozen=True)
class Demand:
    """Per-sequence demand on the target shape (L = target layers, H = target KV heads).

    corrected[i]: (S_i, L, H) bool; fetch_ratio[i]: (S_i, L, H) float32 >= 0 (module docstring; at most 1
    for page-recall methods, FreeKV's missed / selected pages);
    similarity[i]: (S_i, L, H) float32 (NaN where undefined) or None for synthetic demand.
    evict_ratio[i]: (S_i, L, H) float32 >= 0, evicted tokens over the capacity; refactorised[i]: (S_i, L,
    H) bool; both None when nothing was recorded (synthetic demand: read as zeros).
    method: the runtime policy whose demand this is (None: synthetic, any method may replay it;
    DENSE_POLICY: dense attention, no recall demand, see `dense_attention`).
    retrieval_share: share of retrieval KV heads RazorAttention's probe found on the traced model (all
    layers); retrieval_share_per_layer (L,) float64: per target layer, the share of its source layer
    (module docstring, "probe"); both None when the trace records no probe.
    timings_s[i]: per step measured timings (list of dicts) or empty; timing_clock per trace metadata.
    skipped_steps[i]: the first steps of source sequence i that fit the trace's budget and were left out
    (step 0 of the demand is the trace's step skipped_steps[i]); empty for synthetic demand.
    """

    model: str
    corrected: tuple[np.ndarray, ...]
    fetch_ratio: tuple[np.ndarray, ...]
    similarity: tuple[np.ndarray, ...] | None
    source: str
    transplanted_from: str | None = None
    synthetic: str | None = None
    source_tau: float | None = None
    timing_clock: str = "none"
    timings_s: tuple[tuple[dict[str, float], ...], ...] = field(default_factory=tuple)
    source_runtime: dict = field(default_factory=dict)
    skipped_steps: tuple[int, ...] = ()  # per sequence: leading trace steps within its budget, not kept
    recorded_context_tokens: int | None = None  # the longest context the trace recorded (None: synthetic)
    method: str | None = None
    evict_ratio: tuple[np.ndarray, ...] | None = None
    refactorised: tuple[np.ndarray, ...] | None = None
    retrieval_share: float | None = None
    retrieval_share_per_layer: np.ndarray | None = None

    @property
    def dense_attention(self) -> bool:
        """True for a trace of dense attention: it holds no selection or recall demand (module docstring);
        its policy as recorded is `source_runtime["method"]`."""
        return self.method == DENSE_POLICY

    @property
    def n_layers(self) -> int:
        return int(self.corrected[0].shape[1])

    @property
    def n_kv_heads(self) -> int:
        return int(self.corrected[0].shape[2])

    @property
    def n_steps(self) -> tuple[int, ...]:
        return tuple(int(c.shape[0]) for c in self.corrected)

    def label(self) -> str:
        if self.synthetic:
            return f"synthetic({self.synthetic})"
        if self.transplanted_from:
            return f"{self.source} (transplanted from {self.transplanted_from} onto {self.model})"
        return self.source


@dataclass(frozen=True)
class BatchDemand:
    """Per (step, layer) totals over the batch and KV heads; S = cfg.output_tokens, L target layers.

    context_tokens: (S,) int64, tokens attended over at step s (input + s + 1).
    candidate_pages: (S,) int64 pages selection scores per (sequence, head): ceil(context / p) - sink
        pages - window pages, at least 0 (module docstring).
    over_budget: (S,) bool, the context no longer fits the budget (ceil(context / p) > budget pages):
        only these steps check, select and recall.
    selected_per_head: (S,) int64 pages selected per (sequence, head): selected_pages past the budget,
        0 within it.
    corrected_heads: (S, L) int64 corrected (sequence, head) pairs; any_corrected: (S, L) bool.
    selected_pages: (S, L) int64 selected (sequence, head, page) total.
    missed_sync: (S, L) int64 missed pages of corrected heads; missed_bg: of the other heads.
    fetched_sync_tokens / fetched_bg_tokens: (S, L) int64 tokens copied host -> GPU for corrected heads /
        the other heads (the fetch ratio times the target's capacity, budget - sink - window tokens).
    evicted_tokens: (S, L) int64 tokens the GPU caches gave up; refactorised_heads: (S, L) int64
        (sequence, head) pairs whose compressed state was rebuilt.
    dense_layer: (L,) bool, layers kept dense by the config (no demand there).
    method: the runtime policy whose demand this is (None: synthetic or no demand).
    """

    context_tokens: np.ndarray
    candidate_pages: np.ndarray
    over_budget: np.ndarray
    selected_per_head: np.ndarray
    corrected_heads: np.ndarray
    any_corrected: np.ndarray
    selected_pages: np.ndarray
    missed_sync: np.ndarray
    missed_bg: np.ndarray
    dense_layer: np.ndarray
    batch: int
    label: str
    fetched_sync_tokens: np.ndarray | None = None
    fetched_bg_tokens: np.ndarray | None = None
    evicted_tokens: np.ndarray | None = None
    refactorised_heads: np.ndarray | None = None
    method: str | None = None

    def __post_init__(self) -> None:  # hand-built demands (tests) get zeros for the movement fields
        zeros = np.zeros_like(np.asarray(self.missed_sync, dtype=np.int64))
        for name in ("fetched_sync_tokens", "fetched_bg_tokens", "evicted_tokens", "refactorised_heads"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, zeros.copy())

    @property
    def missed_total(self) -> np.ndarray:
        return self.missed_sync + self.missed_bg

    @property
    def fetched_tokens(self) -> np.ndarray:
        """(S, L) int64 tokens fetched, corrected and other heads together."""
        return self.fetched_sync_tokens + self.fetched_bg_tokens


def layer_map(n_target: int, n_source: int, source_dense: set[int] | None = None) -> np.ndarray:
    """(n_target,) source layer for each target layer: round(l * (Ls-1)/(Lt-1)), skipping dense ones."""
    if n_target == 1:
        base = np.zeros(1, dtype=np.int64)
    else:
        base = np.rint(np.arange(n_target) * (n_source - 1) / (n_target - 1)).astype(np.int64)
    dense = source_dense or set()
    usable = [s for s in range(n_source) if s not in dense]
    if not usable:
        raise SimInputError("the trace has no compressed (non-dense) layer to take demand from")
    return np.array([s if s not in dense else min(usable, key=lambda u: (abs(u - s), u)) for s in base])


def head_map(n_target: int, n_source: int) -> np.ndarray:
    """(n_target,) source KV head for each target KV head: floor(h * Hs / Ht)."""
    return (np.arange(n_target) * n_source) // n_target


def demand_from_trace(trace: str | PathLike[str] | TraceReader, target_model: str | None = None) -> Demand:
    """Read a trace (directory or open reader) into a Demand on `target_model`'s shape.

    target_model None or equal to the trace's model: no transplant. Otherwise layers and heads are
    mapped (module docstring) and the Demand says `transplanted_from=<trace model>`. A trace of dense
    attention gives a Demand with `dense_attention` True and no recall demand (module docstring).
    """
    from traces import open_trace

    reader = trace if hasattr(trace, "steps") and hasattr(trace, "meta") else open_trace(trace)
    meta = reader.meta
    src: ModelSpec = meta.model
    tgt = get_model(target_model) if target_model else src
    dense = {int(x) for x in meta.runtime.get("dense_layers", ())}
    if meta.method == DENSE_POLICY or set(range(src.n_layers)) <= dense:
        return _dense_attention_demand(reader, src, tgt, str(getattr(reader, "path", trace)))
    lmap = layer_map(tgt.n_layers, src.n_layers, dense)
    hmap = head_map(tgt.n_kv_heads, src.n_kv_heads)
    fit_tokens = budget_fit_tokens(meta.runtime.get("page_size"), meta.runtime.get("budget_tokens"))
    capacity = _capacity_tokens(meta.runtime)
    page = meta.runtime.get("page_size")
    per_seq: dict[int, dict[str, list]] = {}
    longest = 0
    for rec in reader.steps():
        longest = max(longest, int(rec.context_tokens))
        acc = per_seq.setdefault(
            rec.sequence,
            {"corr": [], "sim": [], "sel": [], "miss": [], "fetch": [], "evict": [], "refac": [], "t": [],
             "over": []},
        )
        acc["corr"].append(np.asarray(rec.corrected, dtype=bool))
        acc["sim"].append(np.asarray(rec.similarity, dtype=np.float32))
        acc["sel"].append(rec.selected_counts())
        acc["miss"].append(rec.missed_counts())
        acc["fetch"].append(_moved(getattr(rec, "fetched_tokens", None), rec, page))
        acc["evict"].append(_moved(getattr(rec, "evicted_tokens", None), rec, None))
        refac = getattr(rec, "refactorised", None)
        acc["refac"].append(np.zeros(rec.corrected.shape, bool) if refac is None else np.asarray(refac, bool))
        acc["t"].append(dict(rec.timings_s))
        acc["over"].append(fit_tokens is None or rec.context_tokens > fit_tokens)
    if not per_seq:
        raise SimInputError(f"trace {getattr(reader, 'path', trace)} has no decode steps to replay")
    skipped = {seq: 0 for seq in per_seq}
    if any(any(acc["over"]) for acc in per_seq.values()):
        skipped = {seq: len(acc["over"]) - sum(acc["over"]) for seq, acc in per_seq.items()}
        # only the steps past the run's budget checked, selected and recalled (module docstring); a trace
        # with none past it is replayed as recorded (its steps hold no corrections or misses then)
        per_seq = {seq: {k: [x for x, o in zip(v, acc["over"], strict=True) if o] for k, v in acc.items()}
                   for seq, acc in per_seq.items() if any(acc["over"])}
    corrected, ratio, similarity, timings, evict, refac = [], [], [], [], [], []

    def mapped(acc: dict[str, list], key: str, dtype: type = np.float64) -> np.ndarray:
        return np.stack(acc[key]).astype(dtype)[:, lmap][:, :, hmap]

    for seq in sorted(per_seq):
        acc = per_seq[seq]
        corrected.append(mapped(acc, "corr", bool))
        similarity.append(mapped(acc, "sim", np.float32))
        if capacity is None:  # no capacity recorded: the page-recall ratio missed / selected
            ratio.append(_miss_ratio(mapped(acc, "sel"), mapped(acc, "miss")))
        else:
            ratio.append(_token_ratio(mapped(acc, "fetch"), capacity))
        if capacity is not None:  # without a capacity evictions cannot be scaled: none are replayed
            evict.append(_token_ratio(mapped(acc, "evict"), capacity))
        refac.append(mapped(acc, "refac", bool))
        timings.append(tuple(acc["t"]))
    transplanted = src.name if tgt.name != src.name else None
    share, share_per_layer = _probe_shares(meta, tgt, str(getattr(reader, "path", trace)))
    return Demand(
        model=tgt.name,
        corrected=tuple(corrected),
        fetch_ratio=tuple(ratio),
        similarity=tuple(similarity),
        source=str(getattr(reader, "path", trace)),
        transplanted_from=transplanted,
        source_tau=meta.method_knobs.get("tau"),
        timing_clock=meta.timing_clock,
        timings_s=tuple(timings),
        source_runtime=dict(meta.runtime),
        skipped_steps=tuple(skipped[seq] for seq in sorted(per_seq)),
        recorded_context_tokens=longest,
        method=meta.method,
        evict_ratio=tuple(evict) if capacity is not None else None,
        refactorised=tuple(refac),
        retrieval_share=share,
        retrieval_share_per_layer=share_per_layer,
    )


def _dense_attention_demand(reader: TraceReader, src: ModelSpec, tgt: ModelSpec, source: str) -> Demand:
    """A trace of dense attention as a Demand with no recall demand: zeros (similarity NaN) of the target's
    shape on every recorded step, its timings kept (module docstring)."""
    steps: dict[int, list[dict[str, float]]] = {}
    longest = 0
    for rec in reader.steps():
        longest = max(longest, int(rec.context_tokens))
        steps.setdefault(rec.sequence, []).append(dict(rec.timings_s))
    if not steps:
        raise SimInputError(f"trace {source} has no decode steps to replay")
    shapes = [(len(steps[seq]), tgt.n_layers, tgt.n_kv_heads) for seq in sorted(steps)]
    meta = reader.meta
    return Demand(
        model=tgt.name,
        corrected=tuple(np.zeros(s, dtype=bool) for s in shapes),
        fetch_ratio=tuple(np.zeros(s, dtype=np.float32) for s in shapes),
        similarity=tuple(np.full(s, np.nan, dtype=np.float32) for s in shapes),
        source=source,
        transplanted_from=src.name if tgt.name != src.name else None,
        source_tau=meta.method_knobs.get("tau"),
        timing_clock=meta.timing_clock,
        timings_s=tuple(tuple(steps[seq]) for seq in sorted(steps)),
        source_runtime=dict(meta.runtime),
        skipped_steps=tuple(0 for _ in shapes),
        recorded_context_tokens=longest,
        method=DENSE_POLICY,
        evict_ratio=tuple(np.zeros(s, dtype=np.float32) for s in shapes),
        refactorised=tuple(np.zeros(s, dtype=bool) for s in shapes),
    )


def _probe_shares(meta: RunMetadata, target: ModelSpec, where: str) -> tuple[float | None, np.ndarray | None]:
    """(share of retrieval KV heads on the traced model, (L_target,) share per target layer) from
    RazorAttention's probe in the trace metadata, or (None, None) (module docstring, "probe")."""
    heads = retrieval_heads_of(meta, where)  # (Ls, Hs) bool
    if heads is None:
        return None, None
    per_source_layer = heads.mean(axis=1)
    return float(heads.mean()), per_source_layer[layer_map(target.n_layers, meta.model.n_layers)]


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


def _capacity_tokens(runtime: dict) -> int | None:
    """The trace's selection capacity in tokens per head (budget - sink - window), or None if unknown."""
    keys = ("page_size", "budget_tokens", "sink_tokens", "window_tokens")
    values = [runtime.get(k) for k in keys]
    if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in values):
        return None
    cap = values[1] - values[2] - values[3]
    return cap if cap > 0 and values[0] > 0 else None


def _moved(tokens: np.ndarray | None, rec: object, page_size: object) -> np.ndarray:
    """(L, H) tokens a record says were moved; None: missed pages x page size when `page_size` is given
    (format-1 traces: FreeKV's page recall), else zeros."""
    if tokens is not None:
        return np.asarray(tokens, dtype=np.int64)
    if isinstance(page_size, int) and page_size > 0:
        return rec.missed_counts().astype(np.int64) * page_size  # type: ignore[attr-defined]
    return np.zeros(np.shape(rec.corrected), dtype=np.int64)  # type: ignore[attr-defined]


def _token_ratio(tokens: np.ndarray, capacity_tokens: int) -> np.ndarray:
    """(S, L, H) tokens moved over the capacity in tokens, float32 >= 0."""
    return np.maximum(tokens / float(capacity_tokens), 0.0).astype(np.float32)


def _miss_ratio(sel: np.ndarray, miss: np.ndarray) -> np.ndarray:
    """(S, L, H) missed / selected; where nothing was selected, the mean over steps of that head."""
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(sel > 0, miss / np.maximum(sel, 1), np.nan)
    head_mean = np.nanmean(np.where(np.isnan(ratio).all(axis=0, keepdims=True), 0.0, ratio), axis=0)
    head_mean = np.nan_to_num(head_mean, nan=0.0)
    ratio = np.where(np.isnan(ratio), head_mean[None], ratio)
    return np.clip(ratio, 0.0, 1.0).astype(np.float32)


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
    n_steps, n_layers = cfg.output_tokens, model.n_layers
    bad = [x for x in cfg.dense_layers if x >= n_layers]
    if bad:
        raise SimInputError(f"SimConfig.dense_layers {bad} out of range for {model.name} ({n_layers} layers)")
    context, candidates, over, per_head = _context(cfg)
    names = ("corrected_heads", "missed_sync", "missed_bg", "fetched_sync_tokens", "fetched_bg_tokens",
             "evicted_tokens", "refactorised_heads")
    totals = {k: np.zeros((n_steps, n_layers), dtype=np.int64) for k in names}
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
        for k in names:
            totals[k][over] += tab[k][idx]
    dense = _dense_mask(cfg, n_layers)
    selected = np.broadcast_to(per_head[:, None] * cfg.batch_size * model.n_kv_heads, (n_steps, n_layers))
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
