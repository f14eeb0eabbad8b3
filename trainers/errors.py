"""The errors of the command-line programs, and their exit statuses.

    0  EXIT_OK           done
    1  EXIT_STOPPED      training stopped early: the loss became NaN or infinite (the backup
                         and checkpoints of the last good epoch stay)
    2  EXIT_USER_ERROR   a `ConfigError` or `CorpusError`: a configuration value, a corpus, a
                         model directory or a flag that cannot work, named in the message and
                         found before any work starts
    3  EXIT_LOST_WORKER  under multi_worker, contact with another worker was lost (one of
                         `LOST_WORKER_ERRORS`): start the same command again on every worker
  130  EXIT_INTERRUPTED  Ctrl-C (128 + SIGINT, as a shell reports it): the program stopped
                         where it was, its files handled as on any error (what it had saved
                         stays; an output it was writing is not left half written in its place)
  143  EXIT_TERMINATED   SIGTERM (`kill PID`, a service manager, `timeout`): handled as Ctrl-C,
                         then the process ends as SIGTERM ends it (128 + SIGTERM in a shell;
                         its parent sees the signal)

Every error is printed to stderr as one line, `PROG: error: MESSAGE`, as argparse prints a bad
argument (`flags.ArgumentParser`, which adds a pointer to `--help`); Ctrl-C as `interrupted`
(`program`, around every program's `main`, instead of Python's traceback); SIGTERM prints
nothing (the shell says `Terminated`).

The module is plain Python until `CorpusError`, `USER_ERRORS` or `LOST_WORKER_ERRORS` is
first read (they bring the library and TensorFlow): a program checks its arguments and paths,
and reports them with `fail`, before TensorFlow starts.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys

from trainers import flags

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_LOST_WORKER",
    "EXIT_OK",
    "EXIT_STOPPED",
    "EXIT_TERMINATED",
    "EXIT_USER_ERROR",
    "LOST_WORKER_ERRORS",  # noqa: F822  (__getattr__ below)
    "USER_ERRORS",  # noqa: F822  (__getattr__ below)
    "ConfigError",
    "CorpusError",  # noqa: F822  (__getattr__ below)
    "Terminated",
    "fail",
    "program",
]

EXIT_OK = 0
EXIT_STOPPED = 1
EXIT_USER_ERROR = 2
EXIT_LOST_WORKER = 3
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 128 + 15  # signal.SIGTERM, without importing signal's table here


class ConfigError(ValueError):
    """A configuration value that cannot work; the message names where it came from."""


def __getattr__(name: str):
    """The names that need the library or TensorFlow, imported on first use (PEP 562)."""
    if name == "CorpusError":  # the corpus readers' error (keras_transformer.corpus)
        from keras_transformer.corpus import CorpusError

        return CorpusError
    if name == "USER_ERRORS":  # what a user can fix: reported as one line, no traceback
        from keras_transformer.corpus import CorpusError

        return (ConfigError, CorpusError)
    if name == "LOST_WORKER_ERRORS":  # what a collective operation raises when another
        import tensorflow as tf  # worker of the cluster is gone

        return (tf.errors.UnavailableError, tf.errors.CancelledError)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def fail(error: BaseException | str, status: int = EXIT_USER_ERROR) -> int:
    """Prints `PROG: error: ERROR` to stderr, PROG the program as its flags' refusals name it
    (`flags.program_name`; `error: ERROR` before any flags were parsed), and returns
    `status`, for `main` to return."""
    name = flags.program_name()
    print(f"{name}: error: {error}" if name else f"error: {error}", file=sys.stderr)
    return status


def program(main):
    """A program's `main`, with Ctrl-C reported as one line, `interrupted`, and the exit status
    `EXIT_INTERRUPTED`, instead of Python's traceback of a `KeyboardInterrupt`; and SIGTERM
    handled as Ctrl-C, then ended as SIGTERM ends a process (`EXIT_TERMINATED`).

    The interrupt passes through the program's code first, as any exception does: its
    `finally` blocks and the library's atomic writes remove what they had half written (an
    export's folders beside --out, a translation's partial output), a process it waits for
    is killed, and what was saved before stays. SIGTERM is raised in the main thread as
    `Terminated`, which takes the same way, where the signal's default would end the
    process at once and leave those behind; a second SIGTERM ends it at once, and a
    caller's own SIGTERM handler is left alone. Like Ctrl-C, it is acted on when the main
    thread is back in Python (after the TensorFlow call it waits in). A program on
    TensorFlow runs without JAX, where a Ctrl-C could be lost (`_tensorflow_without_jax`)."""

    @functools.wraps(main)
    def interruptible(*args, **kwargs) -> int:
        with _tensorflow_without_jax(), _sigterm_raised():
            try:
                return main(*args, **kwargs)
            except KeyboardInterrupt:
                print("interrupted", file=sys.stderr)
                return EXIT_INTERRUPTED
            except Terminated:
                return _end_as_terminated()

    return interruptible


class Terminated(BaseException):
    """A SIGTERM, raised in the main thread inside `program` (a BaseException, as
    `KeyboardInterrupt`: `except Exception` does not stop it)."""


def _raise_terminated(signum, frame):
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second one ends the process at once
    raise Terminated


@contextlib.contextmanager
def _sigterm_raised():
    """SIGTERM raises `Terminated` inside the block, where its handler is the default and this
    is the main thread (Python's signal handlers run there only); then as it was."""
    import signal
    import threading

    installed = (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    )
    if installed:
        signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        if installed:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _end_as_terminated() -> int:
    """Ends this process as an unhandled SIGTERM would (its parent sees the signal, a shell
    `EXIT_TERMINATED`); `EXIT_TERMINATED` where it is still running."""
    import signal

    for stream in (sys.stdout, sys.stderr):  # what it printed, before the signal ends it
        with contextlib.suppress(AttributeError, OSError, ValueError):  # None, closed, a pipe
            stream.flush()  # whose reader is gone: nothing more to say there
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
    return EXIT_TERMINATED


@contextlib.contextmanager
def _tensorflow_without_jax():
    """JAX kept out of a program that runs on TensorFlow (Keras's backend unless
    KERAS_BACKEND says otherwise), where nothing uses it.

    `import tensorflow` imports JAX where it is installed (tensorflow/lite/python/util.py
    takes `jax.jit` for its JAX converter, which the programs never call), and JAX puts a
    Python function in `gc.callbacks` (JAX issue 14882): a Ctrl-C striking it raises there,
    where Python prints "Exception ignored in" and goes on, and the program ran to its end
    (JAX issue 18246). `sys.modules["jax"] = None` makes `import jax` fail as if
    JAX were not installed, which TensorFlow expects; the entry is removed again when
    `main` returns (a test that runs `main` in its own process)."""
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    kept_out = backend == "tensorflow" and "jax" not in sys.modules
    if kept_out:
        sys.modules["jax"] = None
    try:
        yield
    finally:
        if kept_out and "jax" in sys.modules and sys.modules["jax"] is None:
            del sys.modules["jax"]
