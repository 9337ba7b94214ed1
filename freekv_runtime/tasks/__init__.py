"""Tasks by name. Adding a task: one module here with a class following `tasks.base.Task`, one line below."""

from __future__ import annotations

import importlib

from freekv_runtime.errors import RuntimeInputError
from freekv_runtime.tasks.base import ForcedResult, SequenceRunner, Task, TaskSpec

__all__ = ["TASKS", "get_task", "TaskSpec", "SequenceRunner", "ForcedResult", "Task"]

# name -> "module:class"; imported on demand.
TASKS: dict[str, str] = {
    "passkey": "freekv_runtime.tasks.passkey:PasskeyTask",
    "fidelity": "freekv_runtime.tasks.fidelity:FidelityTask",
    "longgen": "freekv_runtime.tasks.longgen:LongGenTask",
    "niah_single": "freekv_runtime.tasks.niah:NiahSingleTask",
    "niah_multikey": "freekv_runtime.tasks.niah:NiahMultiKeyTask",
    "niah_multikey_2": "freekv_runtime.tasks.niah:NiahMultiKey2Task",
    "niah_multikey_3": "freekv_runtime.tasks.niah:NiahMultiKey3Task",
    "niah_multivalue": "freekv_runtime.tasks.niah:NiahMultiValueTask",
    "niah_multiquery": "freekv_runtime.tasks.niah:NiahMultiQueryTask",
    "vt": "freekv_runtime.tasks.variable_tracking:VariableTrackingTask",
    "cwe": "freekv_runtime.tasks.words:CommonWordsTask",
    "fwe": "freekv_runtime.tasks.words:FrequentWordsTask",
    "rag_facts": "freekv_runtime.tasks.rag_facts:RagFactsTask",
    # benchmark loaders (local data only, see tasks/local_data.py)
    "longbench_v2": "freekv_runtime.tasks.longbench_v2:LongBenchV2Task",
    "ruler_jsonl": "freekv_runtime.tasks.ruler_jsonl:RulerJsonlTask",
    "rag_qa": "freekv_runtime.tasks.rag_qa:RagQATask",
    "longgenbench": "freekv_runtime.tasks.longgenbench:LongGenBenchTask",
    "math500": "freekv_runtime.tasks.reasoning:Math500Task",
    "aime24": "freekv_runtime.tasks.reasoning:Aime24Task",
    "gpqa": "freekv_runtime.tasks.reasoning:GpqaTask",
}


def get_task(name: str) -> Task:
    """The task named `name`; RuntimeInputError listing the valid names otherwise."""
    try:
        target = TASKS[name]
    except KeyError:
        valid = ", ".join(sorted(TASKS))
        raise RuntimeInputError(f"unknown task {name!r}: valid tasks are {valid}") from None
    module_name, class_name = target.split(":")
    return getattr(importlib.import_module(module_name), class_name)()
