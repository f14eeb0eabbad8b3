"""`DecodingPlan`: what a search needs, decided once per request shape from
`DecodingSettings`, and the one call that runs it.

Every door builds one and calls its `search`: the task's `generate` (and
`kt.evaluation.Translator`, a progress bar over it), `kt.decoding.decode`, the SavedModel's
signatures, the LiteRT export's trace, and the programs through them. The plan holds:

- the search's settings (beam size, length penalty and ranking, stopping and finish rules,
  extra length), in one form, the `DecodingSettings` itself;
- the target prefix's ids, tokenized once (`core.rules.target_prefix_ids`, checked against
  the vocabulary's language codes): the searches force them as the first outputs;
- the hypotheses a sentence (`n_best`), checked against the beam once;
- sampling's settings (a task compiled with one of keras-hub's samplers), the output cap
  (`max_length`) and the trace options (`phases`: the loops of `decode_loop`; the LiteRT
  export traces one), passed to the searches explicitly.

A plan is hashable: a door keys its compiled search by it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from keras_transformer.decoding.beam import beam_search
from keras_transformer.decoding.greedy import greedy_search, sample
from keras_transformer.decoding.loop import PHASES
from keras_transformer.decoding.settings import DEFAULT, DecodingSettings, prefix_ids


@dataclasses.dataclass(frozen=True)
class DecodingPlan:
    """One request shape's decoding (the module doc).

    Args:
        settings: `DecodingSettings`. The search's settings; its text prefixes are not the
            search's (the source prefix is the preprocessor's, the target prefix is
            `prefix_ids`). Defaults to the paper's.
        prefix_ids: tuple of int or None. The target prefix's ids, forced first. Defaults
            to None.
        n_best: int. Hypotheses a sentence, from 1 to the beam size. Defaults to 1.
        sampling: tuple of (name, value) pairs or None. `kt.decoding.sample`'s settings
            (temperature, top_k, top_p, seed): draw instead of searching. Defaults to None.
        max_length: int or None. At most this many output tokens, EOS included, on top of
            the settings' and the model's limits. Defaults to None.
        phases: int. The loops `decode_loop` runs (`kt.decoding.search.PHASES`; 1 holds the
            decoder step once in a traced graph, as a LiteRT file wants). Defaults to
            `PHASES`.

    Examples:
        >>> from keras_transformer import TransformerConfig, build_transformer
        >>> from keras_transformer.decoding import DecodingSettings
        >>> from keras_transformer.decoding.plan import DecodingPlan
        >>> model = build_transformer(TransformerConfig.preset("tiny", vocab_size=20))
        >>> plan = DecodingPlan.make(DecodingSettings(beam_size=3, n_best=2, max_extra_length=4))
        >>> ids, scores = plan.search(model, [[5, 6, 3], [8, 3, 0]])
        >>> tuple(ids.shape), tuple(scores.shape)  # (batch, n_best, out_len), (batch, n_best)
        ((2, 2, 7), (2, 2))
    """

    settings: DecodingSettings = DEFAULT
    prefix_ids: tuple[int, ...] | None = None
    n_best: int = 1
    sampling: tuple[tuple[str, Any], ...] | None = None
    max_length: int | None = None
    phases: int = PHASES

    def __post_init__(self) -> None:
        if self.sampling is None and not 1 <= self.n_best <= self.settings.beam_size:
            raise ValueError(
                f"n_best={self.n_best} must be between 1 and the beam size "
                f"{self.settings.beam_size}"
            )
        if isinstance(self.phases, bool) or not isinstance(self.phases, int) or self.phases < 1:
            raise ValueError(f"phases={self.phases!r} must be an int >= 1")

    @classmethod
    def make(
        cls,
        settings: DecodingSettings = DEFAULT,
        target_tokenizer=None,
        *,
        n_best: int | None = None,
        sampling: dict | None = None,
        max_length: int | None = None,
        phases: int = PHASES,
    ) -> DecodingPlan:
        """The plan of `settings`: its target prefix tokenized once by `target_tokenizer`
        (`kt.decoding.settings.prefix_ids`; ValueError where there is none to tokenize it,
        the text has no tokens, or it names a language the vocabulary lacks), `n_best` over
        the settings' (checked against the beam), and the options above."""
        ids = None
        if settings.target_prefix is not None:
            if target_tokenizer is None:
                raise ValueError(
                    f"target_prefix={settings.target_prefix!r} is text, and there is no "
                    "target tokenizer to tokenize it"
                )
            ids = tuple(int(i) for i in prefix_ids(settings, target_tokenizer)[0])
        return cls(
            settings=dataclasses.replace(settings, source_prefix=None, target_prefix=None),
            prefix_ids=ids,
            n_best=settings.n_best if n_best is None else n_best,
            sampling=None if sampling is None else tuple(sorted(sampling.items())),
            max_length=max_length,
            phases=phases,
        )

    @property
    def beam_size(self) -> int:
        """The beam size (1: greedy search)."""
        return self.settings.beam_size

    def search(self, model, source_ids, prefix_ids=None) -> tuple:
        """The search of this plan over `source_ids` int `[batch, src_len]` (EOS-terminated,
        0-padded); `prefix_ids` int `[batch, prefix_len]` (0-padded) over the plan's (a
        request's own target prefixes, the SavedModel's `serving_prefix`).

        Returns:
            `(ids int32 [batch, out_len], scores float32 [batch])`; with `n_best` above 1,
            `(ids [batch, n, out_len], scores [batch, n])`, best first.
        """
        if prefix_ids is None and self.prefix_ids is not None:
            prefix_ids = np.asarray(self.prefix_ids, "int32")
        forced = {} if prefix_ids is None else {"target_prefix": prefix_ids}
        settings = self.settings
        common = {
            "max_extra_length": settings.max_extra_length,
            "max_length": self.max_length,
            "phases": self.phases,
            **forced,
        }
        if self.sampling is not None:
            return sample(model, source_ids, **dict(self.sampling), **common)
        if self.beam_size == 1:
            return greedy_search(model, source_ids, **common)
        return beam_search(
            model,
            source_ids,
            beam_size=settings.beam_size,
            length_penalty=settings.length_penalty,
            finish_rule=settings.finish_rule,
            stopping=settings.stopping,
            ranking=settings.ranking,
            num_hypotheses=self.n_best if self.n_best > 1 else None,
            **common,
        )


