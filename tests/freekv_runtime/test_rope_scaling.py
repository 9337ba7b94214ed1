"""The runtime loads a registry model with the rope scaling its entry carries when the weights' config has
none (Qwen2.5's YaRN), and leaves configs with their own scaling (Llama 3.1) or none to carry alone."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from freekv_runtime.random_weights import random_config
from freekv_runtime.weights import rope_scaling_to_apply
from traces.models import get_model


def test_qwen_weights_without_scaling_get_the_registry_yarn() -> None:
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    spec = get_model("qwen-2.5-7b")
    shipped = random_config(replace(spec, rope_scaling={}, max_position_tokens=32768))  # as config.json
    rope = rope_scaling_to_apply(shipped, spec)
    assert rope is not None and rope["rope_type"] == "yarn" and rope["factor"] == 4.0
    assert rope["original_max_position_embeddings"] == 32768 and rope["rope_theta"] == spec.rope_theta
    shipped.rope_parameters = rope
    shipped.max_position_embeddings = spec.max_position_tokens
    _, attention_scaling = ROPE_INIT_FUNCTIONS["yarn"](shipped, "cpu")
    assert attention_scaling == pytest.approx(1 + 0.1 * math.log(4))  # YaRN's mscale at factor 4


def test_configs_with_their_own_scaling_or_none_are_left_alone() -> None:
    llama = get_model("llama-3.1-8b")
    assert rope_scaling_to_apply(random_config(llama), llama) is None  # llama3 scaling already there
    small = get_model("smollm2-135m")
    assert rope_scaling_to_apply(random_config(small), small) is None  # nothing to apply
