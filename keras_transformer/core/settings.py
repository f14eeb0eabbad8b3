"""`DecodingSettings`: how a model translates, in one object that every entry point takes.
Light: the standard library alone (`keras_transformer.core`).

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
        >>> from keras_transformer.core.settings import DecodingSettings
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


DEFAULT = DecodingSettings()
"""The settings every entry point takes unless told otherwise."""

BATCH_SIZE = 64
"""Sentences decoded at once by `generate`, `Translator` and `trainers.translate`, unless told
otherwise (sorted by length first, so that little time goes to padding)."""


__all__ = [
    "BATCH_SIZE",
    "DEFAULT",
    "FINISH_RULES",
    "PRESETS",
    "RANKINGS",
    "STOPPING",
    "DecodingSettings",
]
