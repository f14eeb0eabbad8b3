"""Crash-safe writing: a file or a directory appears under its name complete, or not at all.

Everything is first written under a temporary name in the destination's own directory,
`.tmp-PID-NAME`: hidden, recognisable as temporary, and ending as the real name ends, so that
writers that choose a format by suffix (`model.save`, `model.save_weights`, `np.savez`,
matplotlib's `savefig`) accept it. A file is synced to disk and then renamed over the real name
with `os.replace`, which is atomic within one file system: readers see the old file or the new
one, never a half-written one. A failed write removes its temporary; one left by a killed
process is removed by `remove_temporaries`.

    atomic_write(path, "text")                      # str (written as UTF-8) or bytes
    atomic_write(path, lambda p: model.save(p))     # a writer given the temporary path
    with atomic_directory(final) as temporary:      # a directory, renamed once complete
        write_everything_into(temporary)
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

TEMPORARY_PREFIX = ".tmp-"


def sha256(path) -> str:
    """The sha256 of a file's bytes, read in blocks (a checkpoint may not fit in memory)."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def temporary_path(path) -> Path:
    """The temporary name under which `path` is written: `.tmp-PID-NAME` beside it."""
    path = Path(path)
    return path.with_name(f"{TEMPORARY_PREFIX}{os.getpid()}-{path.name}")


def is_temporary(path) -> bool:
    """True for a name that `temporary_path` makes."""
    return Path(path).name.startswith(TEMPORARY_PREFIX)


def atomic_write(
    path, data: bytes | str | Callable[[Path], object], *, replace: bool = True
) -> Path:
    """Writes `path` through a temporary file, an fsync and a rename.

    Args:
        path: str or path. The file to write; its directory must exist. An existing file is
            replaced only once the new one is complete.
        data: bytes, str (encoded as UTF-8), or a callable that writes the file at the path it
            is given (e.g. `model.save`).
        replace: bool. False: an existing `path` is never replaced (as `atomic_directory`).
            Defaults to True.

    Returns:
        `path`, as a `Path`.

    Raises:
        FileExistsError: with `replace=False`, `path` exists, before the write or when it
            ends.
    """
    path = Path(path)
    if not replace and path.exists():
        raise FileExistsError(f"{path} exists; it is never replaced")
    temporary = temporary_path(path)
    try:
        if callable(data):
            data(temporary)
        else:
            temporary.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
        with open(temporary, "rb") as file:
            os.fsync(file.fileno())
        if not replace and path.exists():
            raise FileExistsError(f"{path} appeared while it was written; it is never replaced")
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path


@contextlib.contextmanager
def atomic_directory(path, *, replace: bool = False) -> Iterator[Path]:
    """Builds the directory `path` under a temporary name and renames it when complete.

    Yields the temporary path, which does not exist yet: the caller creates the directory
    there (or has a writer create it) and fills it. When the block ends normally it is renamed
    to `path`; when it raises, it is removed, and an existing `path` stays as it was.

    Args:
        path: str or path. The directory to write; its parent must exist.
        replace: bool. True: an existing `path` (file or folder) is replaced once the new one
            is complete: moved aside, the new one renamed in, then removed (put back if the
            rename fails). False: an existing `path` is never replaced. Defaults to False.

    Raises:
        FileExistsError: with `replace=False`, `path` exists, before the block or when it
            ends.
    """
    path = Path(path)
    if not replace and path.exists():
        raise FileExistsError(f"{path} exists; it is never replaced")
    temporary = temporary_path(path)
    shutil.rmtree(temporary, ignore_errors=True)  # left by a killed process of the same id
    try:
        yield temporary
        if not replace and path.exists():
            raise FileExistsError(f"{path} appeared while it was written; it is never replaced")
        if replace and (path.exists() or path.is_symlink()):
            _swap(temporary, path)
        else:
            os.rename(temporary, path)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise


def _swap(new: Path, path: Path) -> None:
    """Renames `new` to `path`, which exists: the old one moved aside first (put back if
    the rename fails), and removed once the new one is in its place."""
    old = temporary_path(path.with_name(path.name + ".replaced"))
    os.rename(path, old)
    try:
        os.rename(new, path)
    except BaseException:
        os.rename(old, path)
        raise
    if old.is_dir() and not old.is_symlink():
        shutil.rmtree(old)
    else:
        old.unlink()


def save_keras_file(model, path) -> Path:
    """`model.save(path)` for a `.keras` file, without a copy of the weights in memory.

    When Keras judges the memory sufficient it writes a `.keras` file's weights into memory
    first (`saving_lib.is_memory_sufficient`), a second copy of every weight. Here Keras
    writes the unzipped form (`zipped=False`: config.json, metadata.json, model.weights.h5,
    assets/) into a temporary folder beside `path`, and the zip archive takes those files
    from disk under the same names, stored as Keras stores them.
    """
    import zipfile

    import keras

    path = Path(path)
    unzipped = temporary_path(path.with_name(path.stem + "-unzipped"))
    shutil.rmtree(unzipped, ignore_errors=True)  # left by a killed process of the same id
    try:
        keras.saving.save_model(model, unzipped, zipped=False)
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive:
            for file in sorted(unzipped.rglob("*")):
                if file.is_file():
                    archive.write(file, file.relative_to(unzipped).as_posix())
    finally:
        shutil.rmtree(unzipped, ignore_errors=True)
    return path


def remove_temporaries(directory) -> list[Path]:
    """Removes the temporaries that killed writers left in `directory`; returns them.

    Only for a directory that no other process is writing: its temporaries are removed too.
    """
    stale = sorted(Path(directory).glob(TEMPORARY_PREFIX + "*"))
    for path in stale:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    return stale
