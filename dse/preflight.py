"""What a study needs, checked before anything is measured (a dense baseline can take hours).

`check_before_compute(study)`: out_dir can be created and written, every hardware profile loads (not
only its name is known), and the simulator accepts the workload for every replayed model with dense
attention and every searched method. The study schema (dse/study.py) has already checked each key, the
untuned-FreeKV baseline, task contexts against the model's positions and dense layers against its layers;
dse/preflight_trial.py checks what each trial will use (task parameters, seeds, the capacity grid).
"""

from __future__ import annotations

from dse.errors import DseError
from dse.objective import DENSE
from dse.paths import check_output_dir
from dse.preflight_trial import check_trial_inputs
from dse.study import Study

__all__ = ["check_before_compute"]


def check_before_compute(study: Study) -> None:
    """DseError (or the simulator's input error) naming the key when the study cannot run."""
    from sim import SimConfig, SimInputError, load_profile
    from sim.methods import METHODS
    from traces.models import get_model

    out_dir = study.output_dir
    check_output_dir(out_dir, "out_dir")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DseError(f"out_dir {out_dir}: cannot create it ({exc.strerror or exc})") from None
    for hw in study.hardware:
        load_profile(hw)
    check_trial_inputs(study)  # tasks, seeds, every replay of the capacity grid
    w = study.workload

    for model in study.replay_models:
        n_layers = get_model(model).n_layers
        bad = [x for x in study.search.dense_layers if x >= n_layers]
        if bad:
            raise DseError(
                f"search.dense_layers {bad}: replayed model {model!r} has {n_layers} layers "
                f"(0-{n_layers - 1}); keep dense layers within every model of target_model and "
                "extra_replay_models"
            )
        for method in [DENSE, *study.search.method]:
            if method not in METHODS:
                raise DseError(
                    f"search.method {method!r} has no simulator model (sim.methods: {', '.join(METHODS)})"
                )
            try:
                SimConfig(
                    model=model, hardware=study.hardware[0], method=method, batch_size=max(w.batch_sizes),
                    input_tokens=max([w.input_tokens, *w.context_lengths]), output_tokens=w.output_tokens,
                    dense_layers=tuple(study.search.dense_layers),
                )
            except SimInputError as exc:
                raise DseError(
                    f"the study's workload cannot be replayed on model {model!r} with method {method!r}: "
                    f"{exc} (keys workload, search, target_model, extra_replay_models)"
                ) from None
