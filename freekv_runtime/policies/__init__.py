"""KV policies by name. Adding a method: one file here with a `KVPolicy` subclass, one line below."""

from __future__ import annotations

import importlib

from freekv_runtime.config import RuntimeConfig, RuntimeConfigError

__all__ = ["POLICIES", "KIND", "make_policy"]

# name -> "module:class"; imported on demand.
POLICIES: dict[str, str] = {
    "full": "freekv_runtime.policies.full:FullPolicy",
    "freekv": "freekv_runtime.policies.freekv:FreeKVPolicy",
    # dropping methods (evicted tokens are gone; see freekv_runtime.policies._dropping)
    "streamingllm": "freekv_runtime.policies.streamingllm:StreamingLLMPolicy",
    "h2o": "freekv_runtime.policies.h2o:H2OPolicy",
    "snapkv": "freekv_runtime.policies.snapkv:SnapKVPolicy",
    "raas": "freekv_runtime.policies.raas:RaaSPolicy",
    "razorattention": "freekv_runtime.policies.razorattention:RazorAttentionPolicy",
    # retrieval methods (the whole KV stays reachable on the host, a subset is attended)
    "infinigen": "freekv_runtime.policies.infinigen:InfiniGenPolicy",
    "shadowkv": "freekv_runtime.policies.shadowkv:ShadowKVPolicy",  # low-rank keys on the device
    # always-correct page retrieval (see freekv_runtime.policies._sync_retrieval)
    "quest": "freekv_runtime.policies.quest:QuestPolicy",
    "arkvale": "freekv_runtime.policies.arkvale:ArkValePolicy",
}

# name -> "retrieval" (the whole KV stays reachable on the host, a subset is attended), "dropping"
# (evicted tokens are gone) or "dense"; one line per method, names that are not registered yet included.
KIND: dict[str, str] = {
    "full": "dense",
    "freekv": "retrieval",
    "quest": "retrieval",
    "arkvale": "retrieval",
    "shadowkv": "retrieval",
    "infinigen": "retrieval",
    "streamingllm": "dropping",
    "h2o": "dropping",
    "snapkv": "dropping",
    "raas": "dropping",
    "razorattention": "dropping",
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
