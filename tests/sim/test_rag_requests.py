"""`--rag k=...,doc_tokens=...,hit_rate=...`: parsing, the prompt it makes, the knobs multi-context methods
get, and the one-paragraph errors of `dse capacity` / `dse serve`."""

from __future__ import annotations

import pytest

from dse.cli import main
from sim.errors import SimInputError
from sim.replay.rag import RagRequest, parse_rag


def test_parse_rag_and_its_prompt() -> None:
    request = parse_rag("k=4,doc_tokens=2048,hit_rate=0.8")
    assert request == RagRequest(4, 2048, 0.8, 64) and request.input_tokens == 4 * 2048 + 64
    assert parse_rag("hit_rate=1, k=2, doc_tokens=10, query_tokens=5").input_tokens == 25


def test_only_multi_context_methods_get_documents_and_hit_rate() -> None:
    request = parse_rag("k=3,doc_tokens=100,hit_rate=0.5")
    assert request.options_for("samkv", {}) == {"documents": 3, "hit_rate": 0.5}
    assert request.options_for("cacheblend", {"hit_rate": 1.0}) == {"documents": 3, "hit_rate": 1.0}
    assert request.options_for("dense", {}) == {}


@pytest.mark.parametrize("text, why", [
    ("k=4,doc_tokens=2048", "hit_rate missing"),
    ("k=0,doc_tokens=2048,hit_rate=0.5", "must be at least 1"),
    ("k=4,doc_tokens=2048,hit_rate=1.5", "hit_rate must be in"),
    ("k=4,docs=2048,hit_rate=0.5", "'docs=2048' is not one of"),
    ("k=4,doc_tokens=x,hit_rate=0.5", "not a number"),
])
def test_bad_rag_values_are_refused_with_what_is_valid(text: str, why: str) -> None:
    with pytest.raises(SimInputError, match=why) as err:
        parse_rag(text)
    assert "e.g. --rag k=4,doc_tokens=2048,hit_rate=0.8" in str(err.value)


def test_capacity_refuses_a_bad_rag_and_rag_with_input_tokens(capsys: pytest.CaptureFixture) -> None:
    base = ["capacity", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--method", "samkv",
            "--output-tokens", "64", "--slo-ms", "40"]
    assert main([*base, "--rag", "k=4,hit_rate=0.8"]) == 2
    assert "doc_tokens missing" in capsys.readouterr().err
    assert main([*base, "--rag", "k=4,doc_tokens=8,hit_rate=0.8", "--input-tokens", "100"]) == 2
    assert "not both" in capsys.readouterr().err
    assert main(base) == 2
    assert "give --input-tokens N" in capsys.readouterr().err
