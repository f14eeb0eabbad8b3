"""A Marian (OPUS-MT) checkpoint's vocabularies, read into this library's tokenizers in its ids
(`marian`'s module doc says how the ids are permuted): `vocab.json` (and `target_vocab.json`
with separate vocabularies) numbers the pieces of `source.spm` and `target.spm`, the
SentencePiece models that cut the text. `vocabulary_order` maps our ids to Marian's, `pieces`
names them, `load_vocabularies` makes the `PieceVocabularyTokenizer`s. `marian_checkpoint`
reads the rest of the directory; `marian` converts the checkpoint.
"""

from __future__ import annotations

from pathlib import Path

from keras_transformer.pretrained.marian_checkpoint import (
    MarianError,
    number,
    read_json,
    table_rows,
)
from keras_transformer.text import BOS_ID, EOS_ID, UNK_ID
from keras_transformer.tokenizers.pieces import SPECIAL_PIECES, PieceVocabularyTokenizer

# transformers' MarianTokenizer keeps a leading ">>xx<<" (a multilingual model's target
# language) as one token; the rest goes to SentencePiece.
LANGUAGE_TOKEN = ">>.*?<<"
# Strings that transformers' MarianTokenizer reads as one special token wherever they are in
# the text, and our ids for them: its pad is a real token in an input (its start row, our
# <s>), never our padding id.
SPECIAL_TOKENS = {"</s>": EOS_ID, "<unk>": UNK_ID, "<pad>": BOS_ID}
# The piece of an embedding row beyond the vocabulary file's ids: SentencePiece never yields the
# empty string, and joined into a text it adds nothing (transformers 4 decodes the row as <unk>,
# which skip_special_tokens drops).
EXTRA_PIECE = ""


def vocabulary_order(
    vocab: dict, config: dict | None = None, where: str = "vocab.json", rows: int | None = None
) -> list[int]:
    """`order[i]` is the Marian id of our id i: pad, unk, bos (the decoder start), eos, then
    the other pieces in Marian's order. Marian's start row appears twice (pad and bos).
    `rows`, the rows of the side's embedding table (`table_rows`), may be one more than the
    vocabulary's ids: that row, which no piece names, comes last.

    The special pieces are the vocabulary's own `<pad>`, `<unk>` and `</s>`, as transformers'
    `MarianTokenizer` reads them (a source vocabulary of its own may place them elsewhere than
    the target's). `config`, given for the target side, must agree where it sets them: the
    decoder starts with `<pad>` (pad_token_id, decoder_start_token_id) and ends with `</s>`
    (eos_token_id)."""
    owners: dict = {}
    for piece, i in vocab.items():
        if isinstance(i, bool) or not isinstance(i, int):
            raise MarianError(f"{where}: {piece!r} has the id {i!r}, not an integer")
        owners.setdefault(i, []).append(piece)
    for i, names in owners.items():
        if len(names) > 1:
            raise MarianError(f"{where}: {names[0]!r} and {names[1]!r} have the same id {i}")
    size = len(vocab)
    outside = sorted(i for i in owners if not 0 <= i < size)
    if outside:
        raise MarianError(
            f"{where}: the ids of its {size} pieces must be 0..{size - 1}; "
            f"{owners[outside[0]][0]!r} has {outside[0]}"
        )
    for piece in ("<pad>", "<unk>", "</s>"):
        if piece not in vocab:
            raise MarianError(f"{where}: no {piece} piece")
    pad, unk, eos = vocab["<pad>"], vocab["<unk>"], vocab["</s>"]
    if len({pad, unk, eos}) < 3:
        raise MarianError(f"{where}: <pad>, <unk> and </s> must have three different ids")
    checks = (
        ("pad_token_id", "<pad>"),
        ("decoder_start_token_id", "<pad>"),
        ("eos_token_id", "</s>"),
    )
    for key, piece in checks if config is not None else ():
        if config.get(key) is not None and number(config, key) != vocab[piece]:
            raise MarianError(
                f"config.json: {key}={config[key]}, but {where} gives {piece} the id "
                f"{vocab[piece]}; only Marian's own convention (the decoder starts with <pad> "
                "and ends with </s>) is supported"
            )
    extra = []
    if rows is not None and rows != size:
        if rows != size + 1:
            raise MarianError(
                f"{where}: its {size} ids do not fit the {rows} rows config.json gives its "
                "embedding table (the import takes as many rows as ids, or one more)"
            )
        extra = [size]  # the row beyond the vocabulary: no piece, still in the softmax
    return [pad, unk, pad, eos] + [i for i in range(size) if i not in {pad, unk, eos}] + extra


