"""Benchmark data from the local disk only: a path the user gives, or their Hugging Face caches.

Never the network. `find_records(task, params, sources)` returns the records (dicts) of a benchmark:
- params["data"]: a file (.json, .jsonl, .csv, .parquet) or a directory searched for the source's file
  names;
- else the HF hub cache (`HF_HUB_CACHE`, `HF_HOME/hub`, `~/.cache/huggingface/hub`):
  `datasets--ORG--NAME/snapshots/*/...`, the files a `huggingface-cli download --repo-type dataset`
  leaves there;
- else the HF datasets cache (`HF_DATASETS_CACHE`, `HF_HOME/datasets`, `~/.cache/huggingface/datasets`):
  `ORG___NAME/**/*.arrow`, what `datasets.load_dataset` leaves there.
Parquet and Arrow files need `pyarrow`; JSON, JSON lines and CSV need nothing. When nothing is found the
error lists every place looked at and how to supply the data.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from freekv_runtime.errors import RuntimeInputError

__all__ = [
    "DataSource",
    "find_records",
    "read_records",
    "hub_roots",
    "datasets_roots",
    "chat_prompt",
    "field",
    "truncate_middle",
    "limit",
]

_EXTENSIONS = (".jsonl", ".json", ".csv", ".parquet", ".arrow")


@dataclass(frozen=True)
class DataSource:
    """An HF dataset repo ("ORG/NAME") and the file names (glob patterns) that hold the split to use."""

    repo: str
    patterns: tuple[str, ...]


def _cache_roots(own_var: str, subdir: str) -> list[Path]:
    """Where the Hugging Face libraries keep `subdir` ("hub" or "datasets"): $own_var, $HF_HOME/subdir,
    ~/.cache/huggingface/subdir, in that order, without repeats."""
    env = os.environ
    roots = [
        env.get(own_var),
        env.get("HF_HOME") and str(Path(env["HF_HOME"]) / subdir),
        str(Path.home() / ".cache" / "huggingface" / subdir),
    ]
    return list(dict.fromkeys(Path(r) for r in roots if r))


def hub_roots() -> list[Path]:
    return _cache_roots("HF_HUB_CACHE", "hub")


def datasets_roots() -> list[Path]:
    return _cache_roots("HF_DATASETS_CACHE", "datasets")


def _pyarrow(path: Path) -> Any:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise RuntimeInputError(
            f"{path} is a {path.suffix} file, which needs the pyarrow package (pip install pyarrow); or give "
            "the same data as a .json / .jsonl / .csv file with --param data=PATH"
        ) from None
    import pyarrow.ipc
    import pyarrow.parquet

    return pyarrow


def read_records(path: Path) -> list[dict[str, Any]]:
    """Records of one file: JSON (a list, or an object holding one list), JSON lines, CSV, Parquet, Arrow."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".jsonl":
            with path.open(encoding="utf-8") as f:
                return [json.loads(line) for line in f if line.strip()]
        if suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(data, dict):
                lists = [v for v in data.values() if isinstance(v, list)]
                data = lists[0] if len(lists) == 1 else [data]
            if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
                raise RuntimeInputError(f"{path}: expected a JSON list of objects (records)")
            return data
        if suffix == ".csv":
            with path.open(encoding="utf-8", newline="") as f:
                return list(csv.DictReader(f))
        if suffix == ".parquet":
            return _pyarrow(path).parquet.read_table(path).to_pylist()
        if suffix == ".arrow":
            pa = _pyarrow(path)
            with pa.memory_map(str(path)) as source:
                try:
                    return pa.ipc.open_stream(source).read_all().to_pylist()
                except pa.ArrowInvalid:
                    return pa.ipc.open_file(source).read_all().to_pylist()
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, csv.Error) as exc:
        raise RuntimeInputError(f"cannot read benchmark data {path}: {exc}") from None
    raise RuntimeInputError(
        f"benchmark data {path}: unsupported file type; use one of {', '.join(_EXTENSIONS)}"
    )


def _match(root: Path, patterns: tuple[str, ...]) -> list[Path]:
    found: list[Path] = []
    for pattern in patterns:
        found += sorted(p for p in root.rglob(pattern) if p.is_file() and p.suffix.lower() in _EXTENSIONS)
    return list(dict.fromkeys(found))


def find_records(task: str, params: dict[str, Any], sources: list[DataSource]) -> tuple[list[dict], Path]:
    """The records of the first data found (see module docstring) and the file they came from."""
    looked: list[str] = []
    given = params.get("data")
    if given is not None:
        path = Path(str(given)).expanduser()
        if path.is_file():
            return read_records(path), path
        if path.is_dir():
            for source in sources:
                files = _match(path, source.patterns)
                if files:
                    return read_records(files[0]), files[0]
            looked.append(f"{path} (a directory without {', '.join(p for s in sources for p in s.patterns)})")
        else:
            looked.append(f"{path} (does not exist)")
    else:
        for source in sources:
            org, name = source.repo.split("/")
            for root in hub_roots():
                snapshots = root / f"datasets--{org}--{name}" / "snapshots"
                looked.append(str(snapshots))
                files = _match(snapshots, source.patterns) if snapshots.is_dir() else []
                if files:
                    return read_records(files[0]), files[0]
            for root in datasets_roots():
                cached = root / f"{org}___{name.lower()}"
                alt = root / f"{org}___{name}"
                for d in dict.fromkeys((cached, alt)):
                    looked.append(str(d))
                    files = _match(d, ("*.arrow",)) if d.is_dir() else []
                    if files:
                        return read_records(files[0]), files[0]
    repos = " or ".join(s.repo for s in sources) or "the benchmark's files"
    raise RuntimeInputError(
        f"no data for task {task!r}: looked in {'; '.join(looked)}. The network is never used: give a local "
        f"file or directory with --param data=PATH (study file: tasks[].params.data), or download "
        f"{repos} once on a machine with network access (`huggingface-cli download --repo-type dataset "
        f"{sources[0].repo if sources else 'ORG/NAME'}`) into the HF cache."
    )


def chat_prompt(tokenizer: Any, text: str, use_chat: bool) -> str:
    """`text` as the user turn of the tokenizer's chat template (generation prompt added) when use_chat
    and the tokenizer has one; else `text` itself."""
    if use_chat and getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
        )
    return text


def field(record: dict[str, Any], *names: str) -> Any:
    """The first of `names` present in the record (case-insensitive), else KeyError naming them."""
    lower = {k.lower(): v for k, v in record.items()}
    for n in names:
        if n.lower() in lower:
            return lower[n.lower()]
    raise KeyError(f"a record has none of the fields {names}; it has {sorted(record)}")


def truncate_middle(ids: list[int], max_tokens: int) -> list[int]:
    """ids cut to max_tokens by dropping the middle (first and last halves kept), as LongBench does."""
    if len(ids) <= max_tokens:
        return list(ids)
    head = max_tokens // 2
    return list(ids[:head]) + list(ids[len(ids) - (max_tokens - head) :])


def limit(records: list[dict[str, Any]], n_samples: int) -> list[dict[str, Any]]:
    """The first n_samples records (the benchmark's own order)."""
    return records[:n_samples]
