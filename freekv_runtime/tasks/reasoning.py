"""Reasoning with sampling: MATH500, AIME24 and GPQA, k samples per problem, pass@k and avg@k.

As the FreeKV paper reports them (temperature 0.6, top-p 0.95, k = 8, long generations): each problem
is sampled k times (params `k`, `temperature`, `top_p`; one seeded generator per sample, so the k
samples of a problem run as one batch with the same results as one by one). pass@k: share of problems
with at least one correct sample (Wilson interval); avg@k: mean over problems of the share of correct
samples (bootstrap over problems).

Data, local only (tasks/local_data.py; `data` param or the HF caches):
- `math500`: HuggingFaceH4/MATH-500 (`test.jsonl`: problem, solution, answer, subject, level, unique_id).
- `aime24`: HuggingFaceH4/aime_2024 or Maxwell-Jia/AIME_2024 (problem / Problem, answer / Answer).
- `gpqa`: Idavidrein/gpqa (`gpqa_diamond.csv`: Question, Correct Answer, Incorrect Answer 1-3); the
  four choices are shuffled per problem with the task seed.
Prompts (the model's chat template): MATH500 and AIME24 "{problem}\nPlease reason step by step, and put
your final answer within \\boxed{}." (DeepSeek-R1's recommended prompt); GPQA the simple-evals
multiple-choice template ending "Answer: $LETTER". Scoring: math answers compare the last \\boxed{...}
after normalisation (spaces, \\left/\\right, \\dfrac, \\text{}, $ and a trailing period removed; numbers
compared as numbers): a string check, not a symbolic-equivalence checker (math-verify), so equivalent
forms written differently count as wrong. GPQA: the letter after the last "Answer:" (or the last boxed
letter). Metrics: `<task>_pass_at_k`, `<task>_avg_at_k`. Per-sample results are per problem (the
record's own id where it has one), the answer being the k extracted answers joined by " | ".
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

import numpy as np

from freekv_runtime.decode import Sampling
from freekv_runtime.errors import RuntimeInputError
from freekv_runtime.stats import Estimate, bootstrap_mean, proportion
from freekv_runtime.tasks.answer import answer_text
from freekv_runtime.tasks.base import SequenceRunner, TaskSpec, record_ids, sample_id
from freekv_runtime.tasks.local_data import DataSource, chat_prompt, field, find_records
from freekv_runtime.tasks.ruler_common import check_params, encode, int_param

__all__ = [
    "Math500Task",
    "Aime24Task",
    "GpqaTask",
    "last_boxed",
    "normalize_answer",
    "math_equal",
    "gpqa_letter",
]

MATH_PROMPT = "{problem}\nPlease reason step by step, and put your final answer within \\boxed{{}}."
GPQA_PROMPT = (
    "Answer the following multiple choice question. The last line of your response should be of the "
    "following format: 'Answer: $LETTER' (without quotes) where LETTER is one of ABCD. Think step by step "
    "before answering.\n\n{question}\n\nA) {a}\nB) {b}\nC) {c}\nD) {d}"
)


def last_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...} (braces balanced), None when there is none."""
    start = text.rfind("\\boxed")
    if start < 0:
        return None
    i = text.find("{", start)
    if i < 0:
        return None
    depth = 0
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1 : j]
    return None


def normalize_answer(answer: str) -> str:
    s = answer.strip()
    s = re.sub(r"\\text\{([^}]*)\}", r"\1", s)
    for old, new in (
        ("\\left", ""),
        ("\\right", ""),
        ("\\!", ""),
        ("\\,", ""),
        ("dfrac", "frac"),
        ("tfrac", "frac"),
        ("^\\circ", ""),
        ("^{\\circ}", ""),
        ("$", ""),
        (" ", ""),
    ):
        s = s.replace(old, new)
    return s.rstrip(".")


def math_equal(prediction: str | None, reference: str) -> bool:
    if prediction is None:
        return False
    a, b = normalize_answer(prediction), normalize_answer(reference)
    if a == b:
        return True
    try:
        return abs(float(a.replace(",", "")) - float(b.replace(",", ""))) < 1e-6
    except ValueError:
        return False


def gpqa_letter(text: str) -> str | None:
    matches = re.findall(r"(?i)Answer\s*:\s*\$?\(?([A-D])\)?\$?", text)
    if matches:
        return matches[-1].upper()
    boxed = last_boxed(text)
    return boxed.strip().upper() if boxed and boxed.strip().upper() in "ABCD" and boxed.strip() else None