def pieces(vocab: dict, order: list[int]) -> list[str]:
    """The pieces of our ids, in our order: the special ones under this library's names, and
    `EXTRA_PIECE` for a table row beyond the vocabulary."""
    by_id = {int(i): piece for piece, i in vocab.items()}
    return [*SPECIAL_PIECES, *(by_id.get(i, EXTRA_PIECE) for i in order[len(SPECIAL_PIECES) :])]


def load_vocabularies(directory):
    """The source and target tokenizers of a checkpoint directory, in our ids:
    `keras_transformer.text.Vocabularies` (which an imported model's vocab/ saves as
    source.spm, target.spm and pieces.json)."""
    return _vocabularies(Path(directory))[0]


def _orders(directory: Path) -> list[tuple[dict, list[int]]]:
    """`(vocab, order)` of the source side, then the target's: each vocabulary file read once
    and numbered in our ids (`vocabulary_order`). The target side has its own
    `target_vocab.json` when the checkpoint has one (separate vocabularies), else shares
    `vocab.json`."""
    config = read_json(directory / "config.json") if (directory / "config.json").exists() else {}
    rows = table_rows(config, str(directory / "config.json")) if config else (None, None)
    target_file = directory / "target_vocab.json"
    files = (directory / "vocab.json", target_file if target_file.exists() else None)
    sides = []
    for file, side_config, side_rows in zip(files, (None, config), rows, strict=True):
        file = file or directory / "vocab.json"
        vocab = read_json(file)
        sides.append((vocab, vocabulary_order(vocab, side_config, str(file), side_rows)))
    return sides


def _vocabularies(directory: Path):
    """(Vocabularies, source order, target order) of a checkpoint directory."""
    from keras_transformer.text import Vocabularies

    target_file = directory / "target_vocab.json"
    files = (directory / "vocab.json", target_file if target_file.exists() else None)
    sides = []
    for spm, file, (vocab, order) in zip(
        ("source.spm", "target.spm"), files, _orders(directory), strict=True
    ):
        proto = _sentencepiece_model(directory / spm)
        try:
            tokenizer = PieceVocabularyTokenizer(
                proto,
                pieces(vocab, order),
                prefix_pattern=LANGUAGE_TOKEN,
                special_tokens=SPECIAL_TOKENS,
            )
        except ValueError as error:  # a piece named as one of this library's special ones
            file = file or directory / "vocab.json"
            raise MarianError(f"{file}: {error} (in this library's ids)") from None
        sides.append((tokenizer, order))
    (source, source_order), (target, target_order) = sides
    return Vocabularies(source, target), source_order, target_order


def _sentencepiece_model(path: Path) -> bytes:
    """The bytes of a SentencePiece model file; `MarianError` when they are not one."""
    import sentencepiece

    proto = path.read_bytes()
    try:
        sentencepiece.SentencePieceProcessor(model_proto=proto)
    except (RuntimeError, OSError) as error:
        raise MarianError(f"{path}: not a SentencePiece model ({error})") from None
    return proto


__all__ = [
    "EXTRA_PIECE",
    "LANGUAGE_TOKEN",
    "SPECIAL_TOKENS",
    "load_vocabularies",
    "pieces",
    "vocabulary_order",
]
