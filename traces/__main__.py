"""`python -m traces DIR [--tau X]`: validate a trace, print its status line and its summary as JSON.

Exit status 0 for a readable trace (complete or cut short), 2 with a one-paragraph message otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys

from traces.errors import TraceError
from traces.reader import open_trace
from traces.stats import trace_summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m traces", description=__doc__.splitlines()[0])
    parser.add_argument("trace", help="a trace directory (holding meta.json and records.bin)")
    parser.add_argument("--tau", type=float, default=None,
                        help="recompute correction statistics as similarity < TAU (default: recorded flags)")
    args = parser.parse_args(argv)
    try:
        reader = open_trace(args.trace)
        summary = trace_summary(reader, tau=args.tau)
    except TraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(reader.status(), file=sys.stderr)
    print(json.dumps(summary, indent=1, allow_nan=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
