"""Every string a study, its trials or its traces carry reaches the report escaped: an HTML payload put
into each field (study name, storage, trial parameters, accuracy metric, model and device names of the
trace metadata, mapped-from model, hardware and software names, notes, errors) never appears raw in the
page, neither as markup nor inside the plotly figures' JSON (where `</script>` would end the script)."""

from __future__ import annotations

import pytest

from dse.report.build import _facts, report_sections
from dse.report.data import make_report_data
from dse.report.page import render_page
from dse.results import BaselineResult, StudyResults, TrialResult

PAYLOADS = ("<script>alert(1)</script>", "<img src=x onerror=alert(2)>", "</script><b>x</b>")


def _sim(latency_s: float, text: str) -> dict:
    return {
        "per_token_latency_s": {"mean": latency_s, "p50": latency_s, "p99": latency_s * 1.2},
        "throughput_tokens_per_s": 1.0 / latency_s,
        "breakdown_s": {"attention": latency_s, f"op {text}": latency_s / 10},
        "memory": {"gpu_bytes": 1, "host_bytes": 1, "fits": True, "max_batch": 4},
        "mapped_from": f"model {text}",
        "model": "llama-3.1-8b",
        "notes": [f"note {text}"],
        "software": f"software {text}",
    }


def _results(text: str) -> StudyResults:
    hardware = f"hw {text}"
    trials = [
        TrialResult(
            target_model="llama-3.1-8b",
            sim={hardware: _sim(0.01 * (i + 1), text)},
            sim_models={},
            sim_grid=[],
            number=i,
            state="COMPLETE",
            config={
                "method": "freekv",
                "tau": 0.8 + i / 100,
                "page_size": 32,
                "budget_tokens": 256,
                "sink_tokens": 32,
                "window_tokens": 32,
                f"param {text}": f"value {text}",
            },
            values=(0.9 - i / 10, 0.01 * (i + 1)),
            accuracy={"passkey_accuracy": 0.9 - i / 10},
            feasible=True,
            trace_summary={"model": f"model {text}", "device": f"device {text}", "note": f"note {text}"},
        )
        for i in range(3)
    ]
    failed = TrialResult(
        target_model="llama-3.1-8b",
        sim={},
        sim_models={},
        sim_grid=[],
        number=3,
        state="FAIL",
        config={"method": "freekv"},
        error=f"error {text}",
    )
    dense = BaselineResult(
        target_model="llama-3.1-8b",
        sim={hardware: _sim(0.05, text)},
        sim_models={},
        sim_grid=[],
        name="dense",
        config={"method": "full"},
        accuracy={"passkey_accuracy": 1.0},
    )
    config = {
        "objectives": [{"metric": "passkey_accuracy"}],
        "hardware": [hardware],
        "model": {"name": "smollm2-135m"},
        "description": f"description {text}",
        "software": f"software {text}",
        "notes": f"notes {text}",
        "workload": {"input_tokens": 1000, "output_tokens": 10, "batch_sizes": [1]},
    }
    return StudyResults(
        study_name=f"study {text}",
        storage_url=f"sqlite:///{text}.db",
        config=config,
        study_file=f"name: {text}\n",
        objective_names=("passkey_accuracy", f"latency_mean_s/{hardware}"),
        directions=("maximize", "minimize"),
        target_model="llama-3.1-8b",
        hardware=(hardware,),
        trials=(*trials, failed),
        dense=dense,
        untuned_freekv=None,
    )


@pytest.mark.parametrize("payload", PAYLOADS)
def test_no_field_reaches_the_report_unescaped(payload: str) -> None:
    data = make_report_data(_results(payload))
    sections = [s for s in report_sections(data) if s is not None]
    html = render_page(f"freekv-dse report: {data.name}", _facts(data), sections)
    assert "study &lt;" in html or "study \\u003c" in html  # the payload did reach the page, escaped
    assert payload not in html
    assert html.count("<script") == html.count("</script>")  # no script opened or closed by a payload
