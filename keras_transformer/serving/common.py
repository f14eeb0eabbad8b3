"""What the translators of the exported directories share: `Hypothesis`, the check of the
sentences they are given (`lines_of`, `text_of`: `TransformerSeq2SeqLM.generate`'s too), the
prefixes' rules, `ExportedVocabulary`, the view of an export's vocabulary they check prefixes
against, and `read_manifest`, the reader of an export's manifest (`keras_transformer._manifest`).

The source prefix is put in front of each sentence by `with_source_prefix` and the prefixes
are checked by `check_source_prefix` and `check_target_prefix`, all three
`keras_transformer.core.rules`' own: one rule for every door.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

# The one reader of an export's manifest.json: a damaged one is named, with what is wrong.
from keras_transformer._manifest import read_manifest
from keras_transformer.core.rules import (
    LANGUAGE_CODE,
    check_source_prefix,
    check_target_prefix,
    with_source_prefix,
)
from keras_transformer.core.special_ids import UNK_ID


class Hypothesis(NamedTuple):
    """One translation: target ids (EOS excluded; empty where the translator sees only
    text, a SavedModel's), its text and its score."""

    ids: list[int]
    text: str
    score: float


class ExportedVocabulary:
    """An exported model's vocabulary as the prefix checks read it (`check_source_prefix`,
    `check_target_prefix` take it as they take a tokenizer): its pieces by id and its
    language codes, read from the export's files.

    Args:
        pieces: sequence of str. The pieces, by id.
        language_codes: sequence of str. The special tokens that name a language
            (NLLB-200's "spa_Latn", M2M100's "__es__"); empty for a vocabulary without
            them. Defaults to ().

    Examples:
        >>> from keras_transformer.serving import ExportedVocabulary
        >>> vocabulary = ExportedVocabulary(["<pad>", "<unk>", "<s>", "</s>", ">>spa<<"])
        >>> vocabulary.token_to_id(">>spa<<"), vocabulary.token_to_id(">>fra<<")
        (4, 1)
    """

    def __init__(self, pieces: Sequence[str], language_codes: Sequence[str] = ()):
        self.pieces = list(pieces)
        self.language_codes = list(language_codes)
        self._ids = {}
        for i, piece in enumerate(self.pieces):
            self._ids.setdefault(piece, i)

    def get_vocabulary(self) -> list[str]:
        return self.pieces

    def token_to_id(self, token: str) -> int:
        """The piece's id; the unknown token's (1) for one the vocabulary lacks."""
        return self._ids.get(token, UNK_ID)


def check_prefixes(
    source: ExportedVocabulary,
    target: ExportedVocabulary,
    source_prefix: str | None = None,
    target_prefix: str | None = None,
    *,
    names: tuple[str, str] = ("source_prefix", "target_prefix"),
) -> None:
    """Refuses prefixes that name a language the vocabularies lack (`check_source_prefix`,
    `check_target_prefix`): ValueError naming the prefix by `names` (a program's flags),
    the word, and the codes it could have meant. None passes."""
    for name, prefix in zip(names, (source_prefix, target_prefix), strict=True):
        if prefix is not None and (not isinstance(prefix, str) or not prefix.strip()):
            raise ValueError(f"{name}={prefix!r} must be None or a non-blank string")
    check_source_prefix(source_prefix, source, where=names[0])
    check_target_prefix(target_prefix, target, where=names[1])


def text_of(value, where: str = "inputs", *, decode: bool = True) -> str | bytes:
    """One sentence, as every door checks it (`TransformerSeq2SeqLM.generate` and the
    translators): a str, or bytes, decoded from UTF-8 with `decode` (bytes that are not are
    refused) or else kept as they are (a translator hands them on: its model reads a byte
    that is not UTF-8 as U+FFFD). Anything else (None, a number, a list) is refused: it would
    be translated as its repr, or fail deep inside a runtime.

    Raises:
        ValueError: naming `where` ("inputs[1]") and the value.

    Examples:
        >>> from keras_transformer.serving.common import text_of
        >>> text_of("Amén.".encode()), text_of("Amén.".encode("latin-1"), decode=False)
        ('Amén.', b'Am\\xe9n.')
        >>> text_of(None, "lines[0]")
        Traceback (most recent call last):
        ValueError: lines[0]=None: expected text (str), got NoneType
    """
    if isinstance(value, bytes):
        if not decode:
            return value
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(f"{where}: bytes that are not UTF-8 ({error})") from None
    if not isinstance(value, str):
        raise ValueError(f"{where}={value!r}: expected text (str), got {type(value).__name__}")
    return value


def lines_of(
    sentences, name: str = "sentences", *, decode: bool = False, takes: str = "a list of str"
) -> list:
    """`sentences`, a list (or another iterable) of sentences, as a list, each one checked by
    `text_of` (named `name[i]`, decoded with `decode`).

    Raises:
        ValueError: naming `name` for one str or bytes (which would be read as a sequence of
            one-character sentences), or for what is no sequence (None, a number), saying
            what the caller `takes`.
    """
    if isinstance(sentences, (str, bytes)):
        raise ValueError(f"{name}: give a list of sentences, not one {type(sentences).__name__}")
    try:
        sentences = list(sentences)
    except TypeError:
        raise ValueError(
            f"{name}={sentences!r}: expected {takes}, got {type(sentences).__name__}"
        ) from None
    return [text_of(s, f"{name}[{i}]", decode=decode) for i, s in enumerate(sentences)]


def prefixed(sentence: str | bytes, prefix: str | None) -> str | bytes:
    """`sentence` with the source prefix in front (`with_source_prefix`); bytes stay bytes,
    undecodable ones kept as they were (the SavedModel reads them as U+FFFD)."""
    if prefix is None:
        return sentence
    if isinstance(sentence, bytes):
        text = with_source_prefix(sentence.decode("utf-8", "surrogateescape"), prefix)
        return text.encode("utf-8", "surrogateescape")
    return with_source_prefix(sentence, prefix)


__all__ = [
    "ExportedVocabulary",
    "Hypothesis",
    "check_prefixes",
    "LANGUAGE_CODE",
    "UNK_ID",
    "check_source_prefix",
    "check_target_prefix",
    "with_source_prefix",
    "lines_of",
    "prefixed",
    "read_manifest",
    "text_of",
]
