"""RULER's own prepared data (`scripts/data/prepare.py` output), from local files only.

Records (one JSON object per line): `input` (the full prompt), `outputs` (the reference strings),
optionally `answer_prefix` (appended to the input, as RULER's `pred/call_api.py` does), `index`,
`length`. The prompt must fit: prompt tokens + decode tokens <= `context_tokens` (prepare the data at
that length); a longer one is an error, never silently cut (a cut could drop the needle). Greedy.
Scoring: RULER's `string_match_part` for its QA tasks, `string_match_all` for every other task; the
task is `params.ruler_task` or, by default, the data file's name or its directory's name (RULER writes
`<task>/validation.jsonl`). Params: `data` (required: RULER data is generated per tokenizer, it is not
on the HF hub), `ruler_task`. Metric: `ruler_score` (fraction; RULER reports it in percent). Sample ids
carry the record's `index` (tasks.base.record_ids).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from freekv_runtime.errors import RuntimeInputError
from freekv_runtime.stats import Estimate
from freekv_runtime.tasks.answer import answer_text
from freekv_runtime.tasks.base import SequenceRunner, TaskSpec, record_ids, sample_id
from freekv_runtime.tasks.local_data import DataSource, find_records
from freekv_runtime.tasks.ruler_common import check_params, encode, score_samples

__all__ = ["RulerJsonlTask", "ruler_metric"]

# the files RULER's prepare.py writes (the data param is required: RULER data is not on the HF hub)
_FILES = DataSource("NVIDIA/RULER", ("validation.jsonl", "*.jsonl"))
# RULER's tokens_to_generate per task family (scripts/data/synthetic/constants.py)
_DECODE = {
    "niah": 128,
    "vt": 30,
    "variable_tracking": 30,
    "cwe": 120,
    "common_words": 120,
    "fwe": 50,
    "freq_words": 50,
    "qa": 32,
}


def ruler_metric(task: str) -> str:
    """'part' for RULER's QA tasks (qa_1, qa_2, ...), 'all' for the rest."""
    return "part" if task.lower().startswith("qa") else "all"


class RulerJsonlTask:
    name = "ruler_jsonl"
    metrics = ("ruler_score",)
    default_decode_tokens = 64
    needs_attention_mass = False

    def _load(self, spec: TaskSpec) -> tuple[list[dict[str, Any]], str]:
        check_params(self.name, spec.params, {"data", "ruler_task"})
        if "data" not in spec.params:
            raise RuntimeInputError(
                "ruler_jsonl needs params.data: the .jsonl file (or a directory holding validation.jsonl) "
                "that RULER's scripts/data/prepare.py wrote for this model's tokenizer; RULER data is not "
                "on the HF hub, so no cache is searched"
            )
        records, path = find_records(self.name, spec.params, [_FILES])
        task = str(
            spec.params.get("ruler_task") or (path.parent.name if path.stem == "validation" else path.stem)
        )
        bad = [i for i, r in enumerate(records[: spec.n_samples]) if "input" not in r or "outputs" not in r]
        if bad:
            raise RuntimeInputError(f"ruler_jsonl {path}: records {bad[:5]} lack 'input' or 'outputs'")
        return records[: spec.n_samples], task

    def check(self, spec: TaskSpec) -> None:
        self._load(spec)

    def decode_tokens(self, spec: TaskSpec, task: str) -> int:
        if spec.decode_tokens:
            return spec.decode_tokens
        return next(
            (n for k, n in _DECODE.items() if Path(task).name.lower().startswith(k)),
            self.default_decode_tokens,
        )

    def run(self, spec: TaskSpec, runner: SequenceRunner, seed: int) -> dict[str, Estimate]:
        records, task = self._load(spec)
        n_new = self.decode_tokens(spec, task)
        prompts = [encode(runner.tokenizer, r["input"] + str(r.get("answer_prefix") or "")) for r in records]
        too_long = [i for i, p in enumerate(prompts) if len(p) + n_new > spec.context_tokens]
        if too_long:
            raise RuntimeInputError(
                f"ruler_jsonl: records {too_long[:5]} need {max(len(prompts[i]) for i in too_long)} prompt "
                f"tokens "
                f"+ {n_new} decode tokens > context_tokens {spec.context_tokens}; prepare RULER data at this "
                "length or raise context_tokens"
            )
        outputs = runner.generate_batch(prompts, n_new)
        preds = [answer_text(runner.tokenizer, ids) for ids, _ in outputs]
        refs = [[str(o) for o in r["outputs"]] for r in records]
        ids = [sample_id(spec, seed, key) for key in record_ids(records)]
        return {"ruler_score": score_samples(preds, refs, ruler_metric(task), seed, ids)}
