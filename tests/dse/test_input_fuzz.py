"""Fuzzing every user-input parser and loader with hypothesis: each either returns a correct result or
raises its documented input error (a one-paragraph message the CLI prints with exit status 2), within a
deadline. Bounded for the default run (a few dozen examples each).

Covered here: the safe YAML/JSON loader (arbitrary text, alias and nesting shapes), numeric ranges and
flag types, study files, software profiles, --prices, request files (CSV and JSON), synthetic spec
files (JSON), microbenchmark JSON. Hardware profiles and `key=value` synthetic specs are fuzzed in
tests/sim/test_input_properties.py, trace meta.json and records.bin in tests/traces/test_reader_properties.py.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dse.commands.capacity import load_prices
from dse.commands.number_types import number
from dse.errors import DseError
from dse.study import load_study_file
from sim.calibrate_microbench import load_microbench
from sim.errors import SimInputError
from sim.serving import load_requests
from sim.software import load_software
from sim.synthetic import parse_spec
from traces import numbers
from traces.numbers import NumberError, Range, text_to_number
from traces.safe_load import LoadLimitError, load_json_text, load_yaml_text
from traces.user_files import UserFileError

_SCRATCH = tempfile.TemporaryDirectory(prefix="freekv-dse-fuzz-")
FAST = settings(max_examples=20, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
INPUT_ERRORS = (SimInputError, DseError, UserFileError, NumberError)
ROOT = Path(__file__).resolve().parents[2]

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(["nan", ".inf", "1e9", "-1", "true", "1.5"]),
)
KEYS = st.one_of(
    st.text(max_size=6),
    st.sampled_from(
        [
            "name",
            "value",
            "source",
            "arrival_s",
            "input_tokens",
            "output_tokens",
            "price_per_hour_usd",
            "schema",
            "software",
            "hardware",
            "tables",
            "correction",
            "hit",
            "steps",
            "seqs",
            "trials",
            "seed",
        ]
    ),
)
DATA = st.recursive(
    SCALARS, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(KEYS, kids, max_size=4), max_leaves=12
)
_counter = iter(range(10**9))


def _file(content: str | bytes, suffix: str) -> Path:
    path = Path(_SCRATCH.name) / f"f{next(_counter)}{suffix}"
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8", "surrogatepass"))
    return path


def _yaml(data: Any) -> str:
    return yaml.safe_dump(data, allow_unicode=True)


def _json(data: Any) -> str:
    return json.dumps(data, allow_nan=True)


# -- the loader itself ------------------------------------------------------------------------------


@FAST
@given(st.text(alphabet=st.sampled_from(list("[]{}:,-&*ab1 \n'\"!?|>#")), max_size=200))
def test_yaml_text_of_any_shape_parses_or_is_refused(text: str) -> None:
    try:
        load_yaml_text(text, "fuzz.yaml")
    except (yaml.YAMLError, LoadLimitError):
        pass


@FAST
@given(st.integers(1, 12), st.integers(1, 12))
def test_alias_fans_are_bounded(levels: int, fan: int) -> None:
    text = "a0: &a0 [x]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * fan)}]\n" for i in range(1, levels + 1)
    )
    expanded = sum(fan**i for i in range(levels + 1)) * 2  # rough count of values once aliases are copied
    try:
        data = load_yaml_text(text, "fan.yaml")
    except LoadLimitError as exc:
        assert "fan.yaml" in str(exc) and "100,000 values" in str(exc)
        assert expanded > 10_000
    else:
        assert len(data) == levels + 1


@FAST
@given(st.integers(1, 3000), st.sampled_from(["[", '{"a": ']))
def test_json_nesting_parses_or_names_the_limit(depth: int, opener: str) -> None:
    text = "[" * depth + "]" * depth if opener == "[" else opener * depth + "1" + "}" * depth
    try:
        load_json_text(text, "deep.json")
    except LoadLimitError as exc:
        assert depth > 100 and "deeper than 100 levels" in str(exc)
    except json.JSONDecodeError:
        assert opener != "["


# -- numbers ------------------------------------------------------------------------------------------


RANGES = [getattr(numbers, n) for n in numbers.__all__ if isinstance(getattr(numbers, n), Range)]


@FAST
@given(st.sampled_from(RANGES), SCALARS)
def test_a_range_accepts_exactly_finite_typed_values_inside_it(bound: Range, value: Any) -> None:
    detail = bound.problem(value)
    ok = (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (not bound.integer or float(value).is_integer())
        and (bound.lo < value if bound.lo_open else bound.lo <= value)
        and (value < bound.hi if bound.hi_open else value <= bound.hi)
    )
    assert (detail is None) == ok, (bound, value, detail)


@FAST
@given(
    st.sampled_from(RANGES),
    st.one_of(
        st.text(max_size=12),
        st.sampled_from(["nan", "inf", "-1", "4294967296", "1e9", "1.5", "true", "0", "0x10", "1_000"]),
    ),
)
def test_a_flag_value_is_a_number_in_range_or_click_refuses_it(bound: Range, text: str) -> None:
    try:
        value = number(bound).convert(text, None, None)
    except click.BadParameter as exc:
        assert "must be" in str(exc)
    else:
        assert bound.problem(value) is None
        assert value == text_to_number(text, integer=bound.integer)


# -- files --------------------------------------------------------------------------------------------


@FAST
@given(DATA)
def test_a_study_file_of_any_data_loads_or_is_refused(data: Any) -> None:
    try:
        load_study_file(_file(_yaml(data), ".yaml"))
    except DseError as exc:
        assert "f" in str(exc)


@FAST
@given(
    st.sampled_from(
        [
            "trials",
            "seed",
            "workload.input_tokens",
            "workload.batch_sizes",
            "sampler.seed",
            "tasks.0.samples",
            "tasks.0.context_tokens",
        ]
    ),
    SCALARS,
)
def test_a_study_number_replaced_by_anything_loads_in_range_or_is_refused(key: str, value: Any) -> None:
    from grid_study import tiny_grid_study

    try:
        study, _ = load_study_file(_file(tiny_grid_study("fuzz"), ".yaml"), [f"{key}={json.dumps(value)}"])
    except DseError:
        return
    assert 1 <= study.trials <= numbers.TRIALS.hi and 0 <= study.seed < 2**32
    assert all(1 <= b <= numbers.BATCH.hi for b in study.workload.batch_sizes)
    assert 1 <= study.workload.input_tokens <= numbers.TOKENS.hi


SOFTWARE = yaml.safe_load((ROOT / "sim" / "software_profiles" / "pytorch2-cuda12.yaml").read_text())


@FAST
@given(st.sampled_from([k for k in SOFTWARE if k not in ("kind", "description")]), DATA)
def test_a_software_profile_with_one_value_replaced_loads_or_is_refused(key: str, value: Any) -> None:
    data = dict(SOFTWARE)
    if isinstance(data[key], dict) and key != "name":
        data[key] = {**data[key], "value": value}
    else:
        data[key] = value
    try:
        profile = load_software(_file(_yaml(data), ".yaml"))
    except INPUT_ERRORS:
        return
    assert all(math.isfinite(v) and v >= 0 for k, v in vars(profile).items() if k.endswith("_s"))


@FAST
@given(DATA)
def test_prices_of_any_data_load_as_positive_finite_prices_or_are_refused(data: Any) -> None:
    try:
        prices = load_prices(_file(_yaml(data), ".yaml"))
    except INPUT_ERRORS:
        return
    assert all(0 < p["price_per_hour_usd"] < 1e9 and p["source"].strip() for p in prices.values())


REQUEST = st.fixed_dictionaries({"arrival_s": SCALARS, "input_tokens": SCALARS, "output_tokens": SCALARS})


@FAST
@given(st.lists(st.one_of(REQUEST, DATA), max_size=5), st.booleans())
def test_requests_load_as_finite_integral_requests_or_are_refused(rows: list[Any], as_json: bool) -> None:
    if as_json:
        path = _file(_json(rows), ".json")
    else:
        lines = ["arrival_s,input_tokens,output_tokens"] + [
            ",".join(str(r.get(k, "")) for k in ("arrival_s", "input_tokens", "output_tokens"))
            for r in rows
            if isinstance(r, dict)
        ]
        path = _file("\n".join(lines) + "\n", ".csv")
    try:
        requests = load_requests(path)
    except INPUT_ERRORS:
        return
    for r in requests:
        assert math.isfinite(r.arrival_s) and r.arrival_s >= 0
        assert isinstance(r.input_tokens, int) and 1 <= r.input_tokens <= numbers.TOKENS.hi
        assert isinstance(r.output_tokens, int) and 1 <= r.output_tokens <= numbers.TOKENS.hi


@FAST
@given(
    st.dictionaries(
        st.sampled_from(
            ["correction", "hit", "steps", "seqs", "pages", "step_rho", "layer_sd", "head_sd", "step_sd"]
        ),
        SCALARS,
        max_size=6,
    )
)
def test_a_synthetic_json_spec_parses_in_range_or_is_refused(data: dict) -> None:
    try:
        spec = parse_spec(str(_file(_json(data), ".json")))
    except INPUT_ERRORS:
        return
    assert 1 <= spec["steps"] <= numbers.SYNTHETIC_STEPS.hi and 1 <= spec["seqs"] <= numbers.SYNTHETIC_SEQS.hi


@FAST
@given(DATA, st.sampled_from(["software", "hardware", "tables", "machine", None]))
def test_a_microbenchmark_file_loads_or_is_refused(data: Any, section: str | None) -> None:
    doc: Any = {"schema": "freekv-dse-microbench/1", section: data} if section else data
    try:
        load_microbench(_file(_json(doc), ".json"))
    except INPUT_ERRORS:
        pass


@pytest.mark.parametrize(
    "content", [b"\xef\xbb\xbfa: 1\n", "a: caf\xe9\n".encode("latin-1"), b"\xff\xfea\x00"]
)
def test_encodings_a_bom_is_read_others_are_named(content: bytes) -> None:
    from sim.yaml_io import FileReadError, read_text_file

    path = _file(content, ".yaml")
    if content.startswith(b"\xef\xbb\xbf"):
        assert load_yaml_text(read_text_file(path, "f")) == {"a": 1}
    else:
        with pytest.raises(FileReadError, match=str(path)):
            read_text_file(path, "f")
