"""KV policies by name. Adding a method: one file here with a `KVPolicy` subclass, one line below."""

from __future__ import annotations

import importlib

from freekv_runtime.config import RuntimeConfig, RuntimeConfigError

__all__ = ["POLICIES", "make_policy"]

# name -> "module:class"; imported on demand.
POLICIES: dict[str, str] = {
    "full": "freekv_runtime.policies.full:FullPolicy",
    "freekv": "freekv_runtime.policies.freekv:FreeKVPolicy",
    # dropping methods (evicted tokens are gone; see freekv_runtime.policies._dropping)
    "streamingllm": "freekv_runtime.policies.streamingllm:StreamingLLMPolicy",
    "h2o": "freekv_runtime.policies.h2o:H2OPolicy",
    "snapkv": "freekv_runtime.policies.snapkv:SnapKVPolicy",
    "raas": "freekv_runtime.policies.raas:RaaSPolicy",
    # always-correct page retrieval (see freekv_runtime.policies._sync_retrieval)
    "quest": "freekv_runtime.policies.quest:QuestPolicy",
    "arkvale": "freekv_runtime.policies.arkvale:ArkValePolicy",
}


def make_policy(config: RuntimeConfig):
    """The policy named by `config.method`, configured."""
    try:
        target = POLICIES[config.method]
    except KeyError:
        raise RuntimeConfigError(
            f"unknown method {config.method!r}: valid methods are {', '.join(sorted(POLICIES))}"
        ) from None
    module_name, class_name = target.split(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls(config)
