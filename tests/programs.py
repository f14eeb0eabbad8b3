"""Programs and Python snippets in processes of their own, as users start them: the one way
the tests start a new process (tests/cli.py's `run_main` runs a program's `main` in the
test's own process instead).

Every process gets the venv's Python (`sys.executable`), the checkout as its working
directory, the test environment (this process's, with TensorFlow's C++ logs down to
warnings and unbuffered output) plus what the test adds, a timeout, and its output
captured as text. A process that fails (or runs out of time) where the test expects it to
succeed fails the test with its command, its exit status and the tail of its stderr.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# What every process the tests start gets on top of the test process's own environment.
TEST_ENVIRONMENT = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}


def environment(env: dict | None = None) -> dict[str, str]:
    """This process's environment with TEST_ENVIRONMENT and `env` over it; a variable whose
    value in `env` is None is removed."""
    merged = {**os.environ, **TEST_ENVIRONMENT}
    for name, value in (env or {}).items():
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = str(value)
    return merged


def _shown(command: list[str]) -> str:
    """The command for a failure message, a long argument (a snippet's code) cut short."""
    shown = []
    for argument in command:
        if "\n" in argument or len(argument) > 120:
            argument = (argument.strip().splitlines() or [""])[0][:120] + "..."
        shown.append(argument)
    return " ".join(shown)


def run(
    command,
    *,
    input: str | bytes | None = None,
    env: dict | None = None,
    cwd=ROOT,
    timeout: float = 600,
    check: bool = True,
) -> subprocess.CompletedProcess:
    """`command` (the executable and its arguments) in a new process, `input` on its stdin:
    its exit status, stdout and stderr, as text (as bytes where `input` is bytes). With
    `check`, a nonzero exit status fails the test; a process still running after `timeout`
    seconds fails it whatever `check`."""
    command = [str(argument) for argument in command]
    text = not isinstance(input, bytes)
    try:
        result = subprocess.run(
            command,
            input=input,
            cwd=cwd,
            env=environment(env),
            capture_output=True,
            text=text,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as expired:
        stderr = expired.stderr or b""
        stderr = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr
        raise AssertionError(
            f"`{_shown(command)}` still ran after {timeout} s; its stderr ends:\n{stderr[-3000:]}"
        ) from None
    if check and result.returncode != 0:
        output = result.stderr or result.stdout  # a program that wrote nothing on stderr
        output = output if text else output.decode(errors="replace")
        stream = "stderr" if result.stderr else "stdout"
        raise AssertionError(
            f"`{_shown(command)}` exited with status {result.returncode}; its {stream} ends:\n"
            f"{output[-3000:]}"
        )
    return result


def python(*args, **kwargs) -> subprocess.CompletedProcess:
    """`python ARGS` (the venv's Python) in a new process; `run`'s keyword arguments."""
    return run([sys.executable, *args], **kwargs)


def program(module: str, *args, **kwargs) -> subprocess.CompletedProcess:
    """`python -m MODULE ARGS` in a new process: a program as a user runs it."""
    return python("-m", module, *args, **kwargs)


def snippet(code: str, *args, **kwargs) -> subprocess.CompletedProcess:
    """`python -c CODE ARGS` in a new process: `sys.argv[1:]` is `args`."""
    return python("-c", code, *args, **kwargs)


def start(*args, env: dict | None = None, cwd=ROOT, **popen) -> subprocess.Popen:
    """`python ARGS` started in a new process and left running (for the tests that signal
    or read it while it runs), its output piped as text unless `popen` says otherwise."""
    popen = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, **popen}
    command = [sys.executable, *(str(argument) for argument in args)]
    return subprocess.Popen(command, cwd=cwd, env=environment(env), **popen)


def wait_until(found, process: subprocess.Popen, seconds: float, what: str) -> None:
    """Polls `found()` until it is true while `process` (of `start`, stderr piped as bytes)
    runs: fails the test with its stderr if it ends first, or saying `what` did not happen
    within `seconds`."""
    deadline = time.monotonic() + seconds
    while not found():
        assert process.poll() is None, process.stderr.read().decode()[-3000:]
        assert time.monotonic() < deadline, f"{what} did not happen within {seconds} s"
        time.sleep(0.1)


# What a light process must not import (the package itself is light: its top level is lazy).
HEAVY = ("tensorflow", "keras", "keras_hub")

_IMPORTS_AFTER = """
import json, runpy, sys
module, sys.argv = sys.argv[1], sys.argv[1:]
try:
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    status = 0
except SystemExit as exit:
    status = exit.code
    if isinstance(status, str):  # sys.exit("message"), as Python itself reports it
        print(status, file=sys.stderr)
        status = 1
sys.stdout.flush()
print("\\n" + json.dumps([status or 0, [m for m in HEAVY if m in sys.modules]]))
"""


def program_imports(
    module: str, *args, modules: tuple[str, ...] = HEAVY, **kwargs
) -> tuple[subprocess.CompletedProcess, list]:
    """`python -m MODULE ARGS` in a new process, and which of `modules` (HEAVY: TensorFlow,
    Keras, the library's package `__init__`) it had imported when it ended: `(process,
    imported)`, the process's `returncode` the program's exit status and its stdout the
    program's own. `run`'s keyword arguments; `check` defaults to False (the tests of
    refusals)."""
    check = kwargs.pop("check", False)
    code = f"HEAVY = {tuple(modules)!r}\n{_IMPORTS_AFTER}"
    result = snippet(code, module, *args, check=False, **kwargs)
    if result.returncode != 0:  # an exception out of the program (a traceback)
        raise AssertionError(
            f"python -m {module} raised; its stderr ends:\n{result.stderr[-3000:]}"
        )
    stdout, _, last = result.stdout.rstrip("\n").rpartition("\n")
    status, imported = json.loads(last)
    result = subprocess.CompletedProcess(result.args, status, stdout, result.stderr)
    if check and status != 0:
        raise AssertionError(
            f"`python -m {module} {_shown([str(a) for a in args])}` exited with status {status};"
            f" its stderr ends:\n{result.stderr[-3000:]}"
        )
    return result, imported


_EACH_IN_TURN = """
import contextlib, io, json, runpy, sys
reports = []
for module, *args in json.loads(sys.argv[1]):
    sys.argv = [module, *args]
    out, err = (io.TextIOWrapper(io.BytesIO(), encoding="utf-8") for _ in range(2))
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            status = 0
        except SystemExit as exit:
            status = exit.code
            if isinstance(status, str):  # sys.exit("message"), as Python itself reports it
                print(status, file=sys.stderr)
                status = 1
    texts = []
    for stream in (out, err):
        stream.flush()
        texts.append(stream.buffer.getvalue().decode("utf-8", "replace"))
    reports.append([status or 0, *texts, [m for m in HEAVY if m in sys.modules]])
print(json.dumps(reports))
"""


def programs_imports(runs, **kwargs) -> list[tuple[subprocess.CompletedProcess, list]]:
    """`program_imports` for several programs (`runs`: `(module, *args)` tuples) run in turn
    in one new process, each with its own standard streams (no stdin): for each,
    `(process, imported)`, `imported` the HEAVY modules imported when it ended, by it or by
    a run before it (the first run that reports one imported it). For the tests of refusals
    before TensorFlow starts: one Python start-up where each run would take its own.
    `run`'s keyword arguments."""
    runs = [[str(argument) for argument in run] for run in runs]
    code = f"HEAVY = {HEAVY!r}\n{_EACH_IN_TURN}"
    reports = json.loads(snippet(code, json.dumps(runs), **kwargs).stdout.splitlines()[-1])
    return [
        (subprocess.CompletedProcess(run, status, stdout, stderr), imported)
        for run, (status, stdout, stderr, imported) in zip(runs, reports, strict=True)
    ]
