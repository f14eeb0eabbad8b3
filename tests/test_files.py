"""Crash-safe writing: a file or directory is complete under its name or absent, a failed
write leaves nothing behind, and stale temporaries are found by their names."""

import os

import pytest

from keras_transformer._files import (
    atomic_directory,
    atomic_write,
    is_temporary,
    remove_temporaries,
    temporary_path,
)


def test_the_temporary_name_is_hidden_and_keeps_the_suffix(tmp_path):
    temporary = temporary_path(tmp_path / "ckpt-00001.weights.h5")
    assert temporary == tmp_path / f".tmp-{os.getpid()}-ckpt-00001.weights.h5"
    assert is_temporary(temporary) and not is_temporary(tmp_path / "ckpt-00001.weights.h5")


def test_text_bytes_and_writers(tmp_path):
    assert atomic_write(tmp_path / "a.txt", "añ\n") == tmp_path / "a.txt"
    atomic_write(tmp_path / "b.bin", b"\x00\xff")
    seen = []

    def writer(path):
        seen.append(path)
        path.write_text("from a writer")

    atomic_write(str(tmp_path / "c.keras"), writer)
    assert (tmp_path / "a.txt").read_bytes() == "añ\n".encode()
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\xff"
    assert (tmp_path / "c.keras").read_text() == "from a writer"
    assert seen == [temporary_path(tmp_path / "c.keras")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.bin", "c.keras"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "model.keras"
    atomic_write(path, "old")

    def full_disk(temporary):
        temporary.write_text("half a mod")
        raise OSError("No space left on device")

    with pytest.raises(OSError, match="No space left"):
        atomic_write(path, full_disk)
    with pytest.raises(FileNotFoundError):
        atomic_write(path, lambda temporary: None)  # a writer that wrote nothing
    assert path.read_text() == "old"
    assert list(tmp_path.iterdir()) == [path]


def test_a_directory_appears_complete_or_not_at_all(tmp_path):
    final = tmp_path / "1"
    with atomic_directory(final) as temporary:
        assert not temporary.exists() and is_temporary(temporary)
        temporary.mkdir()
        (temporary / "saved_model.pb").write_bytes(b"graph")
        assert not final.exists()
    assert (final / "saved_model.pb").read_bytes() == b"graph"

    with pytest.raises(OSError, match="No space left"):
        with atomic_directory(tmp_path / "2") as temporary:
            temporary.mkdir()
            (temporary / "saved_model.pb").write_bytes(b"gra")
            raise OSError("No space left on device")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1"]


def test_an_existing_directory_is_never_replaced(tmp_path):
    final = tmp_path / "1"
    final.mkdir()
    (final / "keep").write_text("earlier version")
    with pytest.raises(FileExistsError, match="is never replaced"):
        with atomic_directory(final):
            pass
    with pytest.raises(FileExistsError, match="appeared while it was written"):
        with atomic_directory(tmp_path / "2") as temporary:
            temporary.mkdir()
            (tmp_path / "2").mkdir()  # another writer got there first
    assert (final / "keep").read_text() == "earlier version"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1", "2"]


def test_an_existing_file_is_kept_when_it_may_not_be_replaced(tmp_path):
    """`replace=False` (trainers.average_checkpoints without --overwrite): an existing file is
    kept, whether it was there before the write or appeared while it was written."""
    path = tmp_path / "model.averaged.keras"
    path.write_text("saved before")
    with pytest.raises(FileExistsError, match="model.averaged.keras exists; it is never repla"):
        atomic_write(path, "new", replace=False)

    def another_writer(temporary):
        temporary.write_text("new")
        (tmp_path / "mine.keras").write_text("another writer's")

    with pytest.raises(FileExistsError, match="appeared while it was written"):
        atomic_write(tmp_path / "mine.keras", another_writer, replace=False)
    assert path.read_text() == "saved before"
    assert (tmp_path / "mine.keras").read_text() == "another writer's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.keras", path.name]
    atomic_write(tmp_path / "new.keras", "new", replace=False)  # a new name is written
    assert (tmp_path / "new.keras").read_text() == "new"


def test_stale_temporaries_are_removed(tmp_path):
    (tmp_path / ".tmp-99999-ckpt-00003.weights.h5").write_bytes(b"torn")
    (tmp_path / ".tmp-99999-2").mkdir()
    (tmp_path / ".tmp-99999-2" / "saved_model.pb").write_bytes(b"torn")
    (tmp_path / "ckpt-00002.weights.h5").write_bytes(b"whole")
    (tmp_path / ".hidden").write_text("not ours")
    removed = remove_temporaries(tmp_path)
    assert [p.name for p in removed] == [".tmp-99999-2", ".tmp-99999-ckpt-00003.weights.h5"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".hidden", "ckpt-00002.weights.h5"]


def test_a_keras_file_saved_through_disk_is_kerass_own(tmp_path):
    """`save_keras_file` (the weights written to disk, then zipped) makes the archive that
    `model.save` makes, under the same names, and it loads to the same model."""
    import zipfile

    import keras
    import numpy as np

    import keras_transformer as kt
    from keras_transformer._files import save_keras_file

    model = kt.build_transformer(kt.TransformerConfig.preset("tiny", vocab_size=50))
    model.save(tmp_path / "keras.keras")
    save_keras_file(model, tmp_path / "ours.keras")
    ours, theirs = (zipfile.ZipFile(tmp_path / n) for n in ("ours.keras", "keras.keras"))
    assert sorted(ours.namelist()) == sorted(theirs.namelist())
    assert ours.read("config.json") == theirs.read("config.json")
    assert {i.compress_type for i in ours.infolist()} == {zipfile.ZIP_STORED}
    loaded = keras.saving.load_model(tmp_path / "ours.keras")
    for mine, saved in zip(model.weights, loaded.weights, strict=True):
        np.testing.assert_array_equal(mine, saved)
    assert not [p for p in tmp_path.iterdir() if is_temporary(p)]  # the folder is gone


def test_a_directory_replaces_an_existing_one_only_once_complete(tmp_path):
    """`replace=True` (an export with overwrite): the old directory stays while the new one is
    written and when its writing fails, and is gone once the new one is in its place."""
    final = tmp_path / "export"
    final.mkdir()
    (final / "old").write_text("earlier export")
    with pytest.raises(OSError, match="No space left"):
        with atomic_directory(final, replace=True) as temporary:
            temporary.mkdir()
            raise OSError("No space left on device")
    assert [p.name for p in final.iterdir()] == ["old"]
    with atomic_directory(final, replace=True) as temporary:
        temporary.mkdir()
        (temporary / "new").write_text("new export")
        assert (final / "old").exists()
    assert [p.name for p in final.iterdir()] == ["new"]
    assert [p.name for p in tmp_path.iterdir()] == ["export"]  # no temporary, no old copy
