"""The peak resident memory of one program run, such as an export, in a process of its own.

    python -m benchmarks.program_memory [--limit-gib G] -- python -m trainers.export ...

NLLB-200-600M's size, the int8 LiteRT file (the commands of BENCHMARKS.md's table):

    python -m benchmarks.nllb_shaped --out /tmp/nllb-shaped
    python -m trainers.import_pretrained /tmp/nllb-shaped --model-dir /tmp/nllb-import \\
        --target-language spa_Latn
    python -m benchmarks.program_memory --limit-gib 13 -- python -m trainers.export \\
        --model-dir /tmp/nllb-import --out /tmp/nllb-int8 --format litert --quantize int8 \\
        --beam-size 1

Runs the command, waits for it and prints one JSON line: its exit status, the peak resident
memory of the process (the kernel's own high-water mark, `wait4`'s `ru_maxrss`), the peak of
it and its children together (sampled every `--every` seconds: a program that converts in a
child counts both), and the seconds taken. `--limit-gib` kills the command (and says so) once
it and its children hold more than that, which keeps a shared machine alive where the
program would be killed by the kernel.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path


def children() -> dict[int, list[int]]:
    """Every process's children, by parent id (Linux: /proc/PID/stat)."""
    found: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # gone meanwhile
                continue
            found.setdefault(int(fields[1]), []).append(int(entry.name))
    return found


def descendants(root: int) -> list[int]:
    """`root` and every process under it, in any session or process group."""
    tree, todo, found = children(), [root], []
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += tree.get(pid, [])
    return found


def tree_rss(root: int) -> int:
    """The resident bytes of `root` and its descendants now (their VmRSS)."""
    total = 0
    for pid in descendants(root):
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024  # kB
        except OSError:
            continue
    return total


def measure(command: list[str], limit: float | None = None, every: float = 0.25) -> dict:
    """Runs `command`; its exit status, peak RSS (alone, and with its children), seconds, and
    whether it was killed above `limit` bytes."""
    start = time.perf_counter()
    process = subprocess.Popen(command, start_new_session=True)
    peak_tree, killed = 0, False
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        peak_tree = max(peak_tree, tree_rss(process.pid))
        if limit is not None and peak_tree > limit and not killed:
            killed = True
            for pid in reversed(descendants(process.pid)):  # those in sessions of their own too
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        time.sleep(every)
    process.returncode = os.waitstatus_to_exitcode(status)
    peak = usage.ru_maxrss * 1024  # KiB on Linux
    return {
        "command": " ".join(command),
        "returncode": process.returncode,
        "killed_over_limit": killed,
        "peak_rss_mb": round(peak / 2**20),
        "peak_tree_rss_mb": round(max(peak_tree, peak) / 2**20),
        "seconds": round(time.perf_counter() - start, 1),
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.program_memory", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--limit-gib", type=float, help="kill the command above this")
    parser.add_argument("--every", type=float, default=0.25, help="seconds between samples")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    if args.limit_gib is not None and args.limit_gib <= 0:
        parser.error(f"--limit-gib {args.limit_gib} must be positive")
    limit = None if args.limit_gib is None else args.limit_gib * 2**30
    report = measure(command, limit, args.every)
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
