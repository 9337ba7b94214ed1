"""The bad inputs `test_bad_inputs_round_two.py` replays through the `dse` command, by family.

`build_inputs(directory)` writes every file the cases name (FIFOs, alias bombs, deep nesting, profiles with
non-finite numbers, ...); each `Case` is a command line (`{d}` stands for that directory) that must end with
exit status 2, one paragraph naming `needles`, no traceback, and in well under 30 s.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SYN = ["--model", "llama-3.1-8b", "--hardware", "a100-40g-pcie4", "--output-tokens", "4"]
SIM = ["sim", "--synthetic", "correction=0.5,hit=0.8", *SYN]
REPLAY = [
    "serve",
    "--model",
    "llama-3.1-8b",
    "--hardware",
    "a100-40g-pcie4",
    "--method",
    "freekv",
    "--input-tokens",
    "64",
    "--output-tokens",
    "4",
]
SERVE = [*REPLAY, "--arrival-rate", "1", "--n-requests", "2"]
CAPACITY = [
    "capacity",
    "--model",
    "llama-3.1-8b",
    "--hardware",
    "a100-40g-pcie4",
    "--method",
    "freekv",
    "--input-tokens",
    "64",
    "--output-tokens",
    "4",
]
TRACE = ["trace", "--out", "{d}/trace-out"]
SHIPPED_PROFILE = ROOT / "sim" / "profiles" / "a100-40g-pcie4.yaml"
SHIPPED_SOFTWARE = ROOT / "sim" / "software_profiles" / "pytorch2-cuda12.yaml"
SHIPPED_ENGINE = ROOT / "sim" / "engine_profiles" / "sarathi-serve-a100.yaml"
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
)


@dataclass(frozen=True)
class Case:
    family: str
    name: str
    args: list[str]
    needles: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)

    def argv(self, directory: Path) -> list[str]:
        return [a.replace("{d}", str(directory)) for a in self.args]

    def environment(self, directory: Path) -> dict[str, str]:
        return {k: v.replace("{d}", str(directory)) for k, v in self.env.items()}


def _study(name: str = "audit", **replace: str) -> str:
    from grid_study import tiny_grid_study

    text = tiny_grid_study(name)
    for old, new in replace.items():
        text = text.replace(old.replace("__", " "), new)
    return text


def _nested_json(depth: int) -> str:
    return "[" * depth + "]" * depth


def build_inputs(d: Path) -> None:
    """Every file the cases read, under `d`."""
    d.mkdir(parents=True, exist_ok=True)
    profile = SHIPPED_PROFILE.read_text()
    software = SHIPPED_SOFTWARE.read_text()
    engine = SHIPPED_ENGINE.read_text()
    files: dict[str, str | bytes] = {
        "study.yaml": _study(),
        "study-bomb.yaml": BOMB + _study(),
        "study-unused-anchor.yaml": _study() + "x-unused: &u [1, 2]\n" + BOMB.replace("a:", "z:"),
        "study-recursive.yaml": "name: &n [*n]\n",
        "study-deep.yaml": _study() + "description: " + "[" * 1000 + "]" * 1000 + "\n",
        "study-dict-deep.yaml": "name: x\ndescription:\n"
        + "".join("  " * i + f"k{i}:\n" for i in range(1, 400))
        + "  " * 400
        + "v\n",
        "study-input-huge.yaml": _study(**{"input_tokens: 4096": f"input_tokens: {2**40}"}),
        "study-seed-negative.yaml": _study(**{"seed: 0": "seed: -1"}),
        "study-seed-big.yaml": _study(**{"seed: 0": f"seed: {2**32}"}),
        "study-trials-fraction.yaml": _study(**{"trials: 3": "trials: 1.5"}),
        "study-trials-bool.yaml": _study(**{"trials: 3": "trials: true"}),
        "study-output-nan.yaml": _study(**{"output_tokens: 32": "output_tokens: .nan"}),
        "study-context-bool.yaml": _study(**{"context_tokens: 128": "context_tokens: true"}),
        "study-tau-inf.yaml": _study(**{"tau: [0.8, 0.85, 0.9]": "tau: [0.8, .inf]"}),
        "profile-inf.yaml": profile.replace(
            "hbm_bandwidth_gbps:\n    value: 1555\n", "hbm_bandwidth_gbps:\n    value: .inf\n"
        ),
        "profile-nan.yaml": profile.replace(
            "kernel_launch_s:\n    value: ", "kernel_launch_s:\n    value: .nan #"
        ),
        "profile-bool.yaml": profile.replace("copy_engines:\n    value: 3", "copy_engines:\n    value: true"),
        "profile-bomb.yaml": BOMB + profile,
        "profile-huge-memory.yaml": profile.replace(
            "memory_bytes:\n    value: 42949672960", "memory_bytes:\n    value: 1.0e+300"
        ),
        "software-nan.yaml": software.replace("value: 8.0e-6", "value: .nan"),
        "engine-nan.yaml": engine.replace("[8, 0.156]", "[8, .nan]"),
        "engine-bool.yaml": engine.replace("[8, 0.156]", "[true, 0.156]"),
        "engine-badkey.yaml": engine.replace("    range: [0.94, 1.13]", "    spread: [0.94, 1.13]"),
        "engine-bomb.yaml": BOMB + engine,
        "software-inf.yaml": software.replace("value: 8.0e-6", "value: .inf"),
        "software-evil.yaml": software.replace("name: pytorch2-cuda12", "name: ../../escaped"),
        "software-slash.yaml": software.replace("name: pytorch2-cuda12", "name: sub/dir"),
        "software-dots.yaml": software.replace("name: pytorch2-cuda12", "name: '..'"),
        "software-absolute.yaml": software.replace("name: pytorch2-cuda12", "name: /tmp/abs"),
        "profile-evil.yaml": profile.replace("name: a100-40g-pcie4", "name: ../../escaped", 1),
        "prices-nan.yaml": "a100-40g-pcie4: {price_per_hour_usd: .nan, source: list price}\n",
        "prices-inf.yaml": "a100-40g-pcie4: {price_per_hour_usd: .inf, source: list price}\n",
        "prices-bool.yaml": "a100-40g-pcie4: {price_per_hour_usd: true, source: list price}\n",
        "prices-bomb.yaml": BOMB + "a100-40g-pcie4: {price_per_hour_usd: 2.0, source: list price}\n",
        "prices-dup.yaml": "a100-40g-pcie4: {price_per_hour_usd: 2.0, source: a}\n"
        "a100-40g-pcie4: {price_per_hour_usd: 3.0, source: b}\n",
        "requests-nan.json": '[{"arrival_s": NaN, "input_tokens": 64, "output_tokens": 4}]',
        "requests-inf.json": '[{"arrival_s": Infinity, "input_tokens": 64, "output_tokens": 4}]',
        "requests-fraction.json": '[{"arrival_s": 0.5, "input_tokens": 64.5, "output_tokens": 4}]',
        "requests-bool.json": '[{"arrival_s": 0.5, "input_tokens": true, "output_tokens": 4}]',
        "requests-huge.json": '[{"arrival_s": 0.5, "input_tokens": 1099511627776, "output_tokens": 4}]',
        "requests-deep.json": _nested_json(100_000),
        "requests-dup.json": '[{"arrival_s": 0.5, "arrival_s": 1.0, "input_tokens": 64, "output_tokens": 4}]',
        "requests-nan.csv": "arrival_s,input_tokens,output_tokens\nnan,64,4\n",
        "requests-fraction.csv": "arrival_s,input_tokens,output_tokens\n0.5,64.5,4\n",
        "requests-latin1.csv": b"arrival_s,input_tokens,output_tokens\n0.5,64,4\n"
        + "# caf\xe9\n".encode("latin-1"),
        "requests-invalid-utf8.json": b'[{"arrival_s": 0.5, "input_tokens": 64, "output_tokens": 4, '
        b'"x": "\xff\xfe"}]',
        "synthetic-deep.json": _nested_json(100_000),
        "synthetic-dup.json": '{"correction": 0.5, "hit": 0.8, "hit": 0.9}',
        "synthetic-steps.json": '{"correction": 0.5, "hit": 0.8, "steps": 1e9}',
        "synthetic-bomb.yaml": BOMB + "correction: 0.5\nhit: 0.8\n",
        "microbench-nan.json": json.dumps(
            {
                "schema": "freekv-dse-microbench/1",
                "software": {},
                "hardware": {"gpu.hbm_bandwidth_gbps": float("nan")},
                "tables": {},
            }
        ),
        "microbench-deep.json": _nested_json(100_000),
        "microbench-evil-hw.json": json.dumps(
            {
                "schema": "freekv-dse-microbench/1",
                "software": {"torch_op_dispatch_s": 9e-6},
                "hardware": {},
                "tables": {},
            }
        ),
    }
    for name, content in files.items():
        path = d / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    (d / "study-big.yaml").write_text(_study() + "notes: [" + "1, " * 8_000_000 + "1]\n")
    (d / "profile-bigfile.yaml").write_bytes(b"")
    os.truncate(d / "profile-bigfile.yaml", 200 * 2**20)  # 200 MiB of zero bytes, sparse
    for name in ("fifo.yaml", "fifo.json", "fifo.csv", "fifo.html"):
        os.mkfifo(d / name)
    fifo_dir = d / "fifo-profiles"
    fifo_dir.mkdir()
    os.mkfifo(fifo_dir / "hang.yaml")
    (d / "loop-a").symlink_to(d / "loop-b")
    (d / "loop-b").symlink_to(d / "loop-a")
    meta = d / "trace-deep"
    meta.mkdir()
    (meta / "meta.json").write_text(_nested_json(100_000))
    meta_fifo = d / "trace-fifo"
    meta_fifo.mkdir()
    os.mkfifo(meta_fifo / "meta.json")
    bom = d / "requests-bom.csv"
    bom.write_bytes(b"\xef\xbb\xbfarrival_s,input_tokens,output_tokens\n0.5,64,4\n")


NUMBERS = [
    Case("numbers", "sim --seed -1", [*SIM, "--seed", "-1"], ("--seed",)),
    Case("numbers", "sim --seed 2**32", [*SIM, "--seed", str(2**32)], ("--seed",)),
    Case("numbers", "sim --batch 10**9", [*SIM, "--batch", str(10**9)], ("--batch",)),
    Case("numbers", "sim --batch 1.5", [*SIM, "--batch", "1.5"], ("--batch",)),
    Case("numbers", "sim --budget-tokens 2**40", [*SIM, "--budget-tokens", str(2**40)], ("--budget-tokens",)),
    Case("numbers", "sim --input-tokens 2**40", [*SIM, "--input-tokens", str(2**40)], ("--input-tokens",)),
    Case(
        "numbers",
        "sim --synthetic steps=1e9",
        ["sim", "--synthetic", "correction=0.5,hit=0.8,steps=1e9", *SYN],
        ("steps",),
    ),
    Case(
        "numbers",
        "sim --synthetic seqs=1e12",
        ["sim", "--synthetic", "correction=0.5,hit=0.8,seqs=1e12", *SYN],
        ("seqs",),
    ),
    Case(
        "numbers",
        "sim --synthetic pages=2.5",
        ["sim", "--synthetic", "correction=0.5,hit=0.8,pages=2.5", *SYN],
        ("pages",),
    ),
    Case(
        "numbers",
        "sim --set link.h2d_effective_gbps=inf",
        [*SIM, "--set", "link.h2d_effective_gbps=inf"],
        ("link.h2d_effective_gbps",),
    ),
    Case(
        "numbers",
        "sim --set software.stream_sync_s=nan",
        [*SIM, "--set", "software.stream_sync_s=nan"],
        ("stream_sync_s",),
    ),
    Case("numbers", "serve --seed -1", [*SERVE, "--seed", "-1"], ("--seed",)),
    Case(
        "numbers",
        "serve --n-requests 10**7",
        [*REPLAY, "--arrival-rate", "1", "--n-requests", str(10**7)],
        ("--n-requests",),
    ),
    Case("numbers", "serve --ttft-slo-s nan", [*SERVE, "--ttft-slo-s", "nan"], ("--ttft-slo-s",)),
    Case("numbers", "serve --tpot-slo-ms inf", [*SERVE, "--tpot-slo-ms", "inf"], ("--tpot-slo-ms",)),
    Case("numbers", "serve --arrival-rate nan", [*REPLAY, "--arrival-rate", "nan"], ("--arrival-rate",)),
    Case("numbers", "capacity --slo-ms nan", [*CAPACITY, "--slo-ms", "nan"], ("--slo-ms",)),
    Case("numbers", "capacity --seed -1", [*CAPACITY, "--slo-ms", "50", "--seed", "-1"], ("--seed",)),
    Case(
        "numbers",
        "capacity --input-tokens 2**40",
        [*CAPACITY[:-4], "--input-tokens", str(2**40), "--output-tokens", "4", "--slo-ms", "50"],
        ("--input-tokens",),
    ),
    Case("numbers", "report --slo-ms nan", ["report", "{d}/study.yaml", "--slo-ms", "nan"], ("--slo-ms",)),
    Case("numbers", "report --seed -1", ["report", "{d}/study.yaml", "--seed", "-1"], ("--seed",)),
    Case("numbers", "trace --seed -1", [*TRACE, "--seed", "-1"], ("--seed",)),
    Case("numbers", "trace --tau -5", [*TRACE, "--tau", "-5"], ("--tau",)),
    Case("numbers", "trace --tau nan", [*TRACE, "--tau", "nan"], ("--tau",)),
    Case("numbers", "trace --random-weights -1", [*TRACE, "--random-weights", "-1"], ("--random-weights",)),
    Case("numbers", "trace --batch-size 0", [*TRACE, "--batch-size", "0"], ("--batch-size",)),
    Case(
        "numbers",
        "calibrate --train-fraction nan",
        ["sim", "calibrate", "{d}/trace-deep", "--hardware", "a100-40g-pcie4", "--train-fraction", "nan"],
        ("--train-fraction",),
    ),
    Case(
        "numbers",
        "calibrate --train-fraction 0",
        ["sim", "calibrate", "{d}/trace-deep", "--hardware", "a100-40g-pcie4", "--train-fraction", "0"],
        ("--train-fraction",),
    ),
    Case(
        "numbers",
        "profile hbm .inf",
        [*SIM[:-4], "--hardware", "{d}/profile-inf.yaml", "--output-tokens", "4"],
        ("profile-inf.yaml", "hbm_bandwidth_gbps"),
    ),
    Case(
        "numbers",
        "profile .nan",
        ["hardware", "show", "{d}/profile-nan.yaml"],
        ("profile-nan.yaml", "kernel_launch_s"),
    ),
    Case(
        "numbers",
        "profile bool count",
        ["hardware", "show", "{d}/profile-bool.yaml"],
        ("profile-bool.yaml", "copy_engines"),
    ),
    Case(
        "numbers",
        "profile memory 1e300",
        ["hardware", "show", "{d}/profile-huge-memory.yaml"],
        ("profile-huge-memory.yaml", "memory_bytes"),
    ),
    Case("numbers", "engine .nan", [*SERVE, "--engine", "{d}/engine-nan.yaml"], ("engine-nan", "schedule")),
    Case("numbers", "engine bool", [*SERVE, "--engine", "{d}/engine-bool.yaml"], ("engine-bool.yaml",)),
    Case("files", "engine bad key", [*SERVE, "--engine", "{d}/engine-badkey.yaml"], ("badkey", "spread")),
    Case("files", "engine alias bomb", [*SERVE, "--engine", "{d}/engine-bomb.yaml"], ("engine-bomb.yaml",)),
    Case("files", "engine unknown", [*SERVE, "--engine", "no-such-engine"], ("--engine", "sarathi-serve")),
    Case(
        "numbers",
        "software .nan",
        [*SIM, "--software", "{d}/software-nan.yaml"],
        ("software-nan.yaml", "torch_op_dispatch_s"),
    ),
    Case(
        "numbers",
        "software .inf",
        [*SIM, "--software", "{d}/software-inf.yaml"],
        ("software-inf.yaml", "torch_op_dispatch_s"),
    ),
    Case(
        "numbers",
        "prices .nan",
        [*CAPACITY, "--slo-ms", "50", "--prices", "{d}/prices-nan.yaml"],
        ("prices-nan.yaml", "price_per_hour_usd"),
    ),
    Case(
        "numbers",
        "prices .inf",
        [*CAPACITY, "--slo-ms", "50", "--prices", "{d}/prices-inf.yaml"],
        ("prices-inf.yaml", "price_per_hour_usd"),
    ),
    Case(
        "numbers",
        "requests NaN arrival",
        [*REPLAY, "--requests", "{d}/requests-nan.json"],
        ("requests-nan.json", "arrival_s"),
    ),
    Case(
        "numbers",
        "requests Infinity arrival",
        [*REPLAY, "--requests", "{d}/requests-inf.json"],
        ("requests-inf.json", "arrival_s"),
    ),
    Case(
        "numbers",
        "requests fractional tokens",
        [*REPLAY, "--requests", "{d}/requests-fraction.json"],
        ("requests-fraction.json", "input_tokens"),
    ),
    Case(
        "numbers",
        "requests boolean tokens",
        [*REPLAY, "--requests", "{d}/requests-bool.json"],
        ("requests-bool.json", "input_tokens"),
    ),
    Case(
        "numbers",
        "requests 2**40 tokens",
        [*REPLAY, "--requests", "{d}/requests-huge.json"],
        ("requests-huge.json", "input_tokens"),
    ),
    Case(
        "numbers",
        "requests csv nan",
        [*REPLAY, "--requests", "{d}/requests-nan.csv"],
        ("requests-nan.csv", "arrival_s"),
    ),
    Case(
        "numbers",
        "requests csv fraction",
        [*REPLAY, "--requests", "{d}/requests-fraction.csv"],
        ("requests-fraction.csv", "input_tokens"),
    ),
    Case(
        "numbers",
        "synthetic JSON steps 1e9",
        ["sim", "--synthetic", "{d}/synthetic-steps.json", *SYN],
        ("steps",),
    ),
    Case(
        "numbers",
        "microbench NaN",
        [
            "sim",
            "calibrate",
            "--microbench",
            "{d}/microbench-nan.json",
            "--hardware",
            "a100-40g-pcie4",
            "--out",
            "{d}/mb-out",
        ],
        ("microbench-nan.json", "gpu.hbm_bandwidth_gbps"),
    ),
    Case(
        "numbers",
        "study input_tokens 2**40",
        ["sweep", "{d}/study-input-huge.yaml"],
        ("study-input-huge.yaml", "workload.input_tokens"),
    ),
    Case(
        "numbers",
        "study seed -1",
        ["sweep", "{d}/study-seed-negative.yaml"],
        ("study-seed-negative.yaml", "seed"),
    ),
    Case(
        "numbers", "study seed 2**32", ["sweep", "{d}/study-seed-big.yaml"], ("study-seed-big.yaml", "seed")
    ),
    Case("numbers", "study trials 1.5", ["sweep", "{d}/study-trials-fraction.yaml"], ("trials",)),
    Case("numbers", "study trials true", ["sweep", "{d}/study-trials-bool.yaml"], ("trials",)),
    Case("numbers", "study output_tokens .nan", ["sweep", "{d}/study-output-nan.yaml"], ("output_tokens",)),
    Case(
        "numbers", "study context_tokens true", ["sweep", "{d}/study-context-bool.yaml"], ("context_tokens",)
    ),
    Case("numbers", "study tau .inf", ["sweep", "{d}/study-tau-inf.yaml"], ("tau",)),
]

NUMBERS += [
    Case("numbers", "sim --page-size 0", [*SIM, "--page-size", "0"], ("--page-size",)),
    Case("numbers", "sim --window-tokens -32", [*SIM, "--window-tokens", "-32"], ("--window-tokens",)),
    Case("numbers", "sim --batch 1,4,1e9", [*SIM, "--batch", "1,4,1000000000"], ("--batch",)),
    Case("numbers", "serve --input-tokens 1e9", [*SERVE, "--input-tokens", "1e9"], ("--input-tokens",)),
    Case(
        "numbers",
        "capacity --min-accuracy-ratio nan",
        [*CAPACITY, "--slo-ms", "50", "--min-accuracy-ratio", "nan"],
        ("--min-accuracy-ratio",),
    ),
    Case(
        "numbers",
        "capacity --budgets 2**40",
        [*CAPACITY, "--slo-ms", "50", "--budgets", str(2**40)],
        ("--budgets",),
    ),
    Case("numbers", "trace --layers 0", [*TRACE, "--layers", "0"], ("--layers",)),
    Case("numbers", "trace --samples 10**7", [*TRACE, "--samples", str(10**7)], ("--samples",)),
    Case("numbers", "sim --option NaN", [*SIM, "--option", "alpha=NaN"], ("--option",)),
]

YAML = [
    Case("yaml", "study billion laughs", ["sweep", "{d}/study-bomb.yaml"], ("study-bomb.yaml", "alias")),
    Case(
        "yaml",
        "study unused anchors",
        ["sweep", "{d}/study-unused-anchor.yaml"],
        ("study-unused-anchor.yaml", "alias"),
    ),
    Case(
        "yaml",
        "study recursive alias",
        ["sweep", "{d}/study-recursive.yaml"],
        ("study-recursive.yaml", "recursive"),
    ),
    Case("yaml", "study 1000-deep list", ["sweep", "{d}/study-deep.yaml"], ("study-deep.yaml", "deep")),
    Case(
        "yaml",
        "study 400-deep mapping",
        ["sweep", "{d}/study-dict-deep.yaml"],
        ("study-dict-deep.yaml", "deep"),
    ),
    Case("yaml", "study 24 MB list", ["sweep", "{d}/study-big.yaml"], ("study-big.yaml", "MiB")),
    Case(
        "yaml",
        "profile billion laughs",
        ["hardware", "show", "{d}/profile-bomb.yaml"],
        ("profile-bomb.yaml", "alias"),
    ),
    Case(
        "yaml",
        "profile 200 MiB",
        ["hardware", "show", "{d}/profile-bigfile.yaml"],
        ("profile-bigfile.yaml", "MiB"),
    ),
    Case(
        "yaml",
        "prices billion laughs",
        [*CAPACITY, "--slo-ms", "50", "--prices", "{d}/prices-bomb.yaml"],
        ("prices-bomb.yaml", "alias"),
    ),
    Case(
        "yaml",
        "prices duplicate key",
        [*CAPACITY, "--slo-ms", "50", "--prices", "{d}/prices-dup.yaml"],
        ("prices-dup.yaml", "duplicate key"),
    ),
    Case(
        "yaml",
        "synthetic YAML bomb",
        ["sim", "--synthetic", "{d}/synthetic-bomb.yaml", *SYN],
        ("synthetic-bomb.yaml", "alias"),
    ),
    Case(
        "yaml",
        "synthetic JSON 100000 deep",
        ["sim", "--synthetic", "{d}/synthetic-deep.json", *SYN],
        ("synthetic-deep.json", "deep"),
    ),
    Case(
        "yaml",
        "synthetic key=value duplicate key",
        ["sim", "--synthetic", "correction=0.5,hit=0.8,hit=0.9", *SYN],
        ("'hit' is given twice",),
    ),
    Case(
        "yaml",
        "synthetic JSON duplicate key",
        ["sim", "--synthetic", "{d}/synthetic-dup.json", *SYN],
        ("synthetic-dup.json", "duplicate key"),
    ),
    Case(
        "yaml",
        "requests JSON 100000 deep",
        [*REPLAY, "--requests", "{d}/requests-deep.json"],
        ("requests-deep.json", "deep"),
    ),
    Case(
        "yaml",
        "requests JSON duplicate key",
        [*REPLAY, "--requests", "{d}/requests-dup.json"],
        ("requests-dup.json", "duplicate key"),
    ),
    Case("yaml", "trace meta.json 100000 deep", ["sim", "{d}/trace-deep", *SYN], ("meta.json", "deep")),
    Case(
        "yaml",
        "microbench JSON 100000 deep",
        [
            "sim",
            "calibrate",
            "--microbench",
            "{d}/microbench-deep.json",
            "--hardware",
            "a100-40g-pcie4",
            "--out",
            "{d}/mb-out",
        ],
        ("microbench-deep.json", "deep"),
    ),
]

FILES = [
    Case("files", "FIFO study", ["sweep", "{d}/fifo.yaml"], ("fifo.yaml", "not a regular file")),
    Case("files", "FIFO profile", ["hardware", "show", "{d}/fifo.yaml"], ("fifo.yaml", "not a regular file")),
    Case(
        "files", "FIFO software", [*SIM, "--software", "{d}/fifo.yaml"], ("fifo.yaml", "not a regular file")
    ),
    Case(
        "files", "FIFO requests", [*REPLAY, "--requests", "{d}/fifo.csv"], ("fifo.csv", "not a regular file")
    ),
    Case(
        "files",
        "FIFO prices",
        [*CAPACITY, "--slo-ms", "50", "--prices", "{d}/fifo.yaml"],
        ("fifo.yaml", "not a regular file"),
    ),
    Case(
        "files",
        "FIFO microbench",
        [
            "sim",
            "calibrate",
            "--microbench",
            "{d}/fifo.json",
            "--hardware",
            "a100-40g-pcie4",
            "--out",
            "{d}/mb-out",
        ],
        ("fifo.json", "not a regular file"),
    ),
    Case(
        "files",
        "FIFO synthetic",
        ["sim", "--synthetic", "{d}/fifo.json", *SYN],
        ("fifo.json", "not a regular file"),
    ),
    Case(
        "files", "FIFO trace meta.json", ["sim", "{d}/trace-fifo", *SYN], ("meta.json", "not a regular file")
    ),
    Case(
        "files",
        "FIFO --timeline",
        [*SIM, "--timeline", "{d}/fifo.html"],
        ("--timeline", "not a regular file"),
    ),
    Case(
        "files",
        "FIFO --chrome-trace",
        [*SIM, "--chrome-trace", "{d}/fifo.json"],
        ("--chrome-trace", "not a regular file"),
    ),
    Case("files", "FIFO --csv", [*SIM, "--csv", "{d}/fifo.csv"], ("--csv", "not a regular file")),
    Case("files", "FIFO serve --json", [*SERVE, "--json", "{d}/fifo.json"], ("--json", "not a regular file")),
    Case(
        "files",
        "FIFO capacity --json",
        [*CAPACITY, "--slo-ms", "50", "--json", "{d}/fifo.json"],
        ("--json", "not a regular file"),
    ),
    Case(
        "files",
        "FIFO report --out",
        ["report", "{d}/study.yaml", "--out", "{d}/fifo.html"],
        ("--out", "not a regular file"),
    ),
    Case(
        "files",
        "FIFO in FREEKV_DSE_PROFILES",
        ["hardware", "show", "hang"],
        ("hang.yaml", "not a regular file"),
        env={"FREEKV_DSE_PROFILES": "{d}/fifo-profiles"},
    ),
    Case("files", "/dev/zero study", ["sweep", "/dev/zero"], ("/dev/zero", "not a regular file")),
    Case("files", "/dev/zero profile", ["hardware", "show", "/dev/zero.yaml"], ("/dev/zero.yaml",)),
    Case(
        "files",
        "symlink loop --weights",
        [*TRACE, "--weights", "{d}/loop-a", "--samples", "1"],
        ("loop-a", "symbolic links"),
    ),
    Case("files", "symlink loop study", ["sweep", "{d}/loop-a"], ("loop-a", "symbolic links")),
    Case(
        "files",
        "Latin-1 requests",
        [*REPLAY, "--requests", "{d}/requests-latin1.csv"],
        ("requests-latin1.csv", "not UTF-8"),
    ),
    Case(
        "files",
        "invalid UTF-8 requests",
        [*REPLAY, "--requests", "{d}/requests-invalid-utf8.json"],
        ("requests-invalid-utf8.json", "not UTF-8"),
    ),
    Case("files", "directory as requests", [*REPLAY, "--requests", "{d}"], ("is a directory",)),
    Case(
        "files", "directory as prices", [*CAPACITY, "--slo-ms", "50", "--prices", "{d}"], ("is a directory",)
    ),
]

NAMES = [
    Case(
        "names",
        "software name ../../escaped",
        [
            "sim",
            "calibrate",
            "--microbench",
            "{d}/microbench-evil-hw.json",
            "--hardware",
            "a100-40g-pcie4",
            "--software",
            "{d}/software-evil.yaml",
            "--out",
            "{d}/mb/out",
        ],
        ("software-evil.yaml", "name"),
    ),
]

NAMES += [
    Case(
        "names",
        f"software name {n}",
        [*SIM, "--software", f"{{d}}/software-{f}.yaml"],
        (f"software-{f}.yaml", "name"),
    )
    for n, f in (("sub/dir", "slash"), ("..", "dots"), ("/tmp/abs", "absolute"))
] + [
    Case(
        "names",
        "hardware name ../../escaped",
        ["hardware", "show", "{d}/profile-evil.yaml"],
        ("profile-evil.yaml", "name"),
    ),
    Case(
        "names",
        "calibrate hardware name ../../escaped",
        [
            "sim",
            "calibrate",
            "--microbench",
            "{d}/microbench-evil-hw.json",
            "--hardware",
            "{d}/profile-evil.yaml",
            "--out",
            "{d}/mb2/out",
        ],
        ("profile-evil.yaml", "name"),
    ),
]

CASES = [*NUMBERS, *YAML, *FILES, *NAMES]
