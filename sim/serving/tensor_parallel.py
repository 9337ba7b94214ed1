"""Tensor parallelism (Megatron-style, as vLLM, Sarathi-Serve and DistServe run it): one replica of `t` GPUs.

Each GPU holds 1/t of the query heads, ceil(n_kv / t) KV heads (a KV head is replicated when n_kv < t, as
vLLM's QKVParallelLinear does), 1/t of the FFN (gate/up column-parallel, down row-parallel) and of the
vocabulary (vocab-parallel embedding and LM head), and the KV cache of its own KV heads; norms and
residuals are replicated. `shard_spec` is that GPU's model: the step model, the memory model and the
mixed-iteration costs price one shard with it (the cost model takes the head dim explicitly, so the
shapes compose), and the weights and KV a GPU holds are the shard's.

On top of one shard's kernels, each iteration of `n` tokens pays the collectives (`collectives_s`):

    2 * L * (all_reduce(n * hidden_size * dtype_bytes) + NCCL launch)   after the attention output
                                                                        projection and after the MLP's
                                                                        down projection of every layer
    + gather(k * vocab_size * dtype_bytes)                              the LM head's logits of the k
                                                                        sampled tokens, priced as an
                                                                        all-reduce of the gathered bytes

as Vidur prices a tensor-parallel batch: one all-reduce at the batch's total tokens added to the attention
layer and one to the MLP layer (microsoft/vidur@7d47513 vidur/entities/execution_time.py:59-78;
vidur/execution_time_predictor/sklearn_execution_time_predictor.py:811-817, the all-reduce at
`_total_num_tokens_rounded` plus `nccl_cpu_launch_overhead_ms`, 0.02 ms by default,
vidur/config/config.py:547-550). Vidur leaves out the logits gather; a gather to one rank moves about
half an all-reduce's bytes, so pricing it as one is the conservative end. The all-reduce times are
Vidur's NCCL measurements (sim/interconnect_profiles/nccl_all_reduce.yaml: latency + bytes / bandwidth per
interconnect and worker count, fitted to the measured points, each fit's error stated there). A hardware
profile whose interconnect no measurement covers refuses t > 1.

Not modelled: pipeline and sequence parallelism, overlap of the collectives with compute, and host
memory shared by the t GPUs of one machine (each GPU's host state is checked against the profile's host
memory, as at t = 1).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from pathlib import Path

from sim.demand import Demand
from sim.errors import SimInputError
from sim.yaml_io import load_yaml, read_text_file
from traces.model_spec import ModelSpec

__all__ = [
    "AllReduceFit",
    "Interconnect",
    "TensorParallel",
    "shard_spec",
    "shard_demand",
    "interconnects",
    "interconnect_for",
    "NCCL_LAUNCH_S",
    "INTERCONNECT_FILE",
]

INTERCONNECT_FILE = Path(__file__).resolve().parent.parent / "interconnect_profiles" / "nccl_all_reduce.yaml"
NCCL_LAUNCH_S = 0.02e-3  # Vidur's nccl_cpu_launch_overhead_ms default (vidur/config/config.py:547-550)


@dataclass(frozen=True)
class AllReduceFit:
    """One (interconnect, workers) all-reduce: time = latency + bytes / bandwidth, fitted to `points`."""

    latency_s: float
    bandwidth_bytes_per_s: float
    fit_error: tuple[float, float]  # relative error over the points, lowest and highest
    points: tuple[tuple[int, float], ...]  # (bytes, measured median seconds)

    def time_s(self, n_bytes: float) -> float:
        return self.latency_s + n_bytes / self.bandwidth_bytes_per_s


@dataclass(frozen=True)
class Interconnect:
    name: str
    what: str
    hardware: tuple[str, ...]
    source: str
    workers: dict[int, AllReduceFit]


@functools.lru_cache(maxsize=1)
def interconnects() -> dict[str, Interconnect]:
    """The measured interconnects of INTERCONNECT_FILE, by name."""
    raw = load_yaml(read_text_file(INTERCONNECT_FILE, "interconnect profile file"), str(INTERCONNECT_FILE))
    out = {}
    for name, entry in raw["interconnects"].items():
        workers = {
            int(n): AllReduceFit(
                latency_s=float(w["latency_ms"]) / 1e3,
                bandwidth_bytes_per_s=float(w["bandwidth_gbps"]) * 1e9,
                fit_error=(float(w["fit_error"][0]), float(w["fit_error"][1])),
                points=tuple((int(b), float(ms) / 1e3) for b, ms in w["points"]),
            )
            for n, w in entry["workers"].items()
        }
        out[name] = Interconnect(
            name, str(entry["what"]), tuple(entry["hardware"]), str(entry["source"]), workers
        )
    return out


def interconnect_for(hardware: str) -> Interconnect | None:
    """The measured interconnect of hardware profile `hardware` (None: none measured)."""
    return next((ic for ic in interconnects().values() if hardware in ic.hardware), None)


def shard_spec(model: ModelSpec, degree: int, flag: str = "--tensor-parallel") -> ModelSpec:
    """The model one GPU of a `degree`-way tensor-parallel replica holds (module docstring); `model` itself
    at degree 1. SimInputError when `degree` does not split the model's heads as vLLM requires."""
    if degree < 1:
        raise SimInputError(f"{flag} must be a positive number of GPUs per replica, got {degree}")
    if degree == 1:
        return model
    q, kv = model.n_qo_heads, model.n_kv_heads
    if q % degree or (kv % degree if kv >= degree else degree % kv):
        valid = [t for t in range(2, q + 1) if q % t == 0 and (kv % t == 0 if kv >= t else t % kv == 0)]
        raise SimInputError(
            f"{flag} {degree}: {model.name} has {q} query heads and {kv} KV heads; tensor parallelism splits "
            f"the query heads evenly and the KV heads evenly (or replicates each KV head over a whole number "
            f"of GPUs when there are fewer KV heads than GPUs), as vLLM requires. Valid degrees for this "
            f"model: 1, {', '.join(map(str, valid))}"
        )
    return replace(
        model,
        name=f"{model.name}@tp{degree}",
        n_qo_heads=q // degree,
        n_kv_heads=-(-kv // degree),
        ffn_size=-(-model.ffn_size // degree),
        vocab_size=-(-model.vocab_size // degree),
        source=f"one GPU's shard of {model.name} at tensor parallel {degree} ({model.source})",
    )


def shard_demand(demand: Demand | None, shard: ModelSpec) -> Demand | None:
    """`demand` (on the whole model) as the first GPU of the replica sees it: its first `shard.n_kv_heads`
    KV heads (every GPU runs its own heads' selection and recall; the step model prices this one's)."""
    if demand is None:
        return None
    h = shard.n_kv_heads

    def heads(arrays: tuple | None) -> tuple | None:
        return None if arrays is None else tuple(a[:, :, :h] for a in arrays)

    return replace(
        demand,
        model=shard.name,
        corrected=heads(demand.corrected),
        fetch_ratio=heads(demand.fetch_ratio),
        similarity=heads(demand.similarity),
        evict_ratio=heads(demand.evict_ratio),
        refactorised=heads(demand.refactorised),
    )


@dataclass(frozen=True)
class TensorParallel:
    """The collectives of one `degree`-way replica of `model` on `hardware` (module docstring)."""

    degree: int
    model: ModelSpec  # the whole model
    dtype_bytes: int
    interconnect: Interconnect | None
    fit: AllReduceFit | None

    @classmethod
    def of(cls, model: ModelSpec, hardware: str, degree: int, dtype_bytes: int = 2,
           flag: str = "--tensor-parallel", collectives: bool = True) -> TensorParallel:
        """Check `degree` for `model` on `hardware` (SimInputError naming `flag` when it cannot run);
        `collectives` False: the shard only, its collectives priced elsewhere (a whole-step engine profile
        measured at this degree), so no interconnect measurement is needed."""
        shard_spec(model, degree, flag)
        if degree == 1 or not collectives:
            return cls(degree, model, dtype_bytes, None, None)
        ic = interconnect_for(hardware)
        if ic is None:
            measured = ", ".join(f"{h} ({ic.name}: {', '.join(map(str, sorted(ic.workers)))} GPUs)"
                                 for ic in interconnects().values() for h in ic.hardware)
            raise SimInputError(
                f"{flag} {degree}: no all-reduce measurement covers the GPUs of hardware profile "
                f"{hardware!r}, so its collectives cannot be priced; measured: {measured} "
                f"({INTERCONNECT_FILE.name}). Use {flag} 1 or one of those profiles"
            )
        if degree not in ic.workers:
            raise SimInputError(
                f"{flag} {degree}: the {ic.name} interconnect of {hardware!r} was measured with "
                f"{', '.join(map(str, sorted(ic.workers)))} GPUs, not {degree}"
            )
        return cls(degree, model, dtype_bytes, ic, ic.workers[degree])

    @property
    def shard(self) -> ModelSpec:
        return shard_spec(self.model, self.degree)

    def all_reduce_s(self, n_bytes: float) -> float:
        """One all-reduce of `n_bytes` on every GPU of the replica (0 at degree 1)."""
        return 0.0 if self.fit is None or n_bytes <= 0 else self.fit.time_s(n_bytes)

    def collectives_s(self, tokens: int, sampled: int) -> float:
        """The collectives of one iteration of `tokens` tokens of which `sampled` sample a token (module
        docstring); 0.0 at degree 1."""
        if self.fit is None or tokens <= 0:
            return 0.0
        m = self.model
        per_layer = 2 * (self.all_reduce_s(tokens * m.hidden_size * self.dtype_bytes) + NCCL_LAUNCH_S)
        logits = self.all_reduce_s(sampled * m.vocab_size * self.dtype_bytes)
        return m.n_layers * per_layer + logits

    def label(self) -> str:
        if self.degree == 1:
            return "tensor parallel 1 (one GPU per replica)"
        if self.fit is None:
            return (f"tensor parallel {self.degree} ({self.degree} GPUs per replica; Megatron-style shards; "
                    "the collectives are in the engine profile's measured whole steps)")
        fit, ic = self.fit, self.interconnect
        assert fit is not None and ic is not None
        lo, hi = fit.fit_error
        return (
            f"tensor parallel {self.degree} ({self.degree} GPUs per replica; Megatron-style shards; "
            f"all-reduce on {ic.name} {fit.latency_s * 1e6:.0f} us + bytes / "
            f"{fit.bandwidth_bytes_per_s / 1e9:.0f} GB/s, within {lo:+.0%}..{hi:+.0%} of {ic.source})"
        )
