"""DistServe's measured serving runs parse as the client wrote them, and a fast subset of their replay runs:
one run on the held-out engine, numbers finite and consistent with the requests replayed."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.serving_measured import CONFIGS, SLOS, load_runs
from benchmarks.validate_serving_measured import (
    ENGINES,
    FITTED_ENGINES,
    evaluate,
    find_intersection,
    goodput,
    main,
    replay,
    step_costs,
    summary,
)
from sim.serving.engine import load_engine


@pytest.fixture(scope="module")
def runs():
    return load_runs()


def test_every_kept_run_is_there_with_its_requests(runs) -> None:
    keys = {r.key for r in runs}
    vllm = {f"vllm-{n}-{rate}" for n, rate in
            [(100, 1), (150, 1.5), (100, 2), (200, 2), (250, 2.5), (300, 3), (350, 3.5), (400, 4)]}
    assert vllm <= keys and sum(k.startswith("distserve-c21d11-") for k in keys) == 13
    for r in runs:
        assert r.config in CONFIGS and len(r.prompt_len) == r.n
        assert r.issue_time_s[0] == 0 and np.all(np.diff(r.issue_time_s) >= 0)
        # the client scales its arrival pattern so the N-th request is issued at N / rate
        assert abs(r.issue_time_s[-1] - r.n / r.rate) < 0.05, r.key
        assert np.all(r.prompt_len + r.output_len < 2048)  # OPT-13B's positions
        assert np.all(r.ttft_ms > 0) and np.all(r.tpot_ms[r.output_len == 1] == 0)
        assert np.all(r.tpot_ms[r.output_len > 1] > 0)
    # every run of one invocation takes the first N requests of the same shuffled set
    by_n = {r.n: r for r in runs if r.config == "tp1" and r.on_curve}
    first = by_n[100]
    for r in by_n.values():
        assert sorted(zip(r.prompt_len[:20], r.output_len[:20], strict=True)) == sorted(
            zip(first.prompt_len[:20], first.output_len[:20], strict=True))


def test_find_intersection_is_distserves() -> None:
    # the first segment crossing the target, linearly interpolated
    assert find_intersection([1, 2, 3], [95, 85, 40], 90) == (1.5, True)
    assert find_intersection([1, 2, 3, 4], [80, 95, 85, 40], 90)[0] == pytest.approx(1 + 10 / 15)
    # never crossed: the first rate, flagged
    assert find_intersection([1, 2, 3], [86, 70, 10], 90) == (1, False)


def test_goodput_ratio_and_its_bound() -> None:
    xs = [1.0, 2.0, 3.0]
    g = goodput(xs, [80, 60, 20], xs, [90, 80, 40], 50)
    assert g["measured"] == pytest.approx(2.25) and g["ours"] == pytest.approx(2 + 30 / 40)
    assert g["ratio"] == pytest.approx(2.75 / 2.25) and not g["ours_beyond_measured"]
    # ours crosses only on its extension past the measured rates
    g = goodput(xs, [80, 60, 20], [*xs, 4.0], [90, 80, 70, 30], 50)
    assert g["ours"] == pytest.approx(3.5) and g["ours_beyond_measured"]
    # ours never crosses: the ratio is bounded below by the last rate tried
    g = goodput(xs, [80, 60, 20], xs, [90, 80, 70], 50)
    assert g["ratio"] is None and g["ratio_above"] == pytest.approx(3.0 / 2.25)
    # the measured curve never crosses: no ratio at all
    g = goodput(xs, [86, 70, 60], xs, [95, 92, 80], 90)
    assert g["measured"] is None and g["ratio"] is None and g["ratio_above"] is None


def test_slos_are_the_authors() -> None:
    align, chatbot = SLOS
    at = np.array([200.0, 199.0, 250.0]), np.array([50.0, 100.0, 100.0])
    assert list(align.within(*at)) == [False, False, False]  # strictly below 200 and 100
    assert list(chatbot.within(*at)) == [True, True, True]  # at most 250 and 100
    assert not chatbot.within(np.array([np.nan]), np.array([1.0]))[0]  # never served


def test_one_run_replays_with_its_own_requests(runs) -> None:
    run = next(r for r in runs if r.key == "vllm-100-1")
    costs = step_costs("tp1", [run], "sarathi-serve-a100", "ideal")
    ours = replay(run, costs)
    assert np.all(np.isfinite(ours["ttft_ms"])) and np.all(np.isfinite(ours["tpot_ms"]))
    # no request's first token comes before its own prompt's prefill
    # (a prefill-only iteration of that prompt alone, as prefill-first prices it)
    alone_ms = np.array([costs.iteration_s(0, 0.0, [(int(p), 0, int(p))]) * 1e3 for p in run.prompt_len])
    assert np.all(ours["ttft_ms"] >= alone_ms * (1 - 1e-9))
    # a request waits only for what ran before it: the first request meets an idle GPU
    assert ours["ttft_ms"][0] == pytest.approx(alone_ms[0])
    assert ours["max_iteration_tokens"] <= CONFIGS["tp1"].settings["max_batched_tokens"]
    stats = summary(ours["ttft_ms"], ours["tpot_ms"])
    assert stats["ttft_p50_ms"] <= stats["ttft_p90_ms"]
    assert all(0 <= stats[f"attainment_{s.name}"] <= 1 for s in SLOS)


def test_evaluate_marks_what_it_cannot_replay(runs) -> None:
    """Each engine is replayed on the runs of the server it models: DistServe's engine profile not on vLLM's
    runs, vLLM's profile not on DistServe's."""
    subset = [r for r in runs if r.key in ("vllm-100-1", "vllm-150-1.5", "distserve-c21d11-300-3")]
    res = evaluate(subset, "distserve-opt13b-a100", "ideal")
    assert res["runs"]["vllm-100-1"]["status"].startswith("DistServe's own engine profile")
    tp1 = res["configs"]["tp1"]
    assert tp1["measured_only"] and "ours_attainment_pct" not in tp1["align"]
    assert res["runs"]["distserve-c21d11-300-3"]["status"] == "ok"
    c21 = [r for r in subset if r.config == "c21d11"]
    res = evaluate(c21, "distserve-vllm-opt13b-a100", "ideal")
    assert res["runs"]["distserve-c21d11-300-3"]["status"].startswith("vLLM's engine profile")


def test_c21d11_replays_on_a_tp2_prefill_and_a_tp1_decode_replica(runs) -> None:
    """DistServe's c21d11 run at 3 req/s: one prefill replica at tensor parallel 2 (one GPU's shard plus the
    all-reduces), one decode replica at TP 1, the first token when the prefill ends (before the KV moves),
    context batches within DistServe's 8192 tokens; labelled held out on `none`, not held out on DistServe's
    own profiles."""
    from benchmarks.serving_measured import KV_LINK_GBPS
    from benchmarks.validate_serving_measured import pool_engines

    run = next(r for r in runs if r.key == "distserve-c21d11-300-3")
    assert CONFIGS["c21d11"].settings["first_token"] == "prefill" and KV_LINK_GBPS == 300.0
    prefill_engine, decode_engine = pool_engines("c21d11", "none")
    prefill = step_costs("c21d11", [run], prefill_engine, "ideal", 2)
    decode = step_costs("c21d11", [run], decode_engine, "ideal")
    assert prefill.tp.degree == 2 and decode.tp.degree == 1
    assert prefill.prefill_s(1024) < decode.prefill_s(1024)  # half the model's work per GPU, plus collectives
    ours = replay(run, decode, prefill)
    assert np.all(np.isfinite(ours["ttft_ms"])) and np.all(np.isfinite(ours["tpot_ms"]))
    # the first token comes at the prefill's end: never before the prompt's own TP 2 prefill
    alone_ms = np.array([prefill.prefill_batch_s([int(p)]) * 1e3 for p in run.prompt_len])
    assert np.all(ours["ttft_ms"] >= alone_ms * (1 - 1e-9))
    assert ours["ttft_ms"][0] == pytest.approx(alone_ms[0])  # the first request meets idle GPUs
    assert ours["max_iteration_tokens"] <= 8192
    assert np.all(ours["tpot_ms"][run.output_len == 1] == 0)
    res = evaluate([run], "distserve-opt13b-a100", "ideal")
    c = res["configs"]["c21d11"]
    assert "distserve-opt13b-a100-tp2 (TP 2)" in c["engines"] and c["held_out"].startswith("NOT held out")
    assert c["rates"] == [3.0] and len(c["extended_rates"]) > 0
    fitted = [e for e in ENGINES if load_engine(e).name in FITTED_ENGINES]
    pre, dec = pool_engines("c21d11", fitted[0])
    assert dec.tensor_parallel == 1 and pre.tensor_parallel == 2  # the fit prices the TP 1 decode replica
    assert pre.request_overhead_ms == dec.request_overhead_ms > 0  # requests arrive at the prefill replica


def test_fitted_engines_mark_their_train_run_and_the_held_out_ones(runs) -> None:
    """The engines fitted on vllm-100-1 alone: that run is the train run, the others held out, and the
    attainment RMSE is also given over the held-out runs alone."""
    from benchmarks.validate_serving_measured import TRAIN_RUN

    fitted = [e for e in ENGINES if load_engine(e).name in FITTED_ENGINES]
    assert len(fitted) == 2 and TRAIN_RUN == "vllm-100-1"
    for path in fitted:
        engine = load_engine(path)
        assert engine.request_overhead_ms > 0 and engine.terms[-1].name == "server"
        assert "run config=tp1,rate=1,n=100, 100 requests" in engine.request_overhead_source
    subset = [r for r in runs if r.key in ("vllm-100-1", "vllm-150-1.5", "vllm-250-2.5")]
    res = evaluate(subset, fitted[0], "ideal")
    assert "fitted on vllm-100-1 (train); other runs held out" in res["held_out"]
    assert res["runs"]["vllm-100-1"]["train"] and not res["runs"]["vllm-150-1.5"]["train"]
    curve = res["configs"]["tp1"]
    assert curve["train_rates"] == [1.0]
    assert np.isfinite(curve["align"]["rmse_pp_held_out"])
    on_sarathi = evaluate(subset, "sarathi-serve-a100", "ideal")
    assert not on_sarathi["runs"]["vllm-100-1"]["train"]
    assert on_sarathi["configs"]["tp1"]["train_rates"] == []


def test_the_script_prints_and_refuses_bad_input(capsys) -> None:
    assert main(["--runs", "vllm-100-1", "--engines", "distserve-vllm-opt13b-a100"]) == 0
    out = capsys.readouterr().out
    assert "vllm-100-1" in out and "NOT held out" in out
    assert main(["--runs", "vllm-9-9"]) == 2
    assert main(["--attainment", "120"]) == 2
    assert main(["--engines", "no-such-engine"]) == 2
    err = capsys.readouterr().err
    assert "--runs" in err and "--attainment" in err and "--engines" in err


def test_the_extraction_keeps_the_runs_and_refuses_other_files(tmp_path, capsys) -> None:
    from scripts.extract_distserve_measured import main as extract

    reqs = [{"prompt_len": 10, "output_len": 2, "issue_time": 105.5, "first_token_time": 105.6,
             "complete_time": 105.7, "ttft_ms": 100.0, "tpot_ms": 100.0, "latency_ms": 200.0},
            {"prompt_len": 20, "output_len": 1, "issue_time": 105.0, "first_token_time": 105.1,
             "complete_time": 105.1, "ttft_ms": 100.0, "tpot_ms": 0.0, "latency_ms": 100.0}]
    (tmp_path / "vllm-2-1.exp").write_text(str(reqs) + "\n{ summary }\n")
    (tmp_path / "distserve-c21d12-2-1.exp").write_text(str(reqs) + "\n")  # not kept
    out = tmp_path / "out"
    out.mkdir()
    assert extract([str(tmp_path), "--out-dir", str(out)]) == 0
    assert [p.name for p in out.iterdir()] == ["distserve_opt13b_sharegpt_measured_vllm.csv"]
    runs = load_runs((out / "distserve_opt13b_sharegpt_measured_vllm.csv",))
    assert len(runs) == 1 and runs[0].key == "vllm-2-1"
    assert list(runs[0].prompt_len) == [20, 10] and list(runs[0].issue_time_s) == [0.0, 0.5]
    (tmp_path / "vllm-3-1.exp").write_text("not a list\n")
    assert extract([str(tmp_path), "--out-dir", str(out)]) == 2
    assert extract([str(tmp_path / "missing")]) == 2
    assert "EXP_DIR" in capsys.readouterr().err
