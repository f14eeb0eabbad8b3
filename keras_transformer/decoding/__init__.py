"""Incremental decoding with a trained `Transformer`, or a decoder-only language model.

(cache)            the key/value cache, `AttentionCache`, `DecoderLayerCache`, `DecoderCache`
                   (writing, growing, reordering): in `kt.layers.cache`, beside the layers
                   that write it, and exported here
settings.py        `DecodingSettings`: the one set of decoding settings every entry point
                   takes (the paper's by default)
search.py          `greedy_search`, `sample`, `beam_search` over one loop helper, `decode_loop`;
                   `decode`: the one function that turns settings into one of them
language_model.py  `generate`: the same searches for a decoder-only language model, prompts
                   of different lengths in one batch
prompts.py         `prompt_tensor`: a language model's prompts as one checked tensor, and
                   their left padding
parallel.py        `parallel_search`: slices of a batch as concurrent XLA programs
"""

from keras_transformer.decoding.language_model import generate
from keras_transformer.decoding.parallel import parallel_search
from keras_transformer.decoding.search import (
    BOS_ID,
    EOS_ID,
    beam_search,
    decode,
    decode_loop,
    greedy_search,
    sample,
    translate_ids,
)
from keras_transformer.decoding.settings import (
    FINISH_RULES,
    RANKINGS,
    STOPPING,
    DecodingSettings,
    with_source_prefix,
)
from keras_transformer.layers.cache import AttentionCache, DecoderCache, DecoderLayerCache

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "FINISH_RULES",
    "RANKINGS",
    "STOPPING",
    "AttentionCache",
    "DecoderCache",
    "DecoderLayerCache",
    "DecodingSettings",
    "beam_search",
    "decode",
    "decode_loop",
    "generate",
    "greedy_search",
    "parallel_search",
    "sample",
    "translate_ids",
    "with_source_prefix",
]
