"""The shared KEY=VALUE splitter and the two parsers built on it (--rag, a synthetic spec): the same
results and error texts as each had alone."""

from __future__ import annotations

import pytest

from sim.errors import SimInputError
from sim.key_values import split_key_values
from sim.replay.rag import parse_rag
from sim.synthetic import parse_spec


def _split(text: str, **kw: object) -> dict:
    return split_key_values(text, lambda part: ValueError(f"bad {part}"), lambda key: KeyError(key), **kw)


def test_split_strips_and_skips_empty_parts() -> None:
    assert _split(" a = 1 ,, b=2 ,") == {"a": "1", "b": "2"}
    assert _split("") == {}
    assert _split("a=1,b=x", convert=lambda k, v: v * 2) == {"a": "11", "b": "xx"}


def test_split_errors_in_order() -> None:
    with pytest.raises(ValueError, match="bad b"):
        _split("a=1,b")
    with pytest.raises(ValueError, match="bad c=3"):
        _split("a=1,c=3", known=("a", "b"))
    with pytest.raises(KeyError, match="a"):
        _split("a=1, a =2")
    with pytest.raises(ValueError, match="bad b"):  # a malformed part before a duplicate
        _split("a=1,b,a=2")

    def refuse(key: str, value: str) -> str:
        raise TypeError(key)

    with pytest.raises(TypeError, match="a"):  # the first value converted before the next part is read
        _split("a=1,b", convert=refuse)


def test_rag_errors_unchanged() -> None:
    with pytest.raises(SimInputError, match=r"--rag 'k=4,k=5': k is given twice\. Give comma-separated"):
        parse_rag("k=4,k=5")
    with pytest.raises(SimInputError, match=r"'x=1' is not one of k=\.\.\., doc_tokens=\.\.\., "
                                            r"hit_rate=\.\.\., query_tokens=\.\.\."):
        parse_rag("k=4,x=1")
    assert parse_rag(" k = 2 , doc_tokens=10,hit_rate=1").input_tokens == 84


def test_synthetic_spec_errors_unchanged() -> None:
    with pytest.raises(SimInputError, match=r"^synthetic spec 'hit=0\.8,hit=0\.9': 'hit' is given twice; "
                                            r"give each key once$"):
        parse_spec("hit=0.8,hit=0.9")
    with pytest.raises(SimInputError, match=r"^synthetic spec 'hit': 'hit' is not key=value; e\.g\. "
                                            r"'correction=0\.6,hit=0\.8'$"):
        parse_spec("hit")
    with pytest.raises(SimInputError, match=r"^synthetic spec 'hit=x,correction=0\.5': hit must be "
                                            r"a number$"):
        parse_spec("hit=x,correction=0.5")
    with pytest.raises(SimInputError, match=r"unknown keys \['zz'\]"):
        parse_spec("correction=0.5,hit=0.8,zz=1")
    assert parse_spec(" correction = 0.5 , hit=0.8")["hit"] == 0.8
