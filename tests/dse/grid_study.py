"""The smallest real study the sweep tests run: three tau values on a grid, 128-token passkey."""

from __future__ import annotations


def tiny_grid_study(name: str, taus: tuple[float, ...] = (0.8, 0.85, 0.9)) -> str:
    """Study YAML named `name`: one configuration per tau (default 0.8 / 0.85 / 0.9), each drawn once by
    the grid."""
    return f"""\
name: {name}
model: {{name: smollm2-135m}}
tasks:
  - {{name: passkey, context_tokens: 128, samples: 1}}
search:
  tau: {list(taus)}
  page_size: [16]
  budget_tokens: [96]
  sink_tokens: [32]
  window_tokens: [32]
objectives:
  - metric: passkey_accuracy
  - latency: {{hardware: a100-40g-pcie4}}
workload: {{input_tokens: 4096, output_tokens: 32}}
hardware: [a100-40g-pcie4]
trials: {len(taus)}
sampler: {{name: grid, seed: 0}}
baselines: {{dense: false, untuned_freekv: null}}
device: cpu
"""
