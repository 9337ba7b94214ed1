"""The capacity answer with accuracy: candidates from evidence, each priced on its own demand, decided.

`candidate_answers(...)` narrows the question to each candidate and answers it (dse capacity and dse
serve both price candidates through it); `evidence_options(...)` builds one `dse.accuracy.decide.Option`
per (profile, method, knobs) candidate:
- candidates: each method's configurations with accuracy evidence (`--accuracy-from`, `--measure`); a
  method with none is priced at the given knobs and shown without evidence;
- demand: the candidate's own trace (its measured run) for a method whose costs depend on one, else the
  method's own preset (sim.replay.own_demand), never another method's rates;
- capacity: sim.capacity.capacity at the central demand and at the demand's ends;
- floor: dse.accuracy.floor on the candidate's and dense attention's scores on the same prompts.
Never imports torch (a measurement imports it in dse.accuracy.measure).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from dse.accuracy.decide import Option
from dse.accuracy.evidence import RETRIEVAL_KEYS, Evidence, pair_with_dense

__all__ = ["candidates", "CandidateAnswer", "candidate_answers", "evidence_options", "planned_configs",
           "demand_of", "question_knobs",
           "gather_evidence", "floor_of", "parse_budgets", "accuracy_fields", "finite_or_none",
           "resolved_knobs"]


def planned_configs(methods: tuple[str, ...], budgets: tuple[int, ...], given: dict[str, Any]) -> list[
        tuple[str, dict[str, Any]]]:
    """(method, planned knobs) per method and budget: the given page size, sink and window (else the
    defaults; sink and window a quarter of a budget too small for the defaults, FreeKV's convention)."""
    from sim.replay import KNOB_DEFAULTS

    out = []
    for method in methods:
        if method == "dense":
            continue
        for budget in budgets or (given.get("budget_tokens") or KNOB_DEFAULTS["budget_tokens"],):
            p = given.get("page_size") or KNOB_DEFAULTS["page_size"]
            sink = given.get("sink_tokens")
            sink = KNOB_DEFAULTS["sink_tokens"] if sink is None else sink
            window = given.get("window_tokens") or KNOB_DEFAULTS["window_tokens"]
            if budget < sink + window + p:
                sink = window = max(p, (budget // 4) // p * p)
            out.append((method, {"budget_tokens": budget, "page_size": p, "sink_tokens": sink,
                                 "window_tokens": window, "options": {}}))
    return out


def candidates(methods: tuple[str, ...], evidence: list[Evidence], given: dict[str, Any]) -> list[
        tuple[str, dict[str, Any], Evidence | None]]:
    """(method, planned knobs, evidence) per method: one per distinct evidenced configuration, else the
    given knobs without evidence."""
    out: list[tuple[str, dict[str, Any], Evidence | None]] = []
    for method in methods:
        mine = {e.key: e for e in evidence if e.method == method}
        if method == "dense":
            dense = next(iter(mine.values()), None)
            out.append(("dense", {}, dense))
        elif mine:
            out += [(method, e.planned, e) for e in mine.values()]
        else:
            out.append((method, {**{k: given.get(k) for k in RETRIEVAL_KEYS}, "options": {}}, None))
    return out


def demand_of(method: str, ev: Evidence | None, tau: float | None) -> tuple[Any, str]:
    """The candidate's own demand source and how it was chosen."""
    from sim.methods import method_class
    from sim.replay.demand_source import DemandSource
    from sim.replay.own_demand import own_source
    from traces.catalogue import entry

    cls = method_class(method)
    uses = cls.needs_demand or cls.own_demand_optional
    own = ev is not None and ev.trace_dir is not None and ev.method == (entry(method).replays or method)
    if uses and own:
        return DemandSource(trace=ev.trace_dir), "its own measured trace"
    if not cls.needs_demand:
        return DemandSource(), "no demand: closed-form costs"
    return own_source(method, tau), "its own preset"


def question_knobs(method: str, knobs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(Question.knobs, Question.method_options) of planned knobs: retrieval knobs and tau, and the
    method's knobs the simulator reads."""
    from traces.catalogue import entry

    options = dict(knobs.get("options") or {})
    tau = options.pop("tau", None)
    q_knobs = {k: knobs[k] for k in RETRIEVAL_KEYS if knobs.get(k) is not None} if method != "dense" else {}
    if tau is not None:
        q_knobs["tau"] = tau
    sim_names = set(entry(method).knobs_from({}).values("simulator"))
    return q_knobs, {k: v for k, v in options.items() if k in sim_names}


@dataclass(frozen=True)
class CandidateAnswer:
    """One candidate (method, planned knobs, evidence) answered by the replay service on its own
    demand (or the given one): `how` says how the demand was chosen, `source` is the DemandSource."""

    method: str
    knobs: dict[str, Any]
    evidence: Evidence | None
    answer: Any
    source: Any
    how: str


def candidate_answers(base: Any, cands: list[tuple[str, dict[str, Any], Evidence | None]],
                      fixed_demand: bool = False, demand_ends: bool = False) -> Iterator[CandidateAnswer]:
    """Each candidate narrowed from `base` (the Question: model, profiles, workload, what-ifs) to its
    method, knobs and own demand (fixed_demand: `base.demand` for all, as --demand gives it, checked
    once up front so that one refusal names every method that may not price it), answered by
    sim.replay.answer. Notes name a knob the candidate sets (measured or planned) as the candidate's,
    not as the user's flag."""
    from sim.replay import answer

    if fixed_demand:
        answer(base)
    for method, knobs, ev in cands:
        q_knobs, sim_options = question_knobs(method, knobs)
        source, how = ((base.demand, "given by --demand") if fixed_demand
                       else demand_of(method, ev, q_knobs.get("tau")))
        named = {k: f"the candidate's {k}" for k, v in q_knobs.items() if base.knobs.get(k) != v}
        q = replace(base, methods=(method,), demand=source, knobs={**base.knobs, **q_knobs},
                    method_options={**base.method_options, **sim_options}, demand_ends=demand_ends,
                    names={**base.names, **named})
        yield CandidateAnswer(method, knobs, ev, answer(q), source, how)


def evidence_options(base: Any, cands: list[tuple[str, dict[str, Any], Evidence | None]],
                     dense: list[Evidence], ratio: float | None, slo_s: float, stat: str,
                     price: dict[str, dict[str, Any]],
                     fixed_demand: bool = False) -> tuple[list[Option], list[str]]:
    """One Option per (profile, candidate) (candidate_answers). Returns (options, notes)."""
    from sim.capacity import capacity

    options, notes = [], []
    for cand in candidate_answers(base, cands, fixed_demand, demand_ends=True):
        method, knobs, ev, ans = cand.method, cand.knobs, cand.evidence, cand.answer
        notes += [n for n in ans.table_notes() if n not in notes]
        verdict, ref = floor_of(ev, method, dense, ratio, base.seed)
        for hw in base.hardware:
            cells = [c for c in ans.cells if c.hardware == hw]
            answers = {c.demand_end: capacity(c.config, c.priced_demand, slo_s, stat, base.seed)
                       for c in cells}
            found = {end: a.to_dict() for end, a in answers.items()}
            central_end = "central" if "central" in found else next(iter(found))
            central = found[central_end]
            options.append(Option(
                hardware=hw, method=method, knobs=resolved_knobs(knobs, ans), capacity=central, evidence=ev,
                verdict=verdict,
                demand=f"{ans.demand.label} ({cand.how})", transplant=cells[0].transplant,
                transplanted_method=cells[0].transplanted_method,
                ends={k: v for k, v in found.items() if k != central_end},
                price_per_hour_usd=price.get(hw, {}).get("price_per_hour_usd"),
                floor_given=ratio is not None,
                extra={"dense_evidence": ref, "config": cells[0].config,
                       "capacity_answer": answers[central_end], "demand_source": cand.source,
                       "priced_demand": cells[0].priced_demand},
            ))
    return options, notes


def gather_evidence(base: Any, accuracy_from: tuple[str, ...], measure: str | None, measure_model: str | None,
            metric: str | None, budgets: tuple[int, ...]) -> tuple[list, list[str]]:
    """The evidence of --accuracy-from, plus --measure's runs (dense and every method x budget)."""
    from dse.accuracy.evidence import load_evidence
    from dse.commands.capacity_evidence import planned_configs

    evidence = load_evidence(accuracy_from, metric)
    notes: list[str] = []
    if measure:
        from rich.console import Console

        from dse.accuracy.measure import MeasureSpec, measure_evidence
        from freekv_runtime.weights import cache_root

        spec = MeasureSpec.parse(measure, measure_model, base.seed)
        configs = planned_configs(base.methods, budgets, dict(base.knobs))
        err = Console(stderr=True)
        measured, notes = measure_evidence(spec, configs, base.model, base.input_tokens + base.output_tokens,
                                           cache_root(), progress=lambda line: err.print(line))
        evidence += measured
    return evidence, notes


def parse_budgets(text: str | None) -> tuple[int, ...]:
    """--budgets '1024,2048' -> (1024, 2048); () when not given."""
    from dse.errors import DseError
    from traces.numbers import TOKENS

    if not text:
        return ()
    try:
        out = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        out = ()
    if not out or min(out) < 1:
        raise DseError(f"--budgets {text!r}: give comma-separated positive token counts, e.g. 1024,2048,4096")
    for budget in out:
        TOKENS.check(budget, f"--budgets {text!r}: each budget", DseError)
    return out


def resolved_knobs(knobs: dict[str, Any], ans: Any) -> dict[str, Any]:
    """The candidate's knobs as the replay resolved them (given, else the trace's, else the defaults)."""
    values = ans.knobs.values
    return {**{k: values.get(k) for k in RETRIEVAL_KEYS}, "options": dict(knobs.get("options") or {})}


def floor_of(ev: Evidence | None, method: str, dense: list[Evidence], ratio: float | None,
             seed: int) -> tuple[Any, Evidence | None]:
    """(the floor's verdict or None, the dense evidence paired with `ev`)."""
    from dse.accuracy.floor import floor_verdict

    if ev is None or method == "dense":
        return None, None
    ref = pair_with_dense(ev, dense)
    verdict = None if ratio is None else floor_verdict(ev.scores, ref.scores if ref else {}, ratio, seed=seed)
    return verdict, ref


def finite_or_none(x: Any) -> Any:
    """NaN (not measured) as None, for JSON and CSV; anything else as is."""
    return None if isinstance(x, float) and math.isnan(x) else x


def accuracy_fields(method: str, knobs: dict[str, Any], ev: Evidence | None, verdict: Any,
                    ref: Evidence | None) -> dict[str, Any]:
    """The accuracy columns of an answer row (dse capacity, dse serve): knobs, the measured metric with
    its interval and n, dense's accuracy on the same prompts, the floor's verdict, the source, labels."""
    from dse.accuracy.evidence import knob_text

    num = finite_or_none
    if method == "dense":
        state = "reference"
    else:
        state = "no evidence" if ev is None else ("no floor" if verdict is None else verdict.verdict)
    dense_same = None
    if verdict is not None:
        dense_same = num(verdict.dense_mean)
    elif ref is not None or (ev is not None and method == "dense"):
        dense_same = num((ref or ev).value)
    return {
        "knobs": knob_text(method, knobs),
        "knobs_measured": knob_text(method, ev.knobs) if ev is not None and ev.planned_knobs else None,
        "accuracy_metric": ev.metric if ev else None, "accuracy": num(ev.value) if ev else None,
        "accuracy_low": num(ev.low) if ev else None, "accuracy_high": num(ev.high) if ev else None,
        "accuracy_n": ev.n if ev else None, "dense_accuracy_same_prompts": dense_same,
        "floor_verdict": state, "floor": verdict.to_dict() if verdict is not None else None,
        "accuracy_source": ev.source if ev else "not measured (give --accuracy-from or --measure)",
        "accuracy_model": ev.measured_model if ev else None,
        "accuracy_label": "measured" if ev else "none", "latency_label": "simulated",
    }
