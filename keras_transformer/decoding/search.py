"""Greedy search, sampling and beam search over a trained `Transformer`, with a key/value cache.

The searches' modules, whose names this one gathers:

loop.py     `decode_loop` (the phased loop every search runs), the cached decoder step, the
            output-length limits (`core.rules.output_limit`), the forced target prefix
greedy.py   `greedy_search` and `sample`: one hypothesis a sentence
beam.py     `beam_search`: k hypotheses, ranked by `core.rules.length_penalty`
plan.py     `DecodingPlan`, the search of a request shape decided once from the settings,
            and `decode` and `translate_ids` over it

The encoder runs once; each step embeds the last token, runs `Decoder.forward` with the
`DecoderCache` (the new position's keys and values written, the encoder output's projected
once) and projects to float32 log-probabilities. Loops are `keras.ops.while_loop`s over
static-shaped state (only the batch may be unknown), written with `keras.ops` (the few ops
that differ: `keras_transformer._backends`), so every function here runs on TensorFlow (eagerly,
inside `tf.function` with unknown batch and length, and under XLA) and on JAX (eagerly and
under `jax.jit`). The control flow is explicit, so the searches need no AutoGraph: they are
marked for AutoGraph to leave as they are (`backends.compiled_search`), and a `tf.function`
around one, with AutoGraph on or off, traces it as written (measured when it landed,
3fbdb2f: BENCHMARKS.md's history).

Output length: a sentence may have at most its own number of source tokens +
`max_extra_length` output tokens (paper 6.1: "maximum output length to input length + 50"),
capped by `max_length` and by `model.config.max_length`; a hypothesis that reaches its limit
ends with EOS there. Returned ids are `[batch, out_len]` without the leading BOS, 0-padded
after EOS, with `out_len = min(src_len + max_extra_length, max_length, config.max_length)` for
the padded source width `src_len` (a width known from shapes alone, as XLA needs). The padding
id 0 is never generated. Decoding stops once every sentence has finished.

Target prefix: every search takes `target_prefix`, ids forced as the first output tokens
(after BOS), as CTranslate2's `target_prefix` and transformers' `forced_bos_token_id` force
them: NLLB-200's target language code, or the start of a translation to complete. A forced
token is not the model's choice, so its log-probability is not counted in the score (as
transformers counts it); it is part of the returned ids and of the output length.
"""

from __future__ import annotations

from keras_transformer.decoding.beam import _beam, _check_beam, beam_search
from keras_transformer.decoding.greedy import (
    _single_path,
    greedy_choice,
    greedy_search,
    sample,
    sampling_choice,
)
from keras_transformer.decoding.loop import (
    FLOAT32_TINY,
    NEG_INF,
    PHASES,
    _NoCache,
    _phase_lengths,
    decode_loop,
    loop_phases,
)
from keras_transformer.decoding.plan import DecodingPlan, decode, translate_ids
from keras_transformer.special_ids import BOS_ID, EOS_ID

# What `kt.decoding.language_model` runs its searches with.
_SHARED = (_beam, _check_beam, _single_path, greedy_choice, sampling_choice, _NoCache)
_CONSTANTS = (FLOAT32_TINY, NEG_INF, PHASES, _phase_lengths)

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "DecodingPlan",
    "beam_search",
    "decode",
    "decode_loop",
    "greedy_search",
    "loop_phases",
    "sample",
    "translate_ids",
]