class _Reasoning:
    name: ClassVar[str]
    sources: ClassVar[list[DataSource]]
    default_decode_tokens = 1024  # the FreeKV paper: up to 16K
    needs_attention_mass = False

    @property
    def metrics(self) -> tuple[str, ...]:
        return (f"{self.name}_pass_at_k", f"{self.name}_avg_at_k")

    def _params(self, spec: TaskSpec) -> dict[str, Any]:
        check_params(self.name, spec.params, {"data", "k", "temperature", "top_p"})
        try:
            sampling = Sampling(
                float(spec.params.get("temperature", 0.6)), float(spec.params.get("top_p", 0.95))
            )
        except (TypeError, ValueError) as exc:
            raise RuntimeInputError(f"{self.name} sampling params: {exc}") from None
        return {"k": int_param(self.name, spec.params, "k", 8, 1, 1024), "sampling": sampling}

    def problems(self, spec: TaskSpec, seed: int) -> list[tuple[str, str]]:
        """(question text, reference answer) of the first n_samples problems."""
        self._params(spec)
        records, path = find_records(self.name, spec.params, self.sources)
        try:
            return [
                self._problem(r, np.random.default_rng([seed, i]))
                for i, r in enumerate(records[: spec.n_samples])
            ]
        except KeyError as exc:
            raise RuntimeInputError(f"{self.name} data {path}: {exc.args[0]}") from None

    def _problem(self, record: dict[str, Any], rng: np.random.Generator) -> tuple[str, str]:
        return MATH_PROMPT.format(problem=field(record, "problem")), str(field(record, "answer"))

    def problem_ids(self, spec: TaskSpec) -> list[str]:
        """The records' own ids of the problems that run (tasks.base.record_ids)."""
        records, _ = find_records(self.name, spec.params, self.sources)
        return record_ids(records[: spec.n_samples])

    def extract(self, text: str) -> str | None:
        """The answer a generation gives (what `correct` compares)."""
        return last_boxed(text)

    def correct(self, text: str, reference: str) -> bool:
        return math_equal(self.extract(text), reference)

    def check(self, spec: TaskSpec) -> None:
        self.problems(spec, 0)

    def run(self, spec: TaskSpec, runner: SequenceRunner, seed: int) -> dict[str, Estimate]:
        p = self._params(spec)
        problems = self.problems(spec, seed)
        k, n_new = p["k"], spec.decode_tokens or self.default_decode_tokens
        prompts, seeds = [], []
        for i, (question, _) in enumerate(problems):
            ids = encode(runner.tokenizer, chat_prompt(runner.tokenizer, question, True))
            if len(ids) + n_new > spec.context_tokens:
                raise RuntimeInputError(
                    f"{self.name}: problem {i} needs {len(ids)} prompt + {n_new} decode tokens "
                    f"> context_tokens "
                    f"{spec.context_tokens}"
                )
            prompts += [ids] * k
            seeds += [seed * 1_000_003 + i * k + j for j in range(k)]
        outputs = runner.generate_batch(prompts, n_new, p["sampling"], seeds)
        texts = [answer_text(runner.tokenizer, ids) for ids, _ in outputs]
        hits = np.array(
            [self.correct(text, problems[n // k][1]) for n, text in enumerate(texts)]
        ).reshape(len(problems), k)
        ids = [sample_id(spec, seed, key) for key in self.problem_ids(spec)]
        extracted = [self.extract(text) for text in texts]
        answers = [" | ".join(str(a) for a in extracted[i * k : (i + 1) * k]) for i in range(len(problems))]
        return {
            f"{self.name}_pass_at_k": proportion(hits.any(axis=1), ids=ids, answers=answers),
            f"{self.name}_avg_at_k": bootstrap_mean(hits.mean(axis=1), seed, ids=ids, answers=answers),
        }


class Math500Task(_Reasoning):
    name = "math500"
    sources = [DataSource("HuggingFaceH4/MATH-500", ("test.jsonl", "*.jsonl", "*.json", "*.parquet"))]


class Aime24Task(_Reasoning):
    name = "aime24"
    sources = [
        DataSource("HuggingFaceH4/aime_2024", ("*.jsonl", "*.json", "*.parquet")),
        DataSource("Maxwell-Jia/AIME_2024", ("*.jsonl", "*.json", "*.parquet")),
    ]


class GpqaTask(_Reasoning):
    name = "gpqa"
    sources = [DataSource("Idavidrein/gpqa", ("gpqa_diamond.csv", "*.csv", "*.jsonl", "*.json", "*.parquet"))]

    def _problem(self, record: dict[str, Any], rng: np.random.Generator) -> tuple[str, str]:
        choices = [str(field(record, "Correct Answer"))] + [
            str(field(record, f"Incorrect Answer {i}")) for i in (1, 2, 3)
        ]
        order = rng.permutation(4)
        shown = [choices[i].strip() for i in order]
        letter = "ABCD"[int(np.flatnonzero(order == 0)[0])]
        text = GPQA_PROMPT.format(
            question=str(field(record, "Question")).strip(), a=shown[0], b=shown[1], c=shown[2], d=shown[3]
        )
        return text, letter

    def extract(self, text: str) -> str | None:
        return gpqa_letter(text)

    def correct(self, text: str, reference: str) -> bool:
        return self.extract(text) == reference
