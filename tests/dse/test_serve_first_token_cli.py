"""`dse serve --first-token`: when a disaggregated request's first token reaches the user. At the prefill's
end it arrives no later than at the KV handoff (the transfer and the wait for a decode GPU move into
TPOT); the answer names the choice; the default is the handoff; a bad value exits 2."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from dse.cli import cli, main

ARGS = ["serve", "--model", "llama-3.1-8b", "--hardware", "a100-80g-sxm", "--method", "dense",
        "--input-tokens", "4096", "--output-tokens", "64", "--tpot-slo-ms", "50", "--scheduler",
        "disaggregated", "--arrival-rate", "2", "--gpus", "1", "--prefill-gpus", "1", "--n-requests", "40",
        "--kv-link-gbps", "5"]


def _run(tmp_path: Path, *extra: str) -> dict:
    path = tmp_path / f"serve{len(extra)}{'-'.join(extra)}.json"
    result = CliRunner().invoke(cli, [*ARGS, *extra, "--json", str(path)])
    assert result.exit_code == 0, result.output + repr(result.exception)
    return json.loads(path.read_text())


def test_first_token_at_prefill_end_is_earlier_and_named(tmp_path: Path) -> None:
    default, handoff, prefill = (_run(tmp_path), _run(tmp_path, "--first-token", "handoff"),
                                 _run(tmp_path, "--first-token", "prefill"))
    assert default["results"] == handoff["results"]
    at_handoff, at_prefill = handoff["results"][0]["stats"], prefill["results"][0]["stats"]
    # a 4096-token Llama-3.1-8B KV is 0.5 GB: 0.1 s over 5 GB/s, which the handoff's TTFT includes
    assert at_prefill["ttft_p50_s"] < at_handoff["ttft_p50_s"] - 0.05
    assert "first token at the prefill's end" in prefill["schedulers"]["disaggregated"]
    assert "first token at the prefill's end" not in handoff["schedulers"]["disaggregated"]


def test_bad_first_token_exits_2(capsys) -> None:
    assert main([*ARGS, "--first-token", "decode"]) == 2
    assert "--first-token" in capsys.readouterr().err