def decode(
    model,
    source_ids,
    settings: DecodingSettings = DEFAULT,
    *,
    prefix_ids=None,
    sampling: dict | None = None,
    n_best: int | None = None,
    max_length: int | None = None,
) -> tuple:
    """The search that `settings` asks for, as a `DecodingPlan` of them runs it, with the
    target prefix given as ids.

    Args:
        model: a `Transformer` or `TransformerSeq2SeqLM`.
        source_ids: int `[batch, src_len]`, EOS-terminated, 0-padded.
        settings: `kt.decoding.DecodingSettings`. Beam size (1: greedy), length penalty and
            its ranking, stopping and finish rules, extra length, n-best. Its text
            `target_prefix` is not read here: `prefix_ids` carries it as ids.
        prefix_ids: int `[prefix_len]` or `[batch, prefix_len]` (0-padded), or None. Forced
            first outputs (the target tokenizer's ids of the settings' `target_prefix`,
            `kt.decoding.prefix_ids`).
        sampling: dict or None. `sample`'s settings (temperature, top_k, top_p, seed): draw
            instead of searching (a task compiled with one of keras-hub's samplers).
        n_best: int or None. Hypotheses a sentence, over the settings' `n_best` (a signature
            that always returns several). Defaults to None.
        max_length: int or None. At most this many output tokens, EOS included.

    Returns:
        `(ids int32 [batch, out_len], scores float32 [batch])`; with more than one hypothesis,
        `(ids [batch, n, out_len], scores [batch, n])`, best first.

    Examples:
        >>> from keras_transformer import TransformerConfig, build_transformer
        >>> from keras_transformer.decoding import DecodingSettings, decode
        >>> model = build_transformer(TransformerConfig.preset("tiny", vocab_size=20))
        >>> settings = DecodingSettings(beam_size=3, n_best=2, max_extra_length=4)
        >>> ids, scores = decode(model, [[5, 6, 3], [8, 3, 0]], settings)
        >>> tuple(ids.shape), tuple(scores.shape)  # (batch, n_best, out_len), (batch, n_best)
        ((2, 2, 7), (2, 2))
    """
    plan = DecodingPlan.make(
        dataclasses.replace(settings, target_prefix=None),  # `prefix_ids` carries it
        n_best=n_best,
        sampling=sampling,
        max_length=max_length,
    )
    return plan.search(model, source_ids, prefix_ids)


def translate_ids(
    model,
    source_ids,
    *,
    beam_size: int = DEFAULT.beam_size,
    length_penalty: float = DEFAULT.length_penalty,
    finish_rule: str = DEFAULT.finish_rule,
    max_extra_length: int = DEFAULT.max_extra_length,
    stopping: str = DEFAULT.stopping,
    max_length: int | None = None,
    target_prefix=None,
    ranking: str = DEFAULT.ranking,
) -> tuple:
    """Source ids in, the best translation's ids and score out: the search of
    `DecodingSettings` with these settings (`greedy_search` when `beam_size` is 1, else
    `beam_search`), `target_prefix` the forced ids if any. The SavedModel's `translate_ids`
    signature and `kt.evaluation.Translator.translate_ids` answer the same."""
    settings = DecodingSettings(
        beam_size=beam_size,
        length_penalty=length_penalty,
        finish_rule=finish_rule,
        max_extra_length=max_extra_length,
        stopping=stopping,
        ranking=ranking,
    )
    return DecodingPlan(settings, max_length=max_length).search(model, source_ids, target_prefix)


__all__ = ["DecodingPlan", "decode", "translate_ids"]
