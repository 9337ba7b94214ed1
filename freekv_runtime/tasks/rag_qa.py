"""rag_qa: a local multi-document QA file, each retrieved passage a separately cached document.

`params.data` (required): a .jsonl / .json / .csv / .parquet file of records in one of the common layouts
(read with tasks/local_data.py, never the network):
- question + answers (list or string; also `answer`, `answer_aliases`, `golden_answers`) + `contexts` (list
  of strings) or `ctxs` / `passages` (list of {title, text}; NQ/TriviaQA as DPR and FiD store them);
- HotpotQA and 2WikiMultihopQA: `context` as [[title, [sentence, ...]], ...] or {title: [...],
  sentences: [[...], ...]};
- MuSiQue: `paragraphs` as [{title, paragraph_text}, ...].
Params: `documents` (the first k passages, default 4), `template` (plain | chat). The prompt: a prefix
"Answer the question based on the given passages. Only give me the answer and do not output any other
words.\n\nThe following are given passages.\n", each passage "Passage {i}:\nTitle: {title}\n{text}\n" as
a document (cut to an equal share of context_tokens by dropping its middle, as LongBench does), and the
query "\nAnswer the question based on the given passages. Only give me the answer and do not output any
other words.\n\nQuestion: {question}\nAnswer:" (LongBench's hotpotqa / 2wikimqa / musique prompt, split
at the passages). Score: string_match_part over the gold answers (any alias, case-insensitive); fidelity
against joint prefill (tasks/rag_common.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from freekv_runtime.errors import RuntimeInputError
from freekv_runtime.stats import Estimate
from freekv_runtime.tasks.base import TaskSpec, record_ids
from freekv_runtime.tasks.local_data import read_records, truncate_middle
from freekv_runtime.tasks.rag_common import RagSample, rag_metrics, run_rag
from freekv_runtime.tasks.ruler_common import chat_wrap, check_params, encode, int_param, template_param

__all__ = ["RagQATask", "parse_record"]

PREFIX = ("Answer the question based on the given passages. Only give me the answer and do not output any "
          "other words.\n\nThe following are given passages.\n")
QUERY = ("\nAnswer the question based on the given passages. Only give me the answer and do not output any "
         "other words.\n\nQuestion: {question}\nAnswer:")
_LAYOUTS = ("contexts", "ctxs", "passages", "context", "paragraphs")


def _answers(record: dict[str, Any]) -> list[str]:
    found: list[str] = []
    for name in ("answers", "answer", "answer_aliases", "golden_answers"):
        value = record.get(name)
        if isinstance(value, str) and value.strip():
            found.append(value)
        elif isinstance(value, list):
            found += [a for a in value if isinstance(a, str) and a.strip()]
        elif isinstance(value, dict) and isinstance(value.get("text"), list):  # SQuAD-style answers
            found += [a for a in value["text"] if isinstance(a, str)]
    return list(dict.fromkeys(found))


def _passages(record: dict[str, Any]) -> list[tuple[str, str]]:
    """(title, text) of each passage in any of the layouts (module docstring); [] when none."""
    if isinstance(record.get("contexts"), list):
        return [("", c) if isinstance(c, str) else (str(c.get("title", "")), str(c.get("text", "")))
                for c in record["contexts"] if isinstance(c, (str, dict))]
    for name in ("ctxs", "passages"):
        if isinstance(record.get(name), list):
            return [(str(c.get("title", "")), str(c.get("text", c.get("passage_text", ""))))
                    for c in record[name] if isinstance(c, dict)]
    ctx = record.get("context")
    if isinstance(ctx, list):  # HotpotQA / 2Wiki: [[title, [sentences]], ...]
        return [(str(c[0]), "".join(c[1]) if isinstance(c[1], list) else str(c[1]))
                for c in ctx if isinstance(c, (list, tuple)) and len(c) == 2]
    if isinstance(ctx, dict) and isinstance(ctx.get("title"), list):  # HF hotpot_qa layout
        return [(str(t), "".join(s)) for t, s in zip(ctx["title"], ctx.get("sentences", []), strict=False)]
    if isinstance(record.get("paragraphs"), list):  # MuSiQue
        return [(str(p.get("title", "")), str(p.get("paragraph_text", p.get("text", ""))))
                for p in record["paragraphs"] if isinstance(p, dict)]
    return []


def parse_record(record: dict[str, Any], where: str) -> tuple[str, list[str], list[tuple[str, str]]]:
    """(question, answers, passages) of one record; RuntimeInputError naming the record and the fields."""
    question = record.get("question") or record.get("query") or record.get("input")
    answers, passages = _answers(record), [p for p in _passages(record) if p[1].strip()]
    if not isinstance(question, str) or not question.strip():
        raise RuntimeInputError(f"rag_qa {where}: no 'question' (or 'query', 'input') string")
    if not answers:
        raise RuntimeInputError(f"rag_qa {where}: no gold answer ('answers', 'answer', 'answer_aliases' or "
                                "'golden_answers')")
    if not passages:
        raise RuntimeInputError(f"rag_qa {where}: no passages; give one of {', '.join(_LAYOUTS)} (see "
                                "docs/tasks.md, rag_qa)")
    return question, answers, passages


class RagQATask:
    name = "rag_qa"
    default_decode_tokens = 32  # LongBench's maxlen for hotpotqa / 2wikimqa / musique
    needs_attention_mass = False
    multi_context = True

    @property
    def metrics(self) -> tuple[str, ...]:
        return rag_metrics(self.name)

    def _load(self, spec: TaskSpec) -> tuple[list[dict[str, Any]], Path, dict[str, Any]]:
        check_params(self.name, spec.params, {"data", "documents", "template"})
        p = {"documents": int_param(self.name, spec.params, "documents", 4, 1, 64),
             "template": template_param(self.name, spec.params)}
        if "data" not in spec.params:
            raise RuntimeInputError("rag_qa needs params.data: a local multi-document QA file (.jsonl, "
                                    ".json, .csv, .parquet) with question, answers and passages "
                                    "(docs/tasks.md)")
        path = Path(str(spec.params["data"])).expanduser()
        if not path.is_file():
            raise RuntimeInputError(f"rag_qa params.data {path}: no such file; give a local multi-document "
                                    "QA file (.jsonl, .json, .csv, .parquet)")
        records = read_records(path)[: spec.n_samples]
        if not records:
            raise RuntimeInputError(f"rag_qa {path}: the file holds no records")
        ids = record_ids(records)
        for rid, record in zip(ids, records, strict=True):
            parse_record(record, f"{path} record {rid}")
        return records, path, p

    def check(self, spec: TaskSpec) -> None:
        self._load(spec)

    def samples(self, spec: TaskSpec, tokenizer: Any, seed: int) -> list[RagSample]:
        records, path, p = self._load(spec)
        before, after = chat_wrap(tokenizer, p["template"])
        prefix = encode(tokenizer, before + PREFIX)
        n_tokens = spec.decode_tokens or self.default_decode_tokens
        out = []
        for rid, record in zip(record_ids(records), records, strict=True):
            question, answers, passages = parse_record(record, f"{path} record {rid}")
            query = encode(tokenizer, QUERY.format(question=question) + after)
            passages = passages[: p["documents"]]
            share = (spec.context_tokens - n_tokens - len(prefix) - len(query)) // len(passages)
            if share < 16:
                raise RuntimeInputError(f"rag_qa {path} record {rid}: context_tokens {spec.context_tokens} "
                                        f"leaves {share} tokens per passage; give more context_tokens")
            docs = [truncate_middle(encode(tokenizer, f"Passage {i + 1}:\nTitle: {title}\n{text}\n"), share)
                    for i, (title, text) in enumerate(passages)]
            out.append(RagSample(prefix, docs, query, answers, rid))
        return out

    def run(self, spec: TaskSpec, runner: Any, seed: int) -> dict[str, Estimate]:
        samples = self.samples(spec, runner.tokenizer, seed)
        return run_rag(self.name, spec, runner, seed, samples,
                       spec.decode_tokens or self.default_decode_tokens, "part")
