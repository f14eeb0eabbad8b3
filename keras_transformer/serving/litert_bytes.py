"""The bytes of a builtin-ops LiteRT file (`kt.export.litert_builtin`): a text's UTF-8 bytes
in a 0-padded int32 row `[1, N]` (B texts in `[B, N]`), and the translation's back to text.
Light (NumPy alone): `LiteRTTranslator` runs such a file with LiteRT's stock interpreter, and
the web page does the same in JavaScript (`kt.export.web`'s index.html).
"""

from __future__ import annotations

BUILTIN = "builtin"  # manifest.json's "ops" of such a file


def is_builtin(manifest: dict) -> bool:
    """Whether an export's manifest is a builtin-ops file's."""
    return manifest.get("ops") == BUILTIN


def input_bytes(manifest: dict) -> int:
    """N, the bytes of the file's input row, from its manifest."""
    return int(manifest["signatures"]["serving_default"]["input_bytes"])


def batch_size(manifest: dict) -> int:
    """B, the texts of one run of the file (its input `[B, N]`), from its manifest: 1 where
    it does not say (a file written before the batch was an option)."""
    return int(manifest["signatures"]["serving_default"].get("batch", 1))


def encoded_rows(texts: list[bytes], width: int, batch: int):
    """Up to `batch` texts -> int32 `[batch, width]`: a row each (`encoded`), rows of zeros
    (empty texts) after them.

    Examples:
        >>> from keras_transformer.serving.litert_bytes import encoded_rows
        >>> encoded_rows([b"ab", b"c"], 3, 3).tolist()
        [[97, 98, 0], [99, 0, 0], [0, 0, 0]]
    """
    import numpy as np

    if len(texts) > batch:
        raise ValueError(f"{len(texts)} texts: the file takes {batch} a run")
    rows = np.zeros((batch, width), np.int32)
    for i, text in enumerate(texts):
        rows[i] = encoded(text, width)[0]
    return rows


def encoded(text: bytes, width: int):
    """UTF-8 bytes -> int32 `[1, width]`, 0-padded; a longer text cut to `width` bytes at a
    character's start (a UTF-8 continuation byte is not a start).

    Examples:
        >>> from keras_transformer.serving.litert_bytes import encoded
        >>> encoded("añb".encode(), 2).tolist()
        [[97, 0]]
    """
    import numpy as np

    text = text.split(b"\0", 1)[0]  # a 0 byte ends the row
    if len(text) > width:
        end = width
        while end > 0 and text[end] & 0xC0 == 0x80:
            end -= 1
        text = text[:end]
    row = np.zeros((1, width), np.int32)
    row[0, : len(text)] = list(text)
    return row


def decoded(row) -> str:
    """int32 bytes `[width]`, 0-padded -> text (invalid UTF-8 as U+FFFD, as SentencePiece
    decodes byte pieces that make none).

    Examples:
        >>> from keras_transformer.serving.litert_bytes import decoded
        >>> decoded([72, 105, 0, 0])
        'Hi'
    """
    data = bytes(int(b) for b in row)
    return data.split(b"\0", 1)[0].decode("utf-8", "replace")


__all__ = [
    "BUILTIN",
    "batch_size",
    "decoded",
    "encoded",
    "encoded_rows",
    "input_bytes",
    "is_builtin",
]
