"""What every trial of a study will use, checked before the first measurement (dse/preflight.py calls it).

A trial runs each task through the runtime (the task's own `check` of its parameters and context), seeds
numpy, torch and the Optuna sampler with the study's seeds, and replays every trace on each replayed model
x hardware profile x batch size x context length (the capacity grid). Each of those is checked here the
way the trial itself would check it, so that a study that cannot run fails at once with one message
naming the key, instead of measuring for minutes and then failing or leaving a trial RUNNING:

- every task's parameters, context and decode tokens (the runtime's task check);
- every (replayed model, profile, method, batch, context) a simulator configuration;
- every batch size fitting in memory on at least one of the study's profiles for every replayed model
  (a batch that fits nowhere has no latency anywhere: no trial could rank it).
"""

from __future__ import annotations

import itertools

from dse.errors import DseError
from dse.study import Study
from traces.catalogue import DENSE

__all__ = ["check_trial_inputs"]


def check_trial_inputs(study: Study) -> None:
    """DseError naming the study key when a trial of `study` would fail on it."""
    _check_tasks(study)
    _check_replays(study)


def _check_tasks(study: Study) -> None:
    from freekv_runtime.errors import RuntimeInputError
    from freekv_runtime.tasks import TaskSpec, get_task

    for i, task in enumerate(study.tasks):
        spec = TaskSpec(
            name=task.name,
            context_tokens=task.context_tokens,
            n_samples=task.samples,
            decode_tokens=task.decode_tokens,
            params=dict(task.params),
        )
        try:
            get_task(task.name).check(spec)
        except RuntimeInputError as exc:
            raise DseError(f"tasks[{i}] ({task.name}): {exc}") from None


def _check_replays(study: Study) -> None:
    from sim import SimConfig, SimInputError
    from sim.capacity import memory_at

    w = study.workload
    contexts = list(dict.fromkeys([w.input_tokens, *w.context_lengths]))
    methods = list(dict.fromkeys([DENSE, *study.search.method]))
    for model in study.replay_models:
        largest: dict[tuple[int, int], int] = {}  # (context, batch) -> largest batch that fits anywhere
        for hw, method, context, batch in itertools.product(study.hardware, methods, contexts, w.batch_sizes):
            try:
                cfg = SimConfig(
                    model=model,
                    hardware=hw,
                    method=method,
                    batch_size=batch,
                    input_tokens=context,
                    output_tokens=w.output_tokens,
                    dense_layers=tuple(study.search.dense_layers),
                )
            except SimInputError as exc:
                raise DseError(
                    f"the study's workload cannot be replayed on model {model!r}, profile {hw!r}, method "
                    f"{method!r}, batch {batch}, context {context}: {exc} (keys workload, hardware, search, "
                    "target_model, extra_replay_models)"
                ) from None
            largest[(context, batch)] = max(largest.get((context, batch), 0), memory_at(cfg).max_batch)
        for (context, batch), fit in largest.items():
            if fit == 0:
                raise DseError(
                    f"workload: not even one sequence of {context} + {w.output_tokens} tokens of model "
                    f"{model!r} fits in the memory of any of the profiles {', '.join(study.hardware)} under "
                    "any searched method; shorten workload.input_tokens / context_lengths / output_tokens or "
                    "add a larger profile to hardware"
                )
            if batch > fit:
                raise DseError(
                    f"workload.batch_sizes: a batch of {batch} sequences of {context} + {w.output_tokens} "
                    f"tokens of model {model!r} fits in the memory of none of the profiles "
                    f"{', '.join(study.hardware)} under any searched method (the largest that fits is "
                    f"{fit}); give batch sizes up to {fit}"
                )
