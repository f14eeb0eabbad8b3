"""NLLB-200's tokenizer files (transformers' `NllbTokenizer`), read into the `Vocabulary` of an
M2M100 checkpoint: `sentencepiece.bpe.model` cuts the text, and its pieces take fairseq's ids:
<s> 0, <pad> 1, </s> 2, <unk> 3, then SentencePiece's piece j as id j + 1 ("fairseq's
offset"); the language codes, <mask> and the other added tokens take the ids that
`tokenizer.json` (or `tokenizer_config.json`'s `added_tokens_decoder`) gives them.
`kt.pretrained.m2m100` reads the rest of the checkpoint; `m2m100_vocab` reads M2M100's own
tokenizer into the same `Vocabulary`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from keras_transformer.pretrained import bart_checkpoint
from keras_transformer.tokenizers.nllb import NllbTokenizer

SENTENCEPIECE = "sentencepiece.bpe.model"
# fairseq's first four ids, before the SentencePiece model's pieces (its id + FAIRSEQ_OFFSET).
FAIRSEQ_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")
FAIRSEQ_OFFSET = 1
TOKENIZER_CLASSES = ("NllbTokenizer", "NllbTokenizerFast")


@dataclasses.dataclass(frozen=True)
class Vocabulary:
    """An M2M100 checkpoint's tokens in its own ids.

    Attributes:
        proto: the SentencePiece model's bytes.
        names: the token of each embedding row (`names[i]` is row i).
        added: the special tokens found in the text (language codes, <mask>...): name -> id.
        language_codes: the language codes, in the tokenizer's order.
        lstrip: the added tokens that take the whitespace before them.
        rstrip: those that take the whitespace after them.
        tokenizer_class: this library's tokenizer of these rules (`NllbTokenizer`, or
            `M2M100Tokenizer` for M2M100's own).
    """

    proto: bytes
    names: list
    added: dict
    language_codes: list
    lstrip: list
    rstrip: list
    tokenizer_class: type = NllbTokenizer


def sentencepiece_model(path: Path, error):
    """`(bytes, SentencePieceProcessor)` of a SentencePiece model file; `error` when it is
    missing or not one."""
    import sentencepiece

    if not path.exists():
        raise error(f"{path.parent}: missing {path.name} (the SentencePiece model)")
    proto = path.read_bytes()
    try:
        return proto, sentencepiece.SentencePieceProcessor(model_proto=proto)
    except (RuntimeError, OSError) as problem:
        raise error(f"{path}: not a SentencePiece model ({problem})") from None


def read_vocabulary(path: Path, tokenizer_config: dict, rows: int, error) -> Vocabulary:
    """The tokens of the checkpoint's `rows` embedding rows, from its SentencePiece model
    (with fairseq's offset) and its added tokens (tokenizer.json, else tokenizer_config.json's
    `added_tokens_decoder`); `error` names what does not fit."""
    proto, processor = sentencepiece_model(path / SENTENCEPIECE, error)
    size = processor.get_piece_size()
    if not (
        size > 3 and processor.is_unknown(0) and processor.is_control(1) and processor.is_control(2)
    ):
        raise error(
            f"{path / SENTENCEPIECE}: ids 0, 1, 2 must be <unk>, <s>, </s>, as fairseq's "
            "offset assumes"
        )
    added = _added_tokens(path, tokenizer_config, error)
    names = [*FAIRSEQ_SPECIALS]
    names += [processor.id_to_piece(i) for i in range(3, size)]  # ids 4 .. size
    for token, (i, _, _) in added.items():
        if i < len(FAIRSEQ_SPECIALS):
            if names[i] != token:
                raise error(
                    f"{path}: the tokenizer gives {token!r} the id {i}, fairseq's {names[i]!r}"
                )
        elif i < len(names):
            raise error(
                f"{path}: the tokenizer gives {token!r} the id {i}, which is the SentencePiece "
                f"piece {names[i]!r} (fairseq's offset: piece j is id j + {FAIRSEQ_OFFSET})"
            )
    ids = [i for i, _, _ in added.values()]
    top = max([len(names) - 1, *ids])
    if top >= rows:
        raise error(
            f"{path}: the tokenizer has ids up to {top}, but config.json's vocab_size={rows} rows"
        )
    by_id = {i: token for token, (i, _, _) in added.items()}
    names += [by_id.get(i, f"<extra_row_{i}>") for i in range(len(names), rows)]
    _check_tokenizer_vocab(path, names, error)
    codes = tokenizer_config.get("extra_special_tokens") or tokenizer_config.get(
        "additional_special_tokens"
    )
    if not isinstance(codes, list) or not all(isinstance(code, str) for code in codes):
        mask = tokenizer_config.get("mask_token", "<mask>")
        codes = [t for t in added if t not in FAIRSEQ_SPECIALS and t != mask]
    missing = [code for code in codes if code not in added]
    if missing:
        raise error(f"{path}: the language code {missing[0]!r} has no id in the tokenizer")
    return Vocabulary(
        proto=proto,
        names=names,
        added={token: i for token, (i, _, _) in added.items()},
        language_codes=list(codes),
        lstrip=[token for token, (_, lstrip, _) in added.items() if lstrip],
        rstrip=[token for token, (_, _, rstrip) in added.items() if rstrip],
    )


def added_tokens(entries, where, error) -> dict:
    """token -> (id, lstrip, rstrip) of transformers' added-token entries (`content`, `id`,
    `lstrip`, `rstrip`); `error` names an entry without content and id."""
    added = {}
    for entry in entries:
        try:
            token, i = str(entry["content"]), int(entry["id"])
        except (KeyError, TypeError, ValueError):
            raise error(f"{where}: an added token without content and id: {entry}") from None
        added[token] = (i, bool(entry.get("lstrip")), bool(entry.get("rstrip")))
    return added


def _added_tokens(path: Path, tokenizer_config: dict, error) -> dict:
    """The added tokens of tokenizer.json, else of tokenizer_config.json (`added_tokens`)."""
    entries = []
    if (path / "tokenizer.json").exists():
        tokenizer = bart_checkpoint.read_json(path / "tokenizer.json", error, unique_keys=False)
        entries = tokenizer.get("added_tokens") or []
        where = path / "tokenizer.json"
    if not entries:
        decoder = tokenizer_config.get("added_tokens_decoder") or {}
        entries = [{**value, "id": key} for key, value in decoder.items()]
        where = path / "tokenizer_config.json"
    if not entries:
        raise error(
            f"{path}: no added tokens (the language codes' ids): tokenizer.json or "
            "tokenizer_config.json with added_tokens_decoder is needed"
        )
    return added_tokens(entries, where, error)


def _check_tokenizer_vocab(path: Path, names: list, error) -> None:
    """tokenizer.json's own numbering of the pieces, where it has one, must be fairseq's
    offset over the SentencePiece model: another numbering would garble every id."""
    if not (path / "tokenizer.json").exists():
        return
    tokenizer = bart_checkpoint.read_json(path / "tokenizer.json", error, unique_keys=False)
    vocab = (tokenizer.get("model") or {}).get("vocab")
    if not isinstance(vocab, dict):
        return
    for token, i in vocab.items():
        if not isinstance(i, int) or not 0 <= i < len(names) or names[i] != token:
            found = names[i] if isinstance(i, int) and 0 <= i < len(names) else None
            raise error(
                f"{path / 'tokenizer.json'}: {token!r} has the id {i}, but {SENTENCEPIECE} with "
                f"fairseq's offset gives that id to {found!r}"
            )


__all__ = ["Vocabulary", "read_vocabulary"]
