"""LongGenBench (Wu et al., ICLR 2025; mozhu621/LongGenBench): long-form generation, from local data.

Records (`Dataset/Dataset_short.json` / `Dataset_long.json`, HF `mozhu/LongGenBench`): `prompt`, `type`
(the block name, e.g. "Week", "Floor", "Day"), `number` (blocks expected), `prefix` (how the first block
starts), `checks_once`, `checks_range`, `checks_periodic` ({block number: event}, as dicts or their
Python repr). As the benchmark's `inference.py`: the raw prompt, sampling (temperature 0.95, top-p 0.95,
params `temperature`, `top_p`), the output is `prefix` + the generated text, split into blocks at "#*#";
a block belongs to the first number after "<type> " in it. As its `eval.py`: completion rate = share of
blocks 1..number present; accuracy = share of the checks whose block is present that the judge says the
block includes (0 when no checked block is present; the benchmark pools checks per kind over samples).
The judge
(`judge` param): "model" (default) asks the loaded model with dense attention "Does this context include
the {event}? Please answer with 'yes' or 'no' only." (the benchmark used Llama-3.1-8B-Instruct as the
judge; here it is the model under test), "keyword" checks that the event text occurs in the block
(case-insensitive; deterministic, cheap, stricter). Per sample: CR, accuracy over all its checks, and
CR x accuracy; intervals bootstrap over samples. Params: `data`, `judge`, `temperature`, `top_p`.
Metrics: `longgenbench_completion_rate`, `longgenbench_accuracy`, `longgenbench_cr_x_acc` (fractions),
with per-sample results whose answer is the head of the output.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from freekv_runtime.decode import Sampling
from freekv_runtime.errors import RuntimeInputError
from freekv_runtime.stats import Estimate, bootstrap_mean
from freekv_runtime.tasks.answer import answer_text
from freekv_runtime.tasks.base import SequenceRunner, TaskSpec, record_ids, sample_id
from freekv_runtime.tasks.local_data import DataSource, find_records
from freekv_runtime.tasks.ruler_common import check_params, encode

__all__ = ["LongGenBenchTask", "split_blocks", "checks_of"]

SOURCES = [DataSource("mozhu/LongGenBench", ("Dataset_short.json", "*.json", "*.jsonl", "*.parquet"))]
JUDGE = (
    "Context: {block}### Instruction: Does this context include the {event}? "
    "Please answer with 'yes' or 'no' only."
)
JUDGE_TOKENS = 8


def split_blocks(output: str, block_type: str) -> dict[int, str]:
    """Block number -> its text: the output split at '#*#', each block keyed by the first number after
    '<block_type> ' (the first block with a number wins)."""
    blocks: dict[int, str] = {}
    for block in output.split("#*#"):
        match = re.search(rf"{re.escape(block_type)} (\d+)", block)
        if match and int(match.group(1)) not in blocks:
            blocks[int(match.group(1))] = block
    return blocks


def checks_of(record: dict[str, Any]) -> list[tuple[int, str]]:
    """(block number, event) of every check of a record (once, range, periodic)."""
    out = []
    for key in ("checks_once", "checks_range", "checks_periodic"):
        checks = record.get(key) or {}
        if isinstance(checks, str):
            checks = ast.literal_eval(checks)
        out += [(int(k), str(v)) for k, v in checks.items()]
    return out


class LongGenBenchTask:
    name = "longgenbench"
    metrics = ("longgenbench_completion_rate", "longgenbench_accuracy", "longgenbench_cr_x_acc")
    default_decode_tokens = 1024  # the FreeKV paper generated up to 16K tokens

    def generation_notes(self, spec: TaskSpec) -> list[str]:
        """Where this run's generation differs from the official setting: LongGenBench short generates
        up to 16000 tokens, long up to 32000 (rooikeee/FreeKV accuracy/eval/LongGenBench/pred.py:293-296);
        sampling (temperature, top_p) follows the benchmark's inference.py defaults unless changed."""
        n = spec.decode_tokens or self.default_decode_tokens
        notes = []
        if n < 16000:
            notes.append(f"longgenbench: {n} decode tokens, the official run generates up to 16000 "
                         "(short) or 32000 (long): blocks past the budget count as missing")
        t, top_p = spec.params.get("temperature", 0.95), spec.params.get("top_p", 0.95)
        if (float(t), float(top_p)) != (0.95, 0.95):
            notes.append(f"longgenbench: temperature {t}, top_p {top_p}; the benchmark's are 0.95, 0.95")
        return notes
    needs_attention_mass = False

    def _params(self, spec: TaskSpec) -> dict[str, Any]:
        check_params(self.name, spec.params, {"data", "judge", "temperature", "top_p"})
        judge = spec.params.get("judge", "model")
        if judge not in ("model", "keyword"):
            raise RuntimeInputError(f"longgenbench judge must be 'model' or 'keyword', got {judge!r}")
        try:
            sampling = Sampling(
                float(spec.params.get("temperature", 0.95)), float(spec.params.get("top_p", 0.95))
            )
        except (TypeError, ValueError) as exc:
            raise RuntimeInputError(f"longgenbench sampling params: {exc}") from None
        return {"judge": judge, "sampling": sampling}

    def records(self, spec: TaskSpec) -> list[dict[str, Any]]:
        self._params(spec)
        records, path = find_records(self.name, spec.params, SOURCES)
        for r in records[: spec.n_samples]:
            missing = [k for k in ("prompt", "type", "number") if k not in r]
            if missing:
                raise RuntimeInputError(f"longgenbench data {path}: a record lacks {missing}")
        return records[: spec.n_samples]

    def check(self, spec: TaskSpec) -> None:
        self.records(spec)

    def run(self, spec: TaskSpec, runner: SequenceRunner, seed: int) -> dict[str, Estimate]:
        p = self._params(spec)
        records = self.records(spec)
        n_new = spec.decode_tokens or self.default_decode_tokens
        prompts = [encode(runner.tokenizer, r["prompt"]) for r in records]
        too_long = [i for i, ids in enumerate(prompts) if len(ids) + n_new > spec.context_tokens]
        if too_long:
            raise RuntimeInputError(
                f"longgenbench: records {too_long[:5]} need more than context_tokens {spec.context_tokens} "
                f"(prompt + {n_new} decode tokens); raise context_tokens or lower decode_tokens"
            )
        outputs = runner.generate_batch(
            prompts, n_new, p["sampling"], [seed * 100_003 + i for i in range(len(prompts))]
        )
        cr, acc, both, texts = [], [], [], []
        for r, (ids, _) in zip(records, outputs, strict=True):
            text = str(r.get("prefix", "")) + answer_text(runner.tokenizer, ids)
            texts.append(text)
            blocks = split_blocks(text, str(r["type"]))
            number = int(r["number"])
            cr.append(len(set(blocks) & set(range(1, number + 1))) / number)
            judged = [(blocks[k], event) for k, event in checks_of(r) if k in blocks]
            yes = self._judge(runner, judged, p["judge"])
            acc.append(sum(yes) / len(judged) if judged else 0.0)
            both.append(cr[-1] * acc[-1])
        keys = [sample_id(spec, seed, key) for key in record_ids(records)]
        return {
            "longgenbench_completion_rate": bootstrap_mean(cr, seed, ids=keys, answers=texts),
            "longgenbench_accuracy": bootstrap_mean(acc, seed, ids=keys, answers=texts),
            "longgenbench_cr_x_acc": bootstrap_mean(both, seed, ids=keys, answers=texts),
        }

    @staticmethod
    def _judge(runner: SequenceRunner, judged: list[tuple[str, str]], mode: str) -> list[bool]:
        if mode == "keyword" or not judged:
            return [event.lower() in block.lower() for block, event in judged]
        prompts = [encode(runner.tokenizer, JUDGE.format(block=b, event=e)) for b, e in judged]
        answers = runner.dense_generate_batch(prompts, JUDGE_TOKENS)
        return [
            "yes" in answer_text(runner.tokenizer, a).strip().lower() for a in answers
        ]
