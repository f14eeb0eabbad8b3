"""Generation from a decoder-only (GPT-style) language model: prompts of different lengths in
one batch, greedy search, sampling and beam search, with the key/value cache.

The model is a `kt.layers.Decoder` built without an encoder output, fed by a
`kt.layers.TransformerEmbedding` whose tied reverse projection gives the logits:
`logits = embedding(decoder(embedding(ids)), reverse=True)` (`examples/language_model.py`).
The loops are those of the encoder-decoder searches (`search.py`: `_single_path`, `_beam`,
`decode_loop`, `DecoderCache`), so everything said there holds here: `keras.ops` only, eager,
inside `tf.function` (AutoGraph leaves it as written; `jit_compile=True` too) and under
`jax.jit`.

**Prompts of different lengths: left padding, positions per row.** Prompts arrive 0-padded
at the end (this library's convention for ids), as lists of lists, or as a `tf.RaggedTensor`.
Inside, each row is moved to the right of a `[batch, width]` buffer, its padding first
(left padding), and its positions start at its first real token: the position of buffer
slot i of a row with `pad` padding slots is `i - pad`. Why:
- every row's last prompt token is then in the same slot, `width - 1`, so one loop counter
  serves the whole batch: step t writes every row's new key and value at slot
  `width - 1 + t` (one slice update, static shapes for XLA), as the encoder-decoder searches
  do;
- a row's tokens have the positions they have alone (0, 1, ...), and the padding slots are
  masked out of every attention (`Decoder.forward(..., padding_mask=...)` over the cache's
  slots), so a row's logits are those of the same prompt alone, up to float rounding: each
  row of a batch generates what it generates alone (greedy and beam search; sampling draws
  from the same distributions, but a row's draw depends on its place in the batch, as in
  any batched sampler).
Right padding would put each row's next token at its own slot (a scatter per step, and
attention over junk slots between prompt and continuation); repeating the prompt per row
would not batch at all.

The prompt, minus its last token, runs through the decoder in one call (filling the cache);
the loop then starts from each row's last prompt token, as a translation starts from BOS.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from keras_transformer import _backends as backends
from keras_transformer import fast
from keras_transformer.config import PAD_ID
from keras_transformer.decoding import search
from keras_transformer.decoding.prompts import _check_room, _left_padded, prompt_tensor
from keras_transformer.decoding.search import EOS_ID
from keras_transformer.decoding.settings import DEFAULT

METHODS = ("greedy", "sample", "beam")


def generate(
    model,
    prompts,
    *,
    max_new_tokens: int = 32,
    method: str = "greedy",
    stop_ids=(EOS_ID,),
    never_ids=(),
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int | None = None,
    beam_size: int = DEFAULT.beam_size,
    length_penalty: float = DEFAULT.length_penalty,
    finish_rule: str = DEFAULT.finish_rule,
    stopping: str = DEFAULT.stopping,
    num_hypotheses: int | None = None,
    use_cache: bool = True,
) -> tuple:
    """Continues each prompt with up to `max_new_tokens` tokens.

    Sampling's settings (`temperature`, `top_k`, `top_p`, `seed`) are `kt.decoding.sample`'s,
    and beam search's (`beam_size`, `length_penalty`, `finish_rule`, `stopping`,
    `num_hypotheses`) `kt.decoding.beam_search`'s; a hypothesis that reaches its limit without
    a stop token ends there, as one that stops.

    Args:
        model: a decoder-only language model: a `keras.Model` holding one
            `kt.layers.TransformerEmbedding` and one `kt.layers.Decoder` built without an
            encoder output, whose logits are `embedding(decoder(embedding(ids)),
            reverse=True)`.
        prompts: int `[batch, width]` 0-padded at the end, a list of lists of ids, or a
            `tf.RaggedTensor`. Every prompt holds at least one token (the model's start
            token, say), and ids of 0 are padding. Checked where their values are known
            (`prompt_tensor`), with a prompt that fills the embedding's `max_length`
            refused; inside a trace, such a prompt gets an empty continuation.
        max_new_tokens: int >= 1. The most tokens a prompt gets (stop token included), also
            held under the embedding's `max_length` for prompt + continuation. Defaults
            to 32.
        method: str. "greedy", "sample" or "beam". Defaults to "greedy".
        stop_ids: tuple of ints. A row ends at the first of these it generates (kept in
            its output); () runs every row to its limit. Defaults to (EOS_ID,) = (3,).
        never_ids: tuple of ints. Tokens never generated, besides the padding id 0 (the
            start or unknown token, say). Defaults to ().
        use_cache: bool. False recomputes the whole model at every step (the reference for
            tests and benchmarks). Defaults to True.

    Returns:
        `(ids int32 [batch, max_new_tokens], scores float32 [batch])`: the continuations
        (without the prompt), each up to its stop token, then 0s; a score is the sum of its
        tokens' log-probabilities (beam search: divided by the length penalty). With
        `method="beam"` and `num_hypotheses=n`, `(ids [batch, n, max_new_tokens], scores
        [batch, n])`, best first.

    Examples:
        >>> import keras
        >>> from keras_transformer import layers
        >>> from keras_transformer.decoding import generate
        >>> ids = keras.Input((None,), dtype="int32")
        >>> embedding = layers.TransformerEmbedding(20, 8, max_length=16)
        >>> decoder = layers.Decoder(num_layers=1, num_heads=2, d_ff=16)
        >>> model = keras.Model(ids, embedding(decoder(embedding(ids)), reverse=True))
        >>> ids, scores = generate(model, [[2, 5, 6], [2, 7]], max_new_tokens=4)  # greedy
        >>> tuple(ids.shape), tuple(scores.shape)  # (batch, max_new_tokens), (batch,)
        ((2, 4), (2,))
    """
    if method not in METHODS:
        raise ValueError(f"method={method!r} must be one of {METHODS}")
    _check_max_new_tokens(max_new_tokens)
    stop_ids, never_ids = _ids_tuple("stop_ids", stop_ids), _ids_tuple("never_ids", never_ids)
    embedding, _ = language_model_layers(model)  # its errors before any work
    settings = {
        "max_new_tokens": max_new_tokens,
        "method": method,
        "stop_ids": stop_ids,
        "never_ids": never_ids,
        "use_cache": use_cache,
    }
    if method == "sample":
        settings.update(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
    elif method == "beam":
        search._check_beam(beam_size, length_penalty, finish_rule, stopping, num_hypotheses)
        settings.update(
            beam_size=beam_size,
            length_penalty=length_penalty,
            finish_rule=finish_rule,
            stopping=stopping,
            num_hypotheses=num_hypotheses,
        )
    prompts = prompt_tensor(prompts)
    _check_room(prompts, embedding.max_length)
    return _generate(model, prompts, **settings)


def _check_max_new_tokens(max_new_tokens) -> None:
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
        raise ValueError(f"max_new_tokens={max_new_tokens!r} must be an integer >= 1")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens} must be >= 1")


def language_model_layers(model) -> tuple:
    """The `(TransformerEmbedding, Decoder)` of a decoder-only `model` (see `generate`);
    ValueError when it holds not exactly one of each, or when its decoder has
    encoder-decoder attention."""
    from keras_transformer.layers import Decoder, TransformerEmbedding

    found = {TransformerEmbedding: [], Decoder: []}

    def walk(container):
        for layer in getattr(container, "layers", ()):
            for kind, layers in found.items():
                if isinstance(layer, kind) and layer not in layers:
                    layers.append(layer)
            if isinstance(layer, keras.Model):
                walk(layer)

    walk(model)
    embeddings, decoders = found[TransformerEmbedding], found[Decoder]
    name = getattr(model, "name", type(model).__name__)
    translator = " (a kt.Transformer translates with greedy_search, sample or beam_search)"
    if len(embeddings) != 1 or len(decoders) != 1:
        raise ValueError(
            "generate needs a decoder-only language model holding one "
            "kt.layers.TransformerEmbedding (its tied output projection) and one "
            f"kt.layers.Decoder built without an encoder output; model {name!r} holds "
            f"{len(embeddings)} and {len(decoders)}" + translator
        )
    embedding, decoder = embeddings[0], decoders[0]
    if not decoder.built:
        raise ValueError(
            f"generate: the decoder {decoder.name!r} of model {name!r} is not built: call the "
            "model once, or build it"
        )
    if decoder.decoder_layers[0].cross_attention is not None:
        raise ValueError(
            f"generate: the decoder {decoder.name!r} of model {name!r} has encoder-decoder "
            "attention; generate needs a decoder-only stack (kt.layers.Decoder called "
            "without an encoder output)" + translator
        )
    return embedding, decoder


@backends.compiled_search
def _generate(
    model,
    prompt_ids,
    *,
    max_new_tokens,
    method,
    stop_ids,
    never_ids,
    use_cache,
    temperature=1.0,
    top_k=0,
    top_p=1.0,
    seed=None,
    beam_size=DEFAULT.beam_size,
    length_penalty=DEFAULT.length_penalty,
    finish_rule=DEFAULT.finish_rule,
    stopping=DEFAULT.stopping,
    num_hypotheses=None,
):
    """`generate` on a prompt tensor, once its arguments are checked."""
    embedding, decoder = language_model_layers(model)
    prompt_ids = ops.cast(ops.convert_to_tensor(prompt_ids), "int32")
    if len(prompt_ids.shape) != 2:
        raise ValueError(f"prompts must be [batch, width], got shape {prompt_ids.shape}")
    batch, width = ops.shape(prompt_ids)[0], ops.shape(prompt_ids)[1]
    left, lengths = _left_padded(prompt_ids)
    pads = width - lengths  # (batch,): padding slots before each row's first token
    # A row may generate max_new_tokens, within the positions the embedding has.
    limits = ops.minimum(max_new_tokens, embedding.max_length - lengths)  # (batch,)
    copies = beam_size if method == "beam" else 1
    step, cache = _language_model_decoder(
        embedding, decoder, left, pads, copies, max_new_tokens, use_cache
    )
    start = ops.concatenate(
        [left[:, -1:], ops.zeros((batch, max_new_tokens), "int32")], axis=1
    )  # (batch, max_new_tokens + 1): the last prompt token, then room
    rules = {"never": (PAD_ID, *never_ids), "stops": stop_ids, "force_stop": False}
    offset = width - 1  # slots written before the loop
    if method == "beam":
        return search._beam(
            step,
            cache,
            limits,
            start,
            beam_size=beam_size,
            vocab=embedding.vocab_size,
            length_penalty=length_penalty,
            finish_rule=finish_rule,
            stopping=stopping,
            num_hypotheses=num_hypotheses,
            offset=offset,
            **rules,
        )
    if method == "sample":
        choose = search.sampling_choice(temperature, top_k, top_p, seed, embedding.vocab_size)
    else:
        choose = search.greedy_choice
    return search._single_path(step, cache, limits, start, choose, offset=offset, **rules)


def _language_model_decoder(embedding, decoder, left, pads, copies, max_len, use_cache):
    """The language model as a next-token distribution over `n = batch * copies` rows (each
    prompt repeated `copies` times, prompt-major), for left-padded prompts `left`
    `[batch, width]` with `pads` `[batch]` padding slots.

    Returns `(step, cache)`: `step(ids [n, T + 1], t, cache) -> (log_probs [n, vocab],
    cache)`, where `ids[:, t]` is the token at slot `width - 1 + t` (the last prompt token
    at t = 0); and the cache holding the prompt but its last token, with room for the first
    phase of `decode_loop` after it.
    """
    width = ops.shape(left)[1]
    offset = width - 1
    pads_n = ops.repeat(pads, copies, axis=0)  # (n,)

    def real_slots(length, pads=pads_n):  # (rows, length): False at each row's padding
        return ops.arange(length, dtype="int32")[None, :] >= pads[:, None]

    if not use_cache:
        left_n = ops.repeat(left, copies, axis=0)  # (n, width)

        def full_step(ids, t, cache):
            tokens = ops.concatenate([left_n[:, :-1], ids[:, :-1]], axis=1)  # (n, slots)
            x = embedding(tokens, start_index=-pads_n, training=False)
            x = decoder(x, padding_mask=real_slots(ops.shape(tokens)[1]), training=False)
            x = ops.take(x, (offset + t)[None], axis=1)[:, 0]  # (n, d_model): slot of ids[:, t]
            return fast.log_softmax(embedding(x, reverse=True)), cache

        return full_step, search._NoCache()

    batch = ops.shape(left)[0]
    cache = decoder.init_cache(length=offset + search._phase_lengths(max_len)[0], batch_size=batch)
    if not (isinstance(width, int) and width == 1):  # the prompt but its last token
        x = embedding(left[:, :-1], start_index=-pads, training=False)
        mask = real_slots(cache.length, pads)
        _, cache, _ = decoder.forward(
            x, padding_mask=mask, cache=cache, cache_index=0, training=False
        )
    if copies > 1:  # each prompt's cache for each of its hypotheses
        cache = cache.reorder(ops.repeat(ops.arange(batch, dtype="int32"), copies, axis=0))
    project = fast.output_projection(embedding, rows=ops.shape(pads_n)[0])

    def cached_step(ids, t, cache):
        token = ops.take(ids, t[None], axis=1)  # (n, 1)
        slot = offset + t
        x = embedding(token, start_index=slot - pads_n, training=False)  # (n, 1, d_model)
        x, cache, _ = decoder.forward(
            x,
            padding_mask=real_slots(cache.length),
            cache=cache,
            cache_index=slot,
            training=False,
        )
        return fast.log_softmax(project(x[:, 0])), cache  # (n, vocab), float32

    return cached_step, cache


def _ids_tuple(name, ids) -> tuple:
    """`ids` (an int or an iterable of ints) as a tuple of ints."""
    ids = (ids,) if isinstance(ids, (int, np.integer)) else tuple(ids)
    if not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in ids):
        raise ValueError(f"{name}={ids!r} must be token ids (ints)")
    return tuple(int(i) for i in ids)


__all__ = ["METHODS", "generate", "prompt_tensor"]
