"""A command-line program's `main` run in the test's own process: what its process would
print and return, without starting Python, TensorFlow and the library again (seconds a
call). For the programs that leave no process-wide state behind (evaluate, export,
translate, average_checkpoints, visualize, import_marian: `kt.fast` only inside
`fast.switched`), and for `trainers.train` where it stops before setting any (a finished
run, a refused one). Training runs (seeds, the speed switch, op determinism), and each
program's start-up and exit in a process of its own, stay subprocesses."""

import contextlib
import importlib
import io
import subprocess
import sys


def run_main(module: str, *args, stdin: bytes | None = None, check: bool = True):
    """`module.main(args)` with its standard streams captured (and `stdin` as its input):
    a `subprocess.CompletedProcess` with the exit status, stdout and stderr as text."""
    argv = [str(arg) for arg in args]
    main = importlib.import_module(module).main
    out, err = io.StringIO(), io.StringIO()
    source = io.TextIOWrapper(io.BytesIO(stdin or b""), encoding="utf-8")
    saved_stdin, sys.stdin = sys.stdin, source
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as error:  # argparse's refusals
                code = error.code if isinstance(error.code, int) else 1
    finally:
        sys.stdin = saved_stdin
    result = subprocess.CompletedProcess([module, *argv], code, out.getvalue(), err.getvalue())
    if check and code != 0:
        raise AssertionError(f"{module} {argv} failed ({code}):\n{result.stderr[-3000:]}")
    return result
