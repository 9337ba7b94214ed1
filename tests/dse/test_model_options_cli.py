"""`--model-file`, `--max-positions`, `--rope-scaling` and `--gpu-memory-utilization` on dse sim."""

from __future__ import annotations

from pathlib import Path

from dse.cli import main
from traces.models import MODELS, get_model

_SIM = ["sim", "--method", "dense", "--hardware", "a100-80g-sxm", "--output-tokens", "4", "--input-tokens"]


def test_qwen_at_64k_runs_and_the_override_back_to_32k_refuses_it(capsys) -> None:
    assert main([*_SIM, "65536", "--model", "qwen-2.5-7b"]) == 0
    out = capsys.readouterr()
    assert "GPU memory usable: 0.9" in out.out and "(0.9 of 80.0 GiB)" in out.out
    assert main([*_SIM, "65536", "--model", "qwen-2.5-7b", "--rope-scaling", "none"]) == 2
    err = capsys.readouterr().err
    assert "exceeds the 32768 positions of model 'qwen-2.5-7b'" in err
    assert get_model("qwen-2.5-7b") is MODELS["qwen-2.5-7b"]  # the override ended with the command


def test_a_model_file_is_used_and_its_mistakes_exit_2(tmp_path: Path, capsys) -> None:
    good = tmp_path / "tiny.yaml"
    good.write_text("name: tiny-1b\nsource: test\nlayers: 4\nhidden: 1024\nheads: 8\nkv_heads: 2\n"
                    "intermediate: 4096\nvocab: 32000\npositions: 8192\n")
    assert main([*_SIM, "1000", "--model-file", str(good), "--gpu-memory-utilization", "0.5"]) == 0
    out = capsys.readouterr()
    assert "tiny-1b" in out.out and "(0.5 of 80.0 GiB)" in out.out and "model tiny-1b: 4 layers" in out.err
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: tiny\nsource: test\nlayers: four\n")
    assert main([*_SIM, "1000", "--model-file", str(bad)]) == 2
    assert "bad.yaml: hidden is required" in capsys.readouterr().err
    bad.write_text(good.read_text().replace("layers: 4", "layers: four"))
    assert main([*_SIM, "1000", "--model-file", str(bad)]) == 2
    assert "layers must be a positive integer, got 'four'" in capsys.readouterr().err
    assert main([*_SIM, "1000", "--model", "llama-3.1-8b", "--model-file", str(good)]) == 2
    assert "differs from the name 'tiny-1b'" in capsys.readouterr().err
    assert main([*_SIM, "1000"]) == 2
    assert "--model-file" in capsys.readouterr().err
    assert main([*_SIM, "1000", "--model", "qwen-2.5-7b", "--rope-scaling", "ntk:2"]) == 2
    assert "--rope-scaling must be 'none' or TYPE:FACTOR" in capsys.readouterr().err
