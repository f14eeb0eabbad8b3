"""`DecodingSettings`: how a model translates, in one object that every entry point takes.

`generate`, `Translator`, both exports and every program decode with the same settings, the
paper's unless told otherwise (section 6.1: "beam search with a beam size of 4 and length
penalty alpha = 0.6 ... maximum output length ... input length + 50, but terminate early when
possible"). A preset stores them (`TransformerSeq2SeqLM.save_to_preset`), and so does a
training run's `experiment.yaml` (its `decoding` section).
"""

from __future__ import annotations

import dataclasses
from typing import Any

FINISH_RULES = ("tensor2tensor", "fairseq")
STOPPING = ("exact", "early", "k_finished")
RANKINGS = ("gnmt", "length")


@dataclasses.dataclass(frozen=True)
class DecodingSettings:
    """Beam search's settings (greedy search with `beam_size=1`), as
    `keras_transformer.decoding.beam_search` takes them.

    Args:
        beam_size: int >= 1. Hypotheses kept per sentence; 1 is greedy search. Defaults to 4
            (paper 6.1).
        length_penalty: float >= 0. alpha, the exponent of the length penalty lp(Y) that
            finished hypotheses are ranked by, logP(Y) / lp(Y) (`ranking` says which lp); 0
            ranks by log-probability alone. Defaults to 0.6 (paper 6.1).
        stopping: str. "early": a sentence stops once its best alive hypothesis could not
            beat its best finished one by ending at the next step (the paper's "terminate
            early when possible", as Marian and transformers' `early_stopping=False`
            stop); "exact": once no alive hypothesis could beat it at any length
            (tensor2tensor's rule, more steps); "k_finished": once `beam_size` hypotheses
            have finished (fairseq's rule, CTranslate2's with a length penalty,
            transformers' `early_stopping=True`). Defaults to "early".
        finish_rule: str. Which EOS extensions join the finished set: "tensor2tensor" (every
            one among the 2k best) or "fairseq" (those among the k best). Defaults to
            "tensor2tensor".
        max_extra_length: int >= 0. An output may be this many tokens longer than its
            input. Defaults to 50 (paper 6.1).
        n_best: int. Hypotheses returned per sentence, best first, from 1 to `beam_size`.
            Defaults to 1.
        target_prefix: str or None. Text that every translation starts with: its tokens
            (the target tokenizer's) are forced as the first outputs, as NLLB-200's target
            language code ("spa_Latn") is, and transformers' `forced_bos_token_id` forces
            it. Defaults to None (nothing forced).
        ranking: str. The length penalty's form: "gnmt", lp(Y) = ((5 + |Y|) / 6) ** alpha
            (Wu et al., 2016, section 7; the paper's code), or "length", lp(Y) = |Y| **
            alpha, as CTranslate2 and transformers rank (their `length_penalty`). In both
            |Y| counts every output token, EOS and forced prefix tokens included, as theirs
            does. Defaults to "gnmt".
        source_prefix: str or None. Text put at the start of every source: NLLB-200's
            source language code ("eng_Latn", where transformers' tokenizer takes
            `src_lang`), or a multilingual OPUS-MT model's target language token (">>spa<<",
            which goes at the start of the source). A source that already starts with a
            language code (`LANGUAGE_CODE`) keeps its own, and a blank one stays blank
            (nothing to translate); see `with_source_prefix`. Defaults to None (sources as
            given).

    Examples:
        >>> from keras_transformer.decoding import DecodingSettings
        >>> DecodingSettings().beam_size, DecodingSettings.preset("greedy").beam_size
        (4, 1)
        >>> DecodingSettings(length_penalty=1.0).replace(beam_size=5).length_penalty
        1.0
    """

    beam_size: int = 4
    length_penalty: float = 0.6
    stopping: str = "early"
    finish_rule: str = "tensor2tensor"
    max_extra_length: int = 50
    n_best: int = 1
    target_prefix: str | None = None
    ranking: str = "gnmt"
    source_prefix: str | None = None

    def __post_init__(self) -> None:
        for name, minimum in (("beam_size", 1), ("max_extra_length", 0), ("n_best", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"{name}={value!r} must be an integer >= {minimum}")
        penalty = self.length_penalty
        if isinstance(penalty, bool) or not isinstance(penalty, (int, float)) or penalty < 0:
            raise ValueError(f"length_penalty={penalty!r} must be a number >= 0")
        if penalty != penalty or penalty == float("inf"):
            raise ValueError(f"length_penalty={penalty!r} must be finite")
        if self.stopping not in STOPPING:
            raise ValueError(f"stopping={self.stopping!r} must be one of {STOPPING}")
        if self.finish_rule not in FINISH_RULES:
            raise ValueError(f"finish_rule={self.finish_rule!r} must be one of {FINISH_RULES}")
        if self.ranking not in RANKINGS:
            raise ValueError(f"ranking={self.ranking!r} must be one of {RANKINGS}")
        for name in ("target_prefix", "source_prefix"):
            prefix = getattr(self, name)
            if prefix is not None and (not isinstance(prefix, str) or not prefix.strip()):
                raise ValueError(f"{name}={prefix!r} must be None or a non-blank string")
        if self.n_best > self.beam_size:
            raise ValueError(
                f"n_best={self.n_best} must be between 1 and the beam size {self.beam_size}"
            )

    @classmethod
    def preset(cls, name: str) -> DecodingSettings:
        """Settings by name: "paper" (the defaults: paper 6.1), "tensor2tensor" (the paper's
        code: the same with "exact" stopping) or "greedy" (beam_size 1)."""
        if name not in PRESETS:
            raise ValueError(f"decoding preset {name!r} is unknown; choose one of {list(PRESETS)}")
        return cls(**PRESETS[name])

    @classmethod
    def from_dict(
        cls, values: dict[str, Any], where: str = "decoding settings"
    ) -> DecodingSettings:
        """Settings from a mapping (a preset's, a YAML section's), refusing unknown keys by
        name; `where` names the file or section in the errors."""
        if not isinstance(values, dict):
            raise ValueError(f"{where}: expected a mapping of settings, got {values!r}")
        known = [field.name for field in dataclasses.fields(cls)]
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(f"{where}: unknown decoding setting(s) {unknown}; known: {known}")
        try:
            return cls(**values)
        except ValueError as error:
            raise ValueError(f"{where}: {error}") from None

    def to_dict(self) -> dict[str, Any]:
        """Every setting as a plain value (JSON and YAML serializable)."""
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> DecodingSettings:
        """A copy with some settings changed (checked as new settings are). None keeps a
        setting as it is, so flags left unset change nothing."""
        changes = {key: value for key, value in changes.items() if value is not None}
        return self.from_dict({**self.to_dict(), **changes})

    def search_arguments(self) -> dict[str, Any]:
        """The keyword arguments of `kt.decoding.translate_ids` (and of `beam_search`, less
        `num_hypotheses`, which `n_best` above 1 sets), less the prefixes: they are text,
        which the tokenizers turn into ids (`prefix_ids`; `with_source_prefix` before the
        source is tokenized)."""
        return {
            "beam_size": self.beam_size,
            "length_penalty": self.length_penalty,
            "finish_rule": self.finish_rule,
            "max_extra_length": self.max_extra_length,
            "stopping": self.stopping,
            "ranking": self.ranking,
        }


PRESETS: dict[str, dict[str, Any]] = {
    "paper": {},
    "tensor2tensor": {"stopping": "exact"},
    "greedy": {"beam_size": 1},
}


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
    import re

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
        >>> from keras_transformer.decoding.settings import with_source_prefix
        >>> with_source_prefix("Hello", "eng_Latn")
        'eng_Latn Hello'
        >>> with_source_prefix("fra_Latn Salut", "eng_Latn")
        'fra_Latn Salut'
        >>> with_source_prefix("  ", ">>spa<<"), with_source_prefix("Hello", None)
        ('  ', 'Hello')
    """
    import re

    words = text.split(maxsplit=1)
    if prefix is None or not words or re.fullmatch(LANGUAGE_CODE, words[0]):
        return text
    return f"{prefix} {text}"


def check_source_prefix(prefix: str | None, tokenizer, where: str = "source_prefix") -> None:
    """Refuses a source prefix that the source vocabulary would cut into pieces as text: a
    word shaped like a language code (`LANGUAGE_CODE`) that is neither one of its language
    codes (NLLB-200's) nor one of its pieces (a multilingual OPUS-MT model's ">>spa<<").
    ValueError naming `where`, the word, and the codes it could have meant."""
    import re

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
    import difflib

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


def prefix_ids(settings: DecodingSettings, tokenizer):
    """The target prefix's ids `[1, prefix_len]` (int32 numpy) through `tokenizer`, as the
    searches' `target_prefix` takes them, or None when the settings force none. ValueError
    when the text has no tokens, or names a language the vocabulary lacks
    (`check_target_prefix`)."""
    import numpy as np
    from keras import ops

    if settings.target_prefix is None:
        return None
    check_target_prefix(settings.target_prefix, tokenizer)
    ids = tokenizer.tokenize([settings.target_prefix])
    ids = ids.to_tensor() if hasattr(ids, "to_tensor") else ids
    ids = np.asarray(ops.convert_to_numpy(ids), "int32")
    if not ids.size:
        raise ValueError(f"target_prefix={settings.target_prefix!r} has no tokens")
    return ids


DEFAULT = DecodingSettings()
"""The settings every entry point takes unless told otherwise."""

BATCH_SIZE = 64
"""Sentences decoded at once by `generate`, `Translator` and `trainers.translate`, unless told
otherwise (sorted by length first, so that little time goes to padding)."""


__all__ = [
    "DecodingSettings",
    "FINISH_RULES",
    "LANGUAGE_CODE",
    "PRESETS",
    "RANKINGS",
    "BLANK",
    "KEEPS_ITS_SOURCE",
    "STOPPING",
    "check_source_prefix",
    "check_target_prefix",
    "language_codes",
    "prefix_ids",
    "with_source_prefix",
]
