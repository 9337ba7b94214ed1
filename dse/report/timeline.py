"""Section 2, part 2: stream timelines of a typical and of a corrected decode step.

The simulator re-runs the capacity configuration of the first profile (the recommendation, see
dse/report/grid.py) at the study's batch and prompt length for `TIMELINE_STEPS` decode steps,
replaying the measured demand. The steps shown are chosen from that same demand
(dse/report/steps.py): a step with the fewest corrected heads (none where the demand has such a step)
and the one with the most — two different steps whenever the counts differ. Operations take the
report's shared colours (dse/report/colors.py).
"""

from __future__ import annotations

from typing import Any

from dse.report.colors import bar_marker
from dse.report.data import ReportData, Run, describe_config, run_label
from dse.report.page import Block, FigureBlock, NoteBlock
from dse.report.provenance import Provenance
from dse.report.simulate import ReplayDemand, Replays, sim_config, simulate, workload
from dse.report.steps import StepChoice, choose_steps

__all__ = ["timeline_blocks", "TIMELINE_STEPS"]

TIMELINE_STEPS = 64


def timeline_blocks(data: ReportData, replays: Replays, seed: int = 0) -> list[Block]:
    from sim import load_profile
    from sim.engine import prepare
    from sim.timeline import timeline_figure

    profile = data.profiles[0]
    replay = replays.get(profile)
    if replay is None:
        return [
            NoteBlock(
                f"No run on {profile} has a trace or measured rates to replay, so no stream timeline "
                "is drawn.",
                kind="warning",
            )
        ]
    run, demand = replay
    cfg = _timeline_config(data, run, profile)
    # The demand exactly as the engine replays it (batch members' step offsets drawn from `seed`).
    loaded = load_profile(profile)
    per_step = prepare(cfg, demand.demand, seed, loaded).ctx.demand.corrected_heads.sum(axis=1)
    choice = choose_steps(per_step)
    assert choice is not None  # output_tokens >= 1
    result = simulate(cfg, demand, seed, loaded, timeline_steps=(choice.typical, choice.corrected))
    if result.oom:
        return [
            NoteBlock(
                f"{describe_config(run.config)} ({run_label(run)}) at batch {cfg.batch_size} does not fit "
                f"on {profile} ({result.oom_message}), so no stream timeline is drawn.",
                kind="warning",
            )
        ]
    what = (
        f"{describe_config(run.config)} ({run_label(run)}), {data.model} on {profile}, batch "
        f"{cfg.batch_size}, prompt {cfg.input_tokens} tokens"
    )
    return _step_blocks(result, choice, timeline_figure, _provenance(profile, run, demand, result), what)


def _step_blocks(
    result: Any, choice: StepChoice, timeline_figure: Any, prov: Provenance, what: str
) -> list[Block]:
    """The typical step's timeline, then the corrected step's (a note where no step corrects more)."""
    lat_ms = result.step_latency_s * 1e3
    blocks: list[Block] = [
        _figure(result, choice.typical, timeline_figure, prov,
                title=f"Stream timeline of a typical step (step {choice.typical})",
                caption=_typical_caption(what, choice, lat_ms[choice.typical]))
    ]
    if not choice.distinct:
        blocks.append(
            NoteBlock(
                f"Every simulated step of {what} corrects {choice.corrected_heads} heads, so there is no "
                "more corrected step to show than the one above.",
                kind="info",
            )
        )
    else:
        blocks.append(
            _figure(result, choice.corrected, timeline_figure, prov,
                    title=f"Stream timeline of a corrected step (step {choice.corrected})",
                    caption=_corrected_caption(what, choice, lat_ms[choice.corrected]))
        )
    return blocks


def _timeline_config(data: ReportData, run: Run, profile: str) -> Any:
    """The SimConfig of the run at the study's first batch and prompt, for at most TIMELINE_STEPS steps."""
    w = workload(data)
    return sim_config(
        data,
        run.config,
        profile,
        batch_size=int(w["batch_sizes"][0]),
        input_tokens=int(w["input_tokens"]),
        output_tokens=min(TIMELINE_STEPS, int(w["output_tokens"])),
    )


def _provenance(profile: str, run: Run, demand: ReplayDemand, result: Any) -> Provenance:
    return Provenance(
        simulated=(f"stream timeline on {profile}",),
        measured=(f"corrections and cache misses of {run_label(run)}",),
        mapped_from=(demand.mapped_from,) if demand.mapped_from else (),
        synthetic=(demand.synthetic,) if demand.synthetic else (),
        priced=(result.pricing_label,),
    )


def _typical_caption(what: str, choice: StepChoice, step_ms: float) -> str:
    return (
        f"{what}. This step takes {step_ms:.3f} ms and corrects "
        f"{choice.typical_heads} (sequence, layer, KV head) triples, the fewest of the "
        f"{choice.n_steps} simulated steps (median {choice.median_heads}). Heads not corrected select "
        "and recall pages for the next step in the background, behind attention and FFN; corrected "
        "heads do it synchronously before attention. x: ms since the step's first operation."
    )


def _corrected_caption(what: str, choice: StepChoice, step_ms: float) -> str:
    return (
        f"{what}. This step takes {step_ms:.3f} ms and corrects "
        f"{choice.corrected_heads} triples, the most of the {choice.n_steps} simulated steps: their "
        "selection and the recall of their missed pages (recall_sync) sit on the critical path. "
        "x: ms since the step's first operation."
    )


def _figure(
    result: Any, step: int, timeline_figure: Any, prov: Provenance, title: str, caption: str
) -> FigureBlock:
    events = result.timeline(step)  # [{name, stream, start_s, end_s, step, layer}]
    t0 = min(e["start_s"] for e in events)  # time from the step's first event, to compare steps
    events = [{**e, "start_s": e["start_s"] - t0, "end_s": e["end_s"] - t0} for e in events]
    fig = timeline_figure(events, title="")
    for trace in fig.data:  # the report's shared colour per operation, hatched for host work
        trace.marker = bar_marker(str(trace.name))
    fig.update_layout(xaxis_title="time since the step's first operation (ms)")
    n_streams = len({e["stream"] for e in events})
    return FigureBlock(
        title=title, figure=fig, caption=caption, provenance=prov, height_px=max(320, 120 + 34 * n_streams)
    )
