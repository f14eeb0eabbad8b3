"""`keras_transformer._manifest.read_manifest`, the one reader of a `manifest.json`: what is
wrong with a damaged one is said with the file's path (issue 66). The doors that read one:
tests/test_serving.py (the translators and `trainers.translate`), tests/test_text.py (a
vocabulary directory)."""

import json
import re

import pytest

from keras_transformer._manifest import read_manifest


@pytest.mark.parametrize(
    "content, message",
    [
        (b"{x", "not valid JSON (Expecting property name enclosed in double quotes: line 1 "),
        (b"", "not valid JSON (Expecting value: line 1 column 1)"),
        (b'{"a": 1}\n{"b": 2}', "not valid JSON (Extra data: line 2 column 1)"),
        (b"[1, 2]", "not a manifest: a JSON array, not an object"),
        (b"\xff\xfe{}", "not UTF-8 text (invalid start byte at byte 0)"),
        (b'{"format": "litert"}', "no 'decoding' entry in it"),
        (b'{"format": "litert", "decoding": null}', "its 'decoding' entry is a JSON null, not an"),
        (b'{"format": "litert", "decoding": {"beam_size": 4}}', "no decoding.length_penalty in it"),
    ],
)
def test_a_damaged_manifest_is_named_with_what_is_wrong(tmp_path, content, message):
    path = tmp_path / "manifest.json"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=f"^{re.escape(f'{path}: {message}')}") as refused:
        read_manifest(path, "format", "decoding")
    assert str(refused.value).endswith(
        "export the model again, or restore the file from the export"
    )


def test_a_manifest_is_its_object_and_a_missing_one_is_named(tmp_path):
    path = tmp_path / "manifest.json"
    decoding = {"beam_size": 4, "length_penalty": 0.6, "max_extra_length": 50}
    path.write_text(json.dumps({"format": "litert", "decoding": decoding}), encoding="utf-8")
    assert read_manifest(path, "decoding") == {"format": "litert", "decoding": decoding}
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "missing.json"))):
        read_manifest(tmp_path / "missing.json")
