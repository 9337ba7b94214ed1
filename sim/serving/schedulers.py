"""The replica schedulers of the request-level model: their names, their settings and the cost model each
answer cites.

- `blocking`: as the research runtimes run. Admitted requests are prefilled one after another, alone on
  the GPU, between two decode steps of the running batch, which waits. The research code prefills a
  prompt in one forward pass and then decodes, with no chunked prefill: bytedance/ShadowKV
  models/base.py:196-218 (`prefill`, then the decode loop), mit-han-lab/Quest
  evaluation/passkey/passkey.py:71-85 (one forward over the prompt, then token by token), rooikeee/FreeKV
  source/freekv/infer_state.py:502-626 (`_prepare_prefill` / `_finish_prefill` around one pass of the
  prompt's q_len tokens), like HF transformers' `generate`. The prefill emits the first token.
- `prefill-first`: vLLM before chunked prefill (v0.2-v0.3; the baseline of Sarathi-Serve and DistServe):
  waiting prompts that fit are prefilled together in one prefill-only iteration (up to
  `max_batched_tokens` prompt tokens and `max_seqs` sequences) while the running batch waits; otherwise
  a decode iteration (sim/serving/prefill_first.py, with its sources).
- `chunked`: Sarathi-Serve's stall-free batching, vLLM's default. Every iteration has a token budget
  (`chunk_tokens`, default 512: Sarathi-Serve's and Vidur's chunk size, microsoft/vidur
  vidur/config/config.py:321-324; vLLM's own `max_num_batched_tokens` default is 2048, or 8192 for its
  API server on GPUs of 70 GiB or more, vllm/engine/arg_utils.py EngineArgs.get_batch_defaults): one
  decode token of every running sequence first, then prefill chunks of the admitted prompts in arrival
  order fill the rest (microsoft/vidur vidur/scheduler/replica_scheduler/sarathi_replica_scheduler.py:
  74-84, 156-181). An iteration is priced as one mixed batch (sim/serving/step_costs.py
  `iteration_s`: token-parallel ops over decode and chunk tokens together, chunk attention over the
  prefix, the decode step's own attention; Sarathi-Serve, arXiv 2403.02310). A prompt's last chunk emits
  its first token.
- `disaggregated`: DistServe (arXiv 2401.09670), Splitwise (arXiv 2311.18677), Mooncake (arXiv
  2407.00079). Each prefill GPU batches its waiting prompts first come first served, up to
  `max_batched_tokens` prompt tokens per iteration (None: one prompt per iteration: a long prompt
  saturates the GPU alone, DistServe section 3.1; a prompt over the cap runs alone), as DistServe's
  context stage does (sim/serving/disaggregated.py, with its sources); then each prompt's KV state (the
  method's per-sequence bytes after prefill) moves to a decode GPU over a link of `kv_link_gbps`
  (default 50 GB/s: one 400 Gb/s NDR InfiniBand NIC per GPU, as in a DGX H100 and as Splitwise assumes
  for H100 machines) once that decode GPU has memory for the sequence; the whole KV moves after the
  prefill (Splitwise and Mooncake overlap it layer by layer: this is the conservative end). A finished
  prefill parks its KV on the prefill GPU until then, as many as its memory holds beside the next
  prompt. The first token reaches the user with the handoff (TTFT = queueing + prefill + decode wait +
  transfer), or, with `first_token="prefill"`, when the prefill ends, as DistServe's context stage
  streams it before the KV migrates (LLMServe/DistServe distserve/single_stage_engine.py:374-403 at
  82831f1: the step output goes to the client at `ContextEnd`, then the request joins the bridge queue to
  the decoding stage; a request of one output token finishes there); the decode wait and the transfer
  then fall in the gap to the second token. The decode pool batches continuously, decode only.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.errors import SimInputError

__all__ = [
    "SCHEDULERS",
    "SchedulerSettings",
    "scheduler_model",
    "check_scheduler",
    "DEFAULT_CHUNK_TOKENS",
    "DEFAULT_KV_LINK_GBPS",
    "FIRST_TOKEN_AT",
]

DEFAULT_CHUNK_TOKENS = 512
DEFAULT_KV_LINK_GBPS = 50.0
FIRST_TOKEN_AT = ("handoff", "prefill")  # disaggregated: when the first token reaches the user

SCHEDULERS: dict[str, str] = {
    "blocking": "prefill blocks decode: each prompt prefilled alone between decode steps, as the FreeKV, "
    "Quest and ShadowKV code and HF generate run (sim/serving/schedulers.py)",
    "prefill-first": "vLLM before chunked prefill (v0.2-v0.3): waiting prompts that fit prefilled together "
    "in one prefill-only iteration while the running batch waits, else a decode iteration "
    "(sim/serving/prefill_first.py)",
    "chunked": "chunked prefill (Sarathi-Serve, vLLM's default): a token budget per iteration, decode "
    "tokens first, prefill chunks fill the rest; each iteration priced as one mixed batch: token-parallel "
    "ops over all its tokens, chunk attention over the prefix, the decode step's attention "
    "(sim/serving/step_costs.py, after Vidur's execution-time predictor)",
    "disaggregated": "prefill and decode pools (DistServe, Splitwise, Mooncake): waiting prompts batched "
    "first come first served per prefill GPU, the KV moved whole over the link to a decode GPU with room, "
    "continuous batching of decode only there (sim/serving/schedulers.py)",
}


@dataclass(frozen=True)
class SchedulerSettings:
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS
    kv_link_gbps: float = DEFAULT_KV_LINK_GBPS
    max_seqs: int | None = None  # sequences one GPU runs at most (a serving engine's max_num_seqs)
    max_batched_tokens: int | None = None  # prompt tokens of one prefill iteration (prefill-first, disagg.)
    tensor_parallel: int = 1  # GPUs per replica (disaggregated: per decode replica)
    prefill_tensor_parallel: int | None = None  # disaggregated: GPUs per prefill replica (None: the same)
    first_token: str = "handoff"  # disaggregated: the first token reaches the user at the KV handoff or
    # at the prefill's end (FIRST_TOKEN_AT; module docstring)

    def __post_init__(self) -> None:
        if self.first_token not in FIRST_TOKEN_AT:
            raise SimInputError(
                f"first_token must be one of {', '.join(FIRST_TOKEN_AT)} (when a disaggregated request's "
                f"first token reaches the user), got {self.first_token!r}"
            )
        for flag, t in (("--tensor-parallel", self.tensor_parallel),
                        ("--prefill-tensor-parallel", self.prefill_tensor_parallel)):
            if t is not None and t < 1:
                raise SimInputError(f"{flag} must be a positive number of GPUs per replica, got {t}")
        if self.chunk_tokens < 1:
            raise SimInputError(f"--chunk-tokens must be a positive token count, got {self.chunk_tokens}")
        if not self.kv_link_gbps > 0:
            raise SimInputError(f"--kv-link-gbps must be a positive GB/s, got {self.kv_link_gbps}")
        for flag, v in (("--max-seqs", self.max_seqs), ("--max-batched-tokens", self.max_batched_tokens)):
            if v is not None and v < 1:
                raise SimInputError(f"{flag} must be a positive count, got {v}")

    def text(self, scheduler: str) -> str:
        parts = []
        if scheduler == "chunked":
            parts.append(f"{self.chunk_tokens} tokens per iteration")
        if scheduler in ("prefill-first", "disaggregated") and self.max_batched_tokens is not None:
            parts.append(f"at most {self.max_batched_tokens} prompt tokens per prefill iteration")
        if scheduler == "disaggregated":
            parts.append(f"KV link {self.kv_link_gbps:g} GB/s")
            if self.first_token == "prefill":
                parts.append("first token at the prefill's end, before the KV moves")
        if self.max_seqs is not None:
            unit = "GPU" if self.tensor_parallel == 1 else "replica"
            parts.append(f"at most {self.max_seqs} sequences per {unit}")
        pre = self.prefill_tp
        if scheduler == "disaggregated" and (pre > 1 or self.tensor_parallel > 1):
            parts.append(
                f"tensor parallel {pre} per prefill replica, {self.tensor_parallel} per decode replica"
            )
        elif self.tensor_parallel > 1:
            parts.append(f"tensor parallel {self.tensor_parallel} ({self.tensor_parallel} GPUs per replica)")
        return ", ".join(parts)

    @property
    def prefill_tp(self) -> int:
        """GPUs per prefill replica (disaggregated)."""
        return self.tensor_parallel if self.prefill_tensor_parallel is None else self.prefill_tensor_parallel


def check_scheduler(name: str, flag: str = "--scheduler") -> str:
    if name not in SCHEDULERS:
        raise SimInputError(f"{flag}: unknown scheduler {name!r}; valid: {', '.join(SCHEDULERS)}")
    return name


def scheduler_model(name: str, settings: SchedulerSettings) -> str:
    """The one-line cost model an output prints for scheduler `name`."""
    extra = settings.text(name)
    return f"{name}: {SCHEDULERS[check_scheduler(name)]}" + (f"; {extra}" if extra else "")
