"""A writer killed with SIGKILL mid-run leaves a trace whose finished steps read back bit-exactly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from trace_factory import StepStream, assert_identical, tiny_model

from traces import open_trace

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SEED = 1234
N_SEQUENCES = 2

# The child writes steps forever, printing the count after each append returns (the record is then in
# the OS page cache, which survives a SIGKILL of the process).
CHILD = """
import sys
import numpy as np
from trace_factory import StepStream, make_meta, tiny_model
from traces import TraceWriter
model = tiny_model(6, 2)
rng = np.random.default_rng(int(sys.argv[2]))
streams = [StepStream(model, s, 4096, (0,), 16, churn=4) for s in range(int(sys.argv[3]))]
writer = TraceWriter.create(sys.argv[1], make_meta(model))
n = 0
while True:
    for stream in streams:
        writer.append_step(stream.next(rng))
        n += 1
        print(n, flush=True)
"""


def _expected_steps(n: int) -> list:
    model = tiny_model(6, 2)
    rng = np.random.default_rng(SEED)
    streams = [StepStream(model, s, 4096, (0,), 16, churn=4) for s in range(N_SEQUENCES)]
    return [streams[i % N_SEQUENCES].next(rng) for i in range(n)]


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL")
@pytest.mark.parametrize("wait_for_steps", [1, 37, 150])
def test_sigkill_midway_keeps_finished_steps(tmp_path: Path, wait_for_steps: int) -> None:
    out = tmp_path / "trace"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE)]))
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(out), str(SEED), str(N_SEQUENCES)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
    )
    try:
        assert child.stdout is not None
        for line in child.stdout:
            if int(line) >= wait_for_steps:
                break
        else:
            pytest.fail(f"writer exited early: {child.stderr.read() if child.stderr else ''}")
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    reader = open_trace(out)
    assert not reader.complete
    assert reader.n_steps >= wait_for_steps
    got = list(reader.steps())
    assert len(got) == reader.n_steps
    assert_identical(got, _expected_steps(len(got)))
