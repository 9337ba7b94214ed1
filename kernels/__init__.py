"""Kernels of KV-cache retrieval: Triton kernels, each with a plain-torch reference of the same signature.

Every operation `<op>` dispatches to `<op>_triton` when its tensors are on CUDA (or when
FREEKV_FORCE_TRITON=1, used with TRITON_INTERPRET=1 to run the Triton kernels on a CPU) and to
`<op>_reference` otherwise; on the CPU, top-k selection and (for float32) the query similarity run
compiled loops instead (`topk_pages_cpu`, `query_similarity_cpu`, `kernels.cpu`; tested against the
references). `recall_runs_cpu` is the CPU recall's
fused gather + HND->NHD copy (a compiled loop), equal to `recall_hnd_to_nhd_reference` of the gathered
runs.
Shapes: b batch, Hq query heads, Hkv KV heads, G = Hq / Hkv, d head dim, p page size, P pages per
sequence. Layouts: GPU cache "NHD" (n_slots, p, Hkv, d); host runs "HND".
Bad arguments raise `KernelInputError` naming the argument. GPU status: every Triton kernel is tested in
Triton's interpreter on the CPU and compiled for sm_80 / sm_90 ahead of time; none has run on a GPU yet.
"""

from kernels.errors import KernelInputError
from kernels.offload import offload_nhd_to_hnd, offload_nhd_to_hnd_reference
from kernels.page_scores import (
    POOLINGS,
    page_scores,
    page_scores_reference,
    page_scores_triton,
    query_page_scores,
    query_page_scores_reference,
    query_page_scores_triton,
)
from kernels.query_similarity import (
    query_similarity,
    query_similarity_cpu,
    query_similarity_reference,
    query_similarity_triton,
)
from kernels.recall import (
    recall_hnd_to_nhd,
    recall_hnd_to_nhd_reference,
    recall_hnd_to_nhd_triton,
    recall_runs_cpu,
)
from kernels.sparse_decode_attention import (
    sparse_decode_attention,
    sparse_decode_attention_reference,
    sparse_decode_attention_triton,
)
from kernels.summarize_pages import summarize_pages, summarize_pages_reference, summarize_pages_triton
from kernels.topk_pages import (
    MAX_TRITON_PAGES,
    topk_pages,
    topk_pages_cpu,
    topk_pages_reference,
    topk_pages_triton,
)

__all__ = [
    "KernelInputError",
    "POOLINGS",
    "MAX_TRITON_PAGES",
    "page_scores",
    "page_scores_reference",
    "page_scores_triton",
    "query_page_scores",
    "query_page_scores_reference",
    "query_page_scores_triton",
    "topk_pages",
    "topk_pages_cpu",
    "topk_pages_reference",
    "topk_pages_triton",
    "sparse_decode_attention",
    "sparse_decode_attention_reference",
    "sparse_decode_attention_triton",
    "query_similarity",
    "query_similarity_cpu",
    "query_similarity_reference",
    "query_similarity_triton",
    "summarize_pages",
    "summarize_pages_reference",
    "summarize_pages_triton",
    "recall_hnd_to_nhd",
    "recall_hnd_to_nhd_reference",
    "recall_hnd_to_nhd_triton",
    "recall_runs_cpu",
    "offload_nhd_to_hnd",
    "offload_nhd_to_hnd_reference",
]
