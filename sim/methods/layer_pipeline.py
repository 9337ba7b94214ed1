"""The time of a document-cache fetch and a partial recompute run layer by layer, in the two orders the
multi-context methods' codes use.

- "sequential": every layer's KV fetched, then every layer computed: sum(fetch) + sum(compute).
- "layer-pipelined": a stage-synchronous, double-buffered pipeline as LMCache runs CacheBlend
  (LMCache/LMCache lmcache/v1/compute/blend/blender.py:139-142 at b7dc975, `blend_layer`: each step
  advances the layerwise retriever, which moves layer l+1's KV to a GPU buffer on the load stream
  (lmcache/v1/cache_engine.py `retrieve_layer` at 3bafe17), and computes layer l; lmcache/v1/
  gpu_connector.py `VLLMBufferLayerwiseGPUConnector.batched_to_gpu` at e23f2bb ping-pongs two buffers and
  calls torch.cuda.synchronize() once per layer, "wait until both compute and load streams are done").
  Time: the fetch of layer 0 (fill), then per layer l < L-1 a stage of max(compute of l, fetch of l+1),
  then the compute of the last layer (drain).
Never imports torch.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ORDERS", "fetch_compute_s", "layer_pipeline_s"]

ORDERS = ("sequential", "layer-pipelined")


def layer_pipeline_s(fetch_s: np.ndarray, compute_s: np.ndarray) -> float:
    """Seconds of the stage-synchronous pipeline (module docstring) of per-layer fetch and compute (L,)."""
    f = np.asarray(fetch_s, dtype=np.float64)
    c = np.asarray(compute_s, dtype=np.float64)
    if f.shape != c.shape or f.ndim != 1:
        raise ValueError(f"per-layer fetch {f.shape} and compute {c.shape} must be two (L,) arrays")
    if f.size == 0:
        return 0.0
    return float(f[0] + np.maximum(c[:-1], f[1:]).sum() + c[-1])


def fetch_compute_s(order: str, fetch_s: np.ndarray, compute_s: np.ndarray) -> float:
    """Seconds of per-layer fetch and compute (L,) in `order` (one of ORDERS)."""
    if order == "sequential":
        return float(np.sum(fetch_s) + np.sum(compute_s))
    if order == "layer-pipelined":
        return layer_pipeline_s(fetch_s, compute_s)
    raise ValueError(f"fetch order {order!r}: valid orders are {', '.join(ORDERS)}")
