"""Incremental decoding with a trained `Transformer`.

cache.py     the key/value cache: `AttentionCache`, `DecoderLayerCache`, `DecoderCache`
             (writing, growing, reordering)
search.py    `greedy_search`, `sample`, `beam_search` over one loop helper, `decode_loop`
parallel.py  `parallel_search`: slices of a batch as concurrent XLA programs
"""

from keras_transformer.decoding.cache import AttentionCache, DecoderCache, DecoderLayerCache
from keras_transformer.decoding.parallel import parallel_search
from keras_transformer.decoding.search import (
    BOS_ID,
    EOS_ID,
    FINISH_RULES,
    STOPPING,
    beam_search,
    decode_loop,
    greedy_search,
    sample,
    translate_ids,
)

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "FINISH_RULES",
    "STOPPING",
    "AttentionCache",
    "DecoderCache",
    "DecoderLayerCache",
    "beam_search",
    "decode_loop",
    "greedy_search",
    "parallel_search",
    "sample",
    "translate_ids",
]
