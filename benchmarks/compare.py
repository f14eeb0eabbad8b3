"""Two benchmark commands in alternating runs (A, B, A, B...), and the ratio of their medians.

    python -m benchmarks.compare --repeats 5 \\
        --a "python -m benchmarks.run --preset small --mode train" \\
        --b "python -m benchmarks.peer --preset small --mode train"

Each command's last JSON line (the peer's schema: `benchmarks.run`, `benchmarks.peer`...)
must hold `--field` (default tokens_per_s). A drifting, shared machine slows both sides
alike when their runs alternate; a ratio of figures measured on different days or while
anything else runs means little. Prints each pair, then one JSON line: both medians, both
ranges (min, max) and `ratio` = median A / median B.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys


def measure(command: str, field: str) -> float:
    """`field` of the last JSON line `command` prints; exits naming the command if it fails."""
    result = subprocess.run(shlex.split(command), capture_output=True, text=True)
    lines = [line for line in result.stdout.splitlines() if line.strip().startswith("{")]
    if result.returncode != 0 or not lines:
        sys.exit(f"command failed (exit {result.returncode}): {command}\n{result.stderr[-2000:]}")
    record = json.loads(lines[-1])
    if field not in record:
        sys.exit(f"{command}: its last JSON line has no {field!r} (it has {sorted(record)})")
    return float(record[field])


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", required=True, help="command A")
    parser.add_argument("--b", required=True, help="command B")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each (default 5)")
    parser.add_argument("--field", default="tokens_per_s", help="the JSON field compared")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats={args.repeats} must be >= 1")
    a, b = [], []
    for run in range(args.repeats):
        a.append(measure(args.a, args.field))
        b.append(measure(args.b, args.field))
        print(f"run {run + 1}: A {a[-1]:.1f}  B {b[-1]:.1f}  A/B {a[-1] / b[-1]:.3f}", flush=True)
    summary = {
        "field": args.field,
        "repeats": args.repeats,
        "median_a": statistics.median(a),
        "median_b": statistics.median(b),
        "range_a": [min(a), max(a)],
        "range_b": [min(b), max(b)],
        "ratio": round(statistics.median(a) / statistics.median(b), 3),
    }
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
