"""The errors of the command-line programs, and their exit statuses.

    0  EXIT_OK           done
    1  EXIT_STOPPED      training stopped early: the loss became NaN or infinite (the backup
                         and checkpoints of the last good epoch stay)
    2  EXIT_USER_ERROR   a `ConfigError` or `CorpusError`: a configuration value, a corpus, a
                         model directory or a flag that cannot work, named in the message and
                         found before any work starts
    3  EXIT_LOST_WORKER  under multi_worker, contact with another worker was lost (one of
                         `LOST_WORKER_ERRORS`): start the same command again on every worker

Every error is printed to stderr as one line, `error: MESSAGE`.
"""

from __future__ import annotations

import sys

import tensorflow as tf

from keras_transformer.corpus import CorpusError

__all__ = [
    "EXIT_LOST_WORKER",
    "EXIT_OK",
    "EXIT_STOPPED",
    "EXIT_USER_ERROR",
    "LOST_WORKER_ERRORS",
    "USER_ERRORS",
    "ConfigError",
    "CorpusError",
    "fail",
]

EXIT_OK = 0
EXIT_STOPPED = 1
EXIT_USER_ERROR = 2
EXIT_LOST_WORKER = 3


class ConfigError(ValueError):
    """A configuration value that cannot work; the message names where it came from."""


# What a user can fix: reported as one line, without a traceback.
USER_ERRORS = (ConfigError, CorpusError)
# What a collective operation raises when another worker of the cluster is gone.
LOST_WORKER_ERRORS = (tf.errors.UnavailableError, tf.errors.CancelledError)


def fail(error: BaseException | str, status: int = EXIT_USER_ERROR) -> int:
    """Prints `error: ERROR` to stderr and returns `status`, for `main` to return."""
    print(f"error: {error}", file=sys.stderr)
    return status
