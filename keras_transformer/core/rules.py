"""The decoding settings' rules, each written once, in plain Python: every door (the task's
`generate`, the searches, the SavedModel's graph, the LiteRT file, the CTranslate2 runtime,
the programs) calls these, or, in a TensorFlow graph, a tensor form that calls them with
tensor arithmetic (`output_limit(..., minimum=tf.minimum)`) or reads their constants
(`kept_source_tokens`, `BLANK`, `KEEPS_ITS_SOURCE`).

- the source prefix (`with_source_prefix`; `KEEPS_ITS_SOURCE` in the graph) and the checks of
  both prefixes against a vocabulary (`check_source_prefix`, `check_target_prefix`);
- the target prefix into ids (`target_prefix_ids`);
- source cutting: a source keeps `kept_source_tokens(max_length)` tokens, then EOS;
- the output-length limit (`output_limit`, paper 6.1: input length + 50, within max_length);
- the empty-input rule: a source with nothing to translate (`nothing_to_translate`: no
  token but EOS; blank text, `is_blank`, `BLANK` in the graph) is answered "" with score 0;
- the length penalty lp(Y) finished hypotheses are ranked by (`length_penalty`).

Light: the standard library alone (`keras_transformer.core`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence

# A word shaped like a language code: NLLB-200's ("spa_Latn", any case), M2M100's ("__es__")
# and multilingual OPUS-MT's (">>spa<<"). RE2 and Python read it alike (the SavedModel's
# per-request check runs it in the graph).
_CODE = r"[a-z]{2,3}_[a-z]{4}|__[a-z]{2,3}__|>>[a-z_]{2,12}<<"
LANGUAGE_CODE = rf"(?i){_CODE}"

# Whitespace as Python's `str.split` reads it, written for RE2 (which reads \s as ASCII's).
_SPACE = r"[\s\x0b\x1c-\x1f\x85\p{Z}]"
# In RE2, for the graph's `tf.strings.regex_full_match`: a source that `with_source_prefix`
# leaves as it is, blank or starting with a language code (a word of its own).
KEEPS_ITS_SOURCE = rf"(?is){_SPACE}*(?:(?:{_CODE})(?:{_SPACE}.*)?)?"
# In RE2: a blank source (nothing to translate: every door answers "" for it).
BLANK = rf"{_SPACE}*"


def language_codes(tokenizer) -> list[str]:
    """The language codes of a target tokenizer's vocabulary (NLLB-200's), [] for one that
    has none (a model trained here, an OPUS-MT model)."""
    return list(getattr(tokenizer, "language_codes", None) or [])


def check_target_prefix(prefix: str | None, tokenizer, where: str = "target_prefix") -> None:
    """Refuses a target prefix whose words include something shaped like a language code
    (`LANGUAGE_CODE`) that is not one of the vocabulary's codes: the searches would force its
    pieces as text ("xxx_Zzzz" comes out as "xxxZzzz ..."). Other text (a forced start, "Y
    dijo") passes. ValueError naming `where`, the word, and the codes it could have meant."""
    if prefix is None:
        return
    codes = language_codes(tokenizer)
    for word in prefix.split():
        if word in codes or not re.fullmatch(LANGUAGE_CODE, word):
            continue
        if word.startswith(">>") and not codes:
            raise ValueError(
                f"{where}={prefix!r}: {word!r} is a multilingual OPUS-MT language token; it "
                "goes at the start of the source text, not the target's"
            )
        if not codes:
            raise ValueError(
                f"{where}={prefix!r}: {word!r} looks like a language code, and this model's "
                "vocabulary has none (it translates into one language): leave the target "
                "prefix unset"
            )
        raise _not_a_code(where, prefix, word, codes, "language codes")


def with_source_prefix(text: str, prefix: str | None) -> str:
    """`text` with the source prefix (`DecodingSettings.source_prefix`) in front, one space
    between, as every door writes it before tokenizing: a source that already starts with a
    language code (`LANGUAGE_CODE`, a word of its own) keeps its own, and a blank one stays
    blank. In the graph, `KEEPS_ITS_SOURCE` says which sources are left as they are.

    Examples:
        >>> from keras_transformer.core.rules import with_source_prefix
        >>> with_source_prefix("Hello", "eng_Latn")
        'eng_Latn Hello'
        >>> with_source_prefix("fra_Latn Salut", "eng_Latn")
        'fra_Latn Salut'
        >>> with_source_prefix("  ", ">>spa<<"), with_source_prefix("Hello", None)
        ('  ', 'Hello')
    """
    words = text.split(maxsplit=1)
    if prefix is None or not words or re.fullmatch(LANGUAGE_CODE, words[0]):
        return text
    return f"{prefix} {text}"


def check_source_prefix(prefix: str | None, tokenizer, where: str = "source_prefix") -> None:
    """Refuses a source prefix that the source vocabulary would cut into pieces as text: a
    word shaped like a language code (`LANGUAGE_CODE`) that is neither one of its language
    codes (NLLB-200's) nor one of its pieces (a multilingual OPUS-MT model's ">>spa<<").
    ValueError naming `where`, the word, and the codes it could have meant."""
    if prefix is None:
        return
    codes = language_codes(tokenizer)
    for word in prefix.split():
        if word in codes or not re.fullmatch(LANGUAGE_CODE, word):
            continue
        if word.startswith(">>") and _is_piece(tokenizer, word):
            continue
        known = codes or [
            piece for piece in _pieces(tokenizer) if re.fullmatch(LANGUAGE_CODE, piece)
        ]
        if not known:
            raise ValueError(
                f"{where}={prefix!r}: {word!r} looks like a language code, and this model's "
                "source vocabulary has none (it reads one language): leave the source "
                "prefix unset"
            )
        raise _not_a_code(where, prefix, word, known, "source language codes")


def _not_a_code(where: str, prefix: str, word: str, codes: list[str], what: str) -> ValueError:
    """The error for a prefix word that is none of `codes`, with the one it could mean."""
    close = difflib.get_close_matches(word, codes, n=1, cutoff=0.6)
    close += [code for code in codes if code.lower() == word.lower()]
    hint = f"; did you mean {close[-1]!r}?" if close else ""
    listed = f"{', '.join(codes[:6])}{', ...' if len(codes) > 6 else ''}"
    return ValueError(
        f"{where}={prefix!r}: {word!r} is not one of this model's {len(codes)} {what} "
        f"({listed}){hint}"
    )


def _pieces(tokenizer) -> list[str]:
    try:
        return list(tokenizer.get_vocabulary())
    except (AttributeError, NotImplementedError):
        return []


def _is_piece(tokenizer, word: str) -> bool:
    try:
        return tokenizer.token_to_id(word) not in (None, 1)  # 1: <unk>
    except (AttributeError, KeyError, ValueError):
        return False


def target_prefix_ids(prefix: str, tokenize: Callable[[str], Sequence]) -> Sequence:
    """The target prefix's tokens (ids or pieces, as `tokenize` gives them), which the
    searches force as the first outputs. ValueError when the text has no tokens."""
    tokens = tokenize(prefix)
    if not len(tokens):
        raise ValueError(f"target_prefix={prefix!r} has no tokens")
    return tokens


def kept_source_tokens(max_length: int) -> int:
    """Tokens a source keeps, before its EOS: a longer one is cut there (`max_length - 1`),
    so that it fits the model's `max_length` with EOS."""
    return max_length - 1


def output_limit(source_tokens, max_extra_length: int, max_length: int, minimum=min):
    """The most output tokens (EOS included) of a sentence of `source_tokens` tokens (EOS
    included): `max_extra_length` more than its input (paper 6.1: "input length + 50"),
    within `max_length`. `minimum` is `min`, or a tensor library's (`ops.minimum`) for
    tensors of lengths.

    Examples:
        >>> from keras_transformer.core.rules import output_limit
        >>> output_limit(7, 50, 256), output_limit(250, 50, 256)
        (57, 256)
    """
    return minimum(source_tokens + max_extra_length, max_length)


def nothing_to_translate(source_tokens):
    """Whether a source of `source_tokens` tokens (EOS included; a number or a tensor of
    them) has nothing to translate: every door answers it "" with score 0."""
    return source_tokens <= 1


def is_blank(text: str) -> bool:
    """Whether `text` is blank (whitespace alone, as `str.split` reads it; `BLANK` in the
    graph): nothing to translate, whatever pieces a tokenizer makes of it."""
    return not text.split()


def length_penalty(length, alpha: float, ranking: str = "gnmt"):
    """lp(Y) of a hypothesis of `length` tokens (EOS and forced prefix tokens included; a
    number or a float tensor): "gnmt", ((5 + |Y|) / 6) ** alpha (Wu et al., 2016, section
    7), or "length", |Y| ** alpha (CTranslate2's and transformers'). Hypotheses are ranked
    by logP(Y) / lp(Y).

    Examples:
        >>> from keras_transformer.core.rules import length_penalty
        >>> length_penalty(7, 0.6), length_penalty(4, 0.5, "length")  # 2 ** 0.6, 4 ** 0.5
        (1.515716566510398, 2.0)
    """
    if ranking == "length":
        return length**alpha
    return ((5.0 + length) / 6.0) ** alpha


__all__ = [
    "BLANK",
    "KEEPS_ITS_SOURCE",
    "LANGUAGE_CODE",
    "check_source_prefix",
    "check_target_prefix",
    "is_blank",
    "kept_source_tokens",
    "language_codes",
    "length_penalty",
    "nothing_to_translate",
    "output_limit",
    "target_prefix_ids",
    "with_source_prefix",
]
