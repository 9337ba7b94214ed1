"""LongBench v2 (THUDM/LongBench-v2): long-context multiple choice, from local data only.

Records (the dataset's `data.json`): `_id`, `domain`, `sub_domain`, `difficulty`, `length`, `question`,
`choice_A`..`choice_D`, `answer` (a letter), `context`. Prompt: LongBench v2's zero-shot template
(`prompts/0shot.txt`: the document, the question, the four choices, and "Format your response as
follows: "The correct answer is (insert answer here)"."), inside the model's chat template; the
document is cut in the middle so that prompt + decode tokens fit `context_tokens` (the FreeKV paper cut
inputs to 64K). Greedy. Scoring as LongBench v2's `result.py`: the letter of "The correct answer is (X)"
(or "... is X"), asterisks removed; accuracy with a Wilson interval. Params: `data` (file or directory,
see tasks/local_data.py), `difficulty` (easy | hard), `length` (short | medium | long), `domain`,
`template` (chat | plain). The first `n_samples` matching records run.
Metric: `longbench_v2_accuracy`; sample ids carry the record's `_id` (tasks.base.record_ids).
"""

from __future__ import annotations

import re
from typing import Any

from freekv_runtime.errors import RuntimeInputError
from freekv_runtime.stats import Estimate, proportion
from freekv_runtime.tasks.answer import answer_text
from freekv_runtime.tasks.base import SequenceRunner, TaskSpec, record_ids, sample_id
from freekv_runtime.tasks.local_data import DataSource, chat_prompt, field, find_records, truncate_middle
from freekv_runtime.tasks.ruler_common import check_params, encode

__all__ = ["LongBenchV2Task", "extract_choice", "SOURCES"]

SOURCES = [
    DataSource("THUDM/LongBench-v2", ("data.json", "*.json", "*.jsonl", "*.parquet")),
    DataSource("zai-org/LongBench-v2", ("data.json", "*.json", "*.jsonl", "*.parquet")),
]
DOC_HEAD = "Please read the following text and answer the question below.\n\n<text>\n"
QUESTION = (
    "\n</text>\n\nWhat is the correct answer to this question: {question}\nChoices:\n(A) {a}\n(B) {b}\n"
    '(C) {c}\n(D) {d}\n\nFormat your response as follows: "The correct answer is (insert answer here)".'
)
_PARAMS = {"data", "difficulty", "length", "domain", "template"}


def extract_choice(response: str) -> str | None:
    """The answer letter of a response, as LongBench v2 extracts it; None when there is none."""
    response = response.replace("*", "")
    match = re.search(r"The correct answer is \(([A-D])\)", response) or re.search(
        r"The correct answer is ([A-D])", response
    )
    return match.group(1) if match else None


class LongBenchV2Task:
    name = "longbench_v2"
    metrics = ("longbench_v2_accuracy",)
    default_decode_tokens = 128  # LongBench v2 pred.py max_new_tokens (no CoT)

    def generation_notes(self, spec: TaskSpec) -> list[str]:
        """Where this run's generation differs from LongBench v2's official settings (THUDM/LongBench
        pred.py: temperature 0.1, max_new_tokens 128 without CoT; rooikeee/FreeKV
        accuracy/eval/LongBench2/pred.py:106 the same)."""
        notes = ["longbench_v2: greedy decoding, where the official pred.py samples at temperature 0.1"]
        n = spec.decode_tokens or self.default_decode_tokens
        if n != 128:
            notes.append(f"longbench_v2: {n} decode tokens, the official max_new_tokens is 128")
        return notes
    needs_attention_mass = False

    def records(self, spec: TaskSpec) -> list[dict[str, Any]]:
        check_params(self.name, spec.params, _PARAMS)
        records, path = find_records(self.name, spec.params, SOURCES)
        for key in ("difficulty", "length", "domain"):
            if key in spec.params:
                records = [r for r in records if str(r.get(key)) == str(spec.params[key])]
        if not records:
            raise RuntimeInputError(f"longbench_v2: no record of {path} matches the filters {spec.params}")
        try:
            for r in records[: spec.n_samples]:
                field(r, "question"), field(r, "answer"), field(r, "context"), field(r, "choice_A")
        except KeyError as exc:
            raise RuntimeInputError(f"longbench_v2 data {path}: {exc.args[0]}") from None
        return records[: spec.n_samples]

    def check(self, spec: TaskSpec) -> None:
        self.records(spec)

    def prompts(self, spec: TaskSpec, tokenizer: Any) -> list[list[int]]:
        use_chat = spec.params.get("template", "chat") == "chat"
        budget = spec.context_tokens - (spec.decode_tokens or self.default_decode_tokens)
        out = []
        for r in self.records(spec):
            question = QUESTION.format(
                question=r["question"], a=r["choice_A"], b=r["choice_B"], c=r["choice_C"], d=r["choice_D"]
            )
            before, after = chat_prompt(tokenizer, "\x00", use_chat).split("\x00")
            fixed = encode(tokenizer, before + DOC_HEAD), encode(tokenizer, question + after)
            room = budget - len(fixed[0]) - len(fixed[1])
            if room < 16:
                raise RuntimeInputError(
                    f"longbench_v2: context_tokens {spec.context_tokens} leaves no room for the document"
                )
            out.append(fixed[0] + truncate_middle(encode(tokenizer, r["context"]), room) + fixed[1])
        return out

    def run(self, spec: TaskSpec, runner: SequenceRunner, seed: int) -> dict[str, Estimate]:
        records = self.records(spec)
        outputs = runner.generate_batch(
            self.prompts(spec, runner.tokenizer), spec.decode_tokens or self.default_decode_tokens
        )
        answers = [answer_text(runner.tokenizer, ids) for ids, _ in outputs]
        return {"longbench_v2_accuracy": proportion(
            [extract_choice(a) == str(r["answer"]).strip() for r, a in zip(records, answers, strict=True)],
            ids=[sample_id(spec, seed, key) for key in record_ids(records)], answers=answers,
        )}
