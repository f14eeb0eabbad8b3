"""What code produced a result: the git commit of this checkout and the package versions.

Recorded in `train_summary.json` and in each evaluation's JSON, so that a figure can be
traced to the code and the libraries that made it (and a stale one recognised).
"""

from __future__ import annotations

import subprocess
from importlib import metadata
from pathlib import Path

PACKAGES = (
    "keras-transformer",
    "tensorflow",
    "tensorflow-text",
    "keras",
    "keras-hub",
    "sentencepiece",
    "sacrebleu",
    "numpy",
)
SOURCE = Path(__file__).resolve().parent.parent
CODE = ("keras_transformer", "trainers")  # folders of SOURCE whose new files make it dirty


def provenance() -> dict:
    """`{"git": {"commit", "dirty"} or None, "packages": {name: version or None}}`.

    `git` is None when the code does not run from a git checkout (an installed wheel);
    `dirty` says whether the code differs from the commit: a tracked file changed, or a file
    not yet added to git in the packages that run (`CODE`: a new module). Other untracked
    files (notes, corpora) and ignored ones (runs, virtualenvs) do not count.
    """
    return {"git": _git(), "packages": {name: _version(name) for name in PACKAGES}}


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _git() -> dict | None:
    def git(*args) -> str:
        return subprocess.run(
            ["git", "-C", str(SOURCE), *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no")
        new = git("ls-files", "--others", "--exclude-standard", "--", *CODE)
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": bool(changed or new)}
