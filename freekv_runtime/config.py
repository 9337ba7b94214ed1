"""Runtime configuration of one traced run: the retrieval method and its knobs.

FreeKV's selection design (issue 11): `group_pooling` pools a GQA group's page scores (see
`kernels.page_scores.POOLINGS`: softmax_mean = the official accuracy harness, the default;
softmax_scaled_mean = this project before issue 11; mean = the official runtime; max); `page_summary`
is the page key summary (`kernels.summarize_pages.SUMMARIES`: minmax = Quest / the harness, the
default; box = ArkVale / the official runtime). Other methods ignore them. Left unset (None) they take
the method's own default: `METHOD_SELECTION_DEFAULTS` (Quest: max / minmax, ArkVale: mean / box), else
FreeKV's (softmax_mean / minmax).

Budget convention (used everywhere in this project): `budget_tokens` counts sink and window, as the
official FreeKV runtime does. Selected pages per KV head = (budget_tokens - sink_tokens -
window_tokens) / page_size.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

__all__ = ["RuntimeConfig", "RuntimeConfigError", "GROUP_POOLINGS", "PAGE_SUMMARIES",
           "METHOD_SELECTION_DEFAULTS"]

# the same names as kernels.page_scores.POOLINGS / kernels.summarize_pages.SUMMARIES (config imports no torch)
GROUP_POOLINGS = ("softmax_mean", "softmax_scaled_mean", "mean", "max")
PAGE_SUMMARIES = ("minmax", "box")
# a method's own group_pooling / page_summary where they differ from FreeKV's (see the policy docstrings)
METHOD_SELECTION_DEFAULTS: dict[str, dict[str, str]] = {
    "quest": {"group_pooling": "max", "page_summary": "minmax"},
    "arkvale": {"group_pooling": "mean", "page_summary": "box"},
}


class RuntimeConfigError(ValueError):
    """An invalid runtime configuration; the message names the field and what is valid."""


@dataclass(frozen=True)
class RuntimeConfig:
    method: str = "freekv"  # a name in freekv_runtime.policies.POLICIES
    page_size: int = 32
    budget_tokens: int = 2048
    sink_tokens: int = 512
    window_tokens: int = 512
    tau: float = 0.9
    dense_layers: tuple[int, ...] = (0,)
    group_pooling: str | None = None  # None: the method's default (module docstring); a str afterwards
    page_summary: str | None = None
    measure_attention_mass: bool = False
    extra: dict = field(default_factory=dict)  # method-specific knobs

    def __post_init__(self) -> None:
        own = {"group_pooling": "softmax_mean", "page_summary": "minmax",
               **METHOD_SELECTION_DEFAULTS.get(self.method, {})}
        for name, default in own.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, default)
        p = self.page_size
        if p < 1:
            raise RuntimeConfigError(f"page_size must be a positive integer, got {p}")
        for name in ("sink_tokens", "window_tokens"):
            value = getattr(self, name)
            if value < 0 or value % p:
                raise RuntimeConfigError(
                    f"{name} must be a non-negative multiple of page_size={p}, got {value}"
                )
        if self.window_tokens < p:
            raise RuntimeConfigError(
                f"window_tokens must hold at least one page (>= page_size={p}), got {self.window_tokens}"
            )
        if self.budget_tokens < self.sink_tokens + self.window_tokens + p or self.budget_tokens % p:
            raise RuntimeConfigError(
                f"budget_tokens counts sink and window and must be a multiple of page_size={p} of at least "
                f"sink_tokens + window_tokens + page_size = {self.sink_tokens + self.window_tokens + p}, "
                f"got {self.budget_tokens}"
            )
        if self.group_pooling not in GROUP_POOLINGS:
            raise RuntimeConfigError(
                f"group_pooling must be one of {', '.join(GROUP_POOLINGS)} (how a GQA group's page scores "
                f"are pooled), got {self.group_pooling!r}"
            )
        if self.page_summary not in PAGE_SUMMARIES:
            raise RuntimeConfigError(
                f"page_summary must be one of {', '.join(PAGE_SUMMARIES)} (the per-page key summary), "
                f"got {self.page_summary!r}"
            )
        object.__setattr__(self, "dense_layers", tuple(sorted(set(self.dense_layers))))

    @property
    def selected_pages(self) -> int:
        """Pages chosen by selection per KV head (sink and window excluded)."""
        return (self.budget_tokens - self.sink_tokens - self.window_tokens) // self.page_size

    @property
    def sink_pages(self) -> int:
        return self.sink_tokens // self.page_size

    @property
    def window_pages(self) -> int:
        return self.window_tokens // self.page_size

    def to_dict(self) -> dict:
        d = asdict(self)
        d["dense_layers"] = list(self.dense_layers)
        return d
