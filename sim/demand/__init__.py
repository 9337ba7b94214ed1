"""Recall demand: what the model needed, step by step, mapped onto the target model and workload.

Two forms:
- `Demand`: per source sequence, arrays (S_i, L, H) on the TARGET model's layers and KV heads:
  `corrected` (bool), `fetch_ratio` (tokens copied host -> GPU at the step over the trace's selection
  capacity budget - sink - window; for FreeKV exactly missed / selected pages),
  `evict_ratio` (tokens the head's GPU cache gave up, over the same capacity), `refactorised` (bool,
  ShadowKV's re-factorisation) and, for real traces, `similarity` (to recompute corrections for another
  tau). `method` names the runtime policy whose demand it is (the trace's meta.runtime["method"], absent:
  "freekv"; None for synthetic demand). Built by `demand_from_trace` (optionally mapped from
  another model's layers and heads) or `sim.synthetic.synthetic_demand`.
- a trace of dense attention (the runtime's `dense` policy, "full" in older traces, or any policy with
  every layer dense) selected and recalled nothing: it loads into a Demand with method `DENSE_POLICY`
  ("dense", `dense_attention` True), zero corrections and ratios (similarity NaN) on its recorded steps.
  It holds no recall demand: no method model prices it (`Method.uses_demand` is False); the models that
  need demand refuse it, also with `SimConfig.transplant_method` (sim.engine.check_replay), the others
  replay it in closed form.
- `BatchDemand`: what the engine and methods consume: per (step, layer) totals over the batch and KV
  heads for one SimConfig (context length, budget, batch), see `batch_demand`.

Mapping rules (documented in every output through `mapped_from` / `synthetic`):
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

from sim.demand.batch import batch_demand, replay_notes
from sim.demand.from_trace import demand_from_trace
from sim.demand.records import DENSE_POLICY, BatchDemand, Demand, head_map, layer_map

__all__ = ["Demand", "BatchDemand", "demand_from_trace", "batch_demand", "layer_map", "head_map",
           "replay_notes", "DENSE_POLICY"]
