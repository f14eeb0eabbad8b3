"""M2M100 checkpoints in Hugging Face transformers' format, read into this library's
`Transformer` and tokenizer (STYLE 20: the foreign names and layouts live here alone, and in
`m2m100_checkpoint`, which reads the directory): NLLB-200 (`facebook/nllb-200-*`,
transformers' `NllbTokenizer`, read by `nllb_vocab`) and M2M100 with its own tokenizer
(`facebook/m2m100_418M` and `_1.2B`, `M2M100Tokenizer`, read by `m2m100_vocab`). keras-hub's
converter protocol: `convert_config`, `convert_weights`, `convert_tokenizer`, run by
`load_m2m100` (`bart.convert`) on a checkpoint `read_checkpoint` read and checked whole.
`FAMILY` offers all of it, with the decoding settings and languages, as a
`family.CheckpointFamily`.

A checkpoint is a directory as `huggingface-cli download facebook/nllb-200-distilled-600M
--local-dir PATH` leaves it: `config.json` (`model_type: m2m_100`), `generation_config.json`,
`sentencepiece.bpe.model` (the SentencePiece model that cuts the text), the tokenizer's files
(NLLB's `tokenizer.json` and `tokenizer_config.json`; M2M100's `vocab.json`,
`tokenizer_config.json` and `special_tokens_map.json`), and the weights, `model.safetensors`
(or shards listed in `model.safetensors.index.json`), read without torch.

The architecture is the paper's with general options of `TransformerConfig`: pre-norm with a
final LayerNorm on each stack (`norm_first`), LayerNorm's epsilon 1e-5, relu, embeddings
scaled by sqrt(d_model) and shared by both stacks and the output projection, and fairseq's
sinusoid: sines then cosines (`sinusoid_layout="concatenated"`), the frequencies
1 / 10000^(i / (d_model / 2 - 1)) (`sinusoid_frequencies="fairseq"`), positions counted from
the padding id + 1 (`position_offset`, 2 for NLLB).

Ids. fairseq numbers a vocabulary <s> 0, <pad> 1, </s> 2, <unk> 3, then the pieces, then the
language codes (and NLLB's <mask>), then rows no token reaches (nllb-200 has 256206 rows,
256204 ids). The decoder starts with </s> (`decoder_start_token_id`). This library uses pad 0,
unk 1, bos 2, eos 3 everywhere, so the import permutes the vocabulary once, as the Marian
import does: our id i is the checkpoint's `order[i]`, with our <s> (bos, the decoder start) a
second copy of the decoder start's row and the other rows in the checkpoint's order. The copy
takes an output bias of `EXCLUDED`, which leaves it out of the softmax, so the distribution
over the other ids is transformers' own. The checkpoint's own "<s>" keeps its row under the
name "<s>@0" (our "<s>" is the decoder start); the text "<s>" is still that token.

Text. The source text starts with its language code, as transformers' `src_lang` puts it:
`"eng_Latn Hello"` (M2M100: `"__en__ Hello"`) has the ids of `NllbTokenizer(src_lang=
"eng_Latn")("Hello")` (less the EOS the searches add). The target language is a target prefix:
`kt.decoding.greedy_search(..., target_prefix=[vocabularies.target.language_id("spa_Latn")])`,
as transformers' `forced_bos_token_id`; both exports take it per request.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from keras_transformer.config import TransformerConfig
from keras_transformer.pretrained import bart, bart_checkpoint
from keras_transformer.pretrained.bart import EXCLUDED
from keras_transformer.pretrained.bart_checkpoint import SafetensorsWeights  # noqa: F401
from keras_transformer.pretrained.m2m100_checkpoint import (  # noqa: F401 (this module's before)
    DEFAULTS,
    MODEL_TYPE,
    TOKENIZER_CLASSES,
    TOKENIZERS,
    WEIGHTS,
    WEIGHTS_INDEX,
    Checkpoint,
    M2M100Error,
    number,
    read_json,
    read_vocabulary,
    special_ids,
    vocabulary_order,
)
from keras_transformer.pretrained.nllb_vocab import (  # noqa: F401 (this module's before)
    FAIRSEQ_OFFSET,
    FAIRSEQ_SPECIALS,
    SENTENCEPIECE,
    Vocabulary,
)
from keras_transformer.text import BOS_ID
from keras_transformer.tokenizers.pieces import SPECIAL_PIECES

# Config values our model computes as transformers' M2M100 does; any other value is refused.
_EXPECTED = {"model_type": MODEL_TYPE, "scale_embedding": True, "tie_word_embeddings": True}
# Copies of the shared table that transformers ties to it (some checkpoints store them).
_TIED_COPIES = (
    "model.encoder.embed_tokens.weight",
    "model.decoder.embed_tokens.weight",
    "lm_head.weight",
)
# Rows of the embedding table written at a time (64 MB of NLLB-200's at d_model 1024).
ROWS_AT_ONCE = bart.ROWS_AT_ONCE


def convert_config(config: dict, where: str = "config.json") -> TransformerConfig:
    """The `TransformerConfig` of an M2M100 config.json (the vocabulary in our ids: one more
    row than the checkpoint's, our decoder start's). A key it leaves out takes transformers'
    `M2M100Config` default."""

    def get(key, kind=int):
        return number(config, key, kind, where, DEFAULTS[key])

    activation = bart.check_config(
        config, get, _EXPECTED, DEFAULTS["activation_function"], where, M2M100Error
    )
    pad = special_ids(config, where)["pad_token_id"]
    try:
        return TransformerConfig(
            vocab_size=get("vocab_size") + 1,
            **bart.bart_sizes(get),
            norm_first=True,
            activation=activation,
            positional="sinusoidal",
            sinusoid_layout="concatenated",
            sinusoid_frequencies="fairseq",
            position_offset=pad + 1,
            output_bias=True,
            layer_norm_epsilon=1e-5,
        )
    except ValueError as error:
        raise M2M100Error(f"{where}: {error}") from None


def read_checkpoint(path) -> Checkpoint:
    """Reads and checks a checkpoint directory: config, tokenizer files and weights, before
    any model is built; `M2M100Error` names what is missing or wrong."""
    path = Path(path)
    what = "an NLLB/M2M100 checkpoint"
    refusal = f"this reader imports {MODEL_TYPE!r} checkpoints (NLLB-200, M2M100)"
    config = bart_checkpoint.read_config(path, MODEL_TYPE, M2M100Error, what=what, refusal=refusal)
    config_path = str(path / "config.json")
    model_config = convert_config(config, config_path)  # every key checked first
    vocabulary = read_vocabulary(path, config)
    hint = "download or convert to model.safetensors"
    weights, weights_file = bart_checkpoint.read_weights(path, M2M100Error, hint=hint)
    generation = bart_checkpoint.read_generation(path, config, M2M100Error, from_config=False)
    vocabulary_order(config, len(vocabulary.names), config_path)
    shapes = {entry.name: entry.shape for entry in bart.weight_map(model_config)}
    shapes["model.shared.weight"] = (len(vocabulary.names), model_config.d_model)
    tied = [(copy, "model.shared.weight") for copy in _TIED_COPIES]
    positions = [name for name in weights if name.endswith("embed_positions.weights")]
    bart.check_weights(weights, shapes, tied, weights_file, model_config, M2M100Error, positions)
    return Checkpoint(path, config, generation, weights, weights_file, vocabulary)


def tokenizer(vocabulary: Vocabulary, order: list[int]):
    """The tokenizer of a checkpoint's vocabulary (its `tokenizer_class`: `NllbTokenizer` or
    `M2M100Tokenizer`), in our ids."""
    ours = {}  # checkpoint id -> our id; our <s> is a copy, never the one a token maps to
    for i, theirs in enumerate(order):
        if i != BOS_ID:
            ours.setdefault(theirs, i)
    names = list(SPECIAL_PIECES)
    for i in order[len(SPECIAL_PIECES) :]:
        name = vocabulary.names[i]
        names.append(f"{name}@{i}" if name in SPECIAL_PIECES else name)
    special = {token: ours[i] for token, i in vocabulary.added.items()}
    for i, name in enumerate(vocabulary.names):
        if name.startswith("<extra_row_"):
            special[name] = ours[i]
    try:
        return vocabulary.tokenizer_class(
            vocabulary.proto,
            names,
            special_tokens=special,
            language_codes=vocabulary.language_codes,
            lstrip_tokens=vocabulary.lstrip,
            rstrip_tokens=vocabulary.rstrip,
        )
    except ValueError as error:  # a piece named twice (as a language code, say)
        raise M2M100Error(f"the checkpoint's tokens in this library's ids: {error}") from None


def load_vocabularies(path):
    """The tokenizer of a checkpoint directory (or `Checkpoint`), in our ids, as
    `keras_transformer.text.Vocabularies` (one tokenizer for both sides)."""
    from keras_transformer.text import Vocabularies

    if isinstance(path, Checkpoint):
        vocabulary, config = path.vocabulary, path.config
    else:
        config = read_json(Path(path) / "config.json")
        vocabulary = read_vocabulary(Path(path), config)
    shared = tokenizer(vocabulary, vocabulary_order(config, len(vocabulary.names)))
    return Vocabularies(shared, shared)


def convert_tokenizer(checkpoint: Checkpoint):
    """keras-hub's `convert_tokenizer`: the checkpoint's tokenizer (`load_vocabularies`)."""
    return load_vocabularies(checkpoint)


def decoding_defaults(generation: dict, where: str = "generation_config.json") -> dict:
    """Decoding settings that generation_config.json sets (`bart.decoding_defaults`), with
    transformers' defaults where it sets none (greedy search, length penalty 1), and
    `target_prefix`, the forced first token (forced_bos_token_id), in the checkpoint's ids,
    or None."""
    defaults = {"beam_size": 1, "length_penalty": 1.0, "target_prefix": None}
    defaults.update(bart.decoding_defaults(generation, where, M2M100Error))
    if generation.get("forced_bos_token_id") is not None:
        defaults["target_prefix"] = number(generation, "forced_bos_token_id", int, where)
    return defaults


def decoding_settings(checkpoint: Checkpoint):
    """The `DecodingSettings` of a checkpoint: generation_config.json's beam size and length
    penalty (`decoding_defaults`), and its `forced_bos_token_id`, if set, as the target
    prefix (the token's text: a language code such as "spa_Latn")."""
    from keras_transformer.decoding.settings import DecodingSettings

    where = str(checkpoint.path / "generation_config.json")
    defaults = decoding_defaults(checkpoint.generation, where)
    prefix = defaults["target_prefix"]
    if prefix is not None:
        codes = {i: code for code, i in checkpoint.vocabulary.added.items()}
        if prefix not in codes:
            raise M2M100Error(
                f"{where}: forced_bos_token_id={prefix} is not the id of a language code or "
                "other special token"
            )
        prefix = codes[prefix]
    return DecodingSettings(
        beam_size=defaults["beam_size"],
        length_penalty=defaults["length_penalty"],
        target_prefix=prefix,
    )


def with_languages(checkpoint: Checkpoint, settings, source_language=None, target_language=None):
    """`settings` with `source_language` as the source prefix (the code put before every
    source text without one) and `target_language` as the target prefix (the code every
    translation starts with), where given; `M2M100Error` names one that is not among the
    checkpoint's language codes."""
    codes = checkpoint.vocabulary.language_codes
    for flag, language in (("target", target_language), ("source", source_language)):
        if language is not None and language not in codes:
            raise M2M100Error(
                f"--{flag}-language={language} is not one of the checkpoint's "
                f"{len(codes)} language codes ({', '.join(codes[:6])}, ...)"
            )
    return settings.replace(target_prefix=target_language, source_prefix=source_language)


def import_notes(settings) -> list[str]:
    """What the import decides, a sentence each, for an importer to print and record: where
    the source's language code comes from, and the target's (the `DecodingSettings`
    `settings`' prefixes)."""
    if settings.source_prefix is None:
        notes = [
            "source text starts with its language code, as transformers' src_lang puts it "
            '("eng_Latn Hello"), or --source-language puts it there'
        ]
    else:
        notes = [
            f"every source starts with {settings.source_prefix}, unless it starts with a "
            "language code of its own"
        ]
    if settings.target_prefix is None:
        notes.append(
            "no target language: neither --target-language nor generation_config.json's "
            "forced_bos_token_id sets one, so translations start with whatever language code "
            "the model picks (trainers.evaluate and trainers.export take --target-prefix)"
        )
    else:
        notes.append(f"every translation starts with {settings.target_prefix}")
    return notes


def load_m2m100(path):
    """An NLLB-200/M2M100 checkpoint directory (or the `Checkpoint` that `read_checkpoint`
    made of it) as `(model, vocabularies)`: a `keras_transformer.Transformer` holding its
    weights (in our ids, see the module doc) and its tokenizer (`NllbTokenizer`, or
    `M2M100Tokenizer`). Everything is read and checked before the model is built.

    Examples:
        Skipped by the doctests: it needs an NLLB-200 checkpoint downloaded beforehand (the
        Hugging Face model directory of `facebook/nllb-200-distilled-600M`, here).

        >>> import keras_transformer as kt
        >>> from keras_transformer.pretrained import load_m2m100
        >>> model, vocabularies = load_m2m100("nllb-200-distilled-600M")  # doctest: +SKIP
        >>> spanish = vocabularies.target.language_id("spa_Latn")  # doctest: +SKIP
        >>> ids, scores = kt.decoding.greedy_search(  # doctest: +SKIP
        ...     model, source_ids, target_prefix=[spanish])

        `source_ids` are the source text's ids, int `[batch, src_len]`.
    """
    return bart.convert(FAMILY, path)


def convert_weights(model, checkpoint: Checkpoint) -> None:
    """Sets every weight of `model` (built from `convert_config`) from the checkpoint
    (checked whole by `read_checkpoint`), one weight at a time, and the embedding table a
    block of rows at a time: the import holds the model and one weight (or block), never a
    second copy of the model (`benchmarks.import_memory`)."""
    weights = checkpoint.weights
    order = vocabulary_order(checkpoint.config, len(checkpoint.vocabulary.names))
    for entry in bart.weight_map(model.config):
        variable = bart.variable(model, entry.ours)
        variable.assign(bart.converted(entry, weights[entry.name], variable.shape))
    embedding = model.target_embedding
    table = embedding.token_embedding.embeddings
    bart.assign_rows(table, weights, "model.shared.weight", order, ROWS_AT_ONCE)
    bias = np.zeros(len(order), "float32")
    bias[BOS_ID] = EXCLUDED  # the decoder start's second row: out of the softmax
    embedding.logits_bias.assign(bias)


class M2M100Family:
    """NLLB-200 and M2M100 checkpoints as a `family.CheckpointFamily`: this module's
    functions behind the contract that every family of checkpoints implements whole."""

    model_type = MODEL_TYPE
    title = "NLLB-200"

    def read_checkpoint(self, path) -> Checkpoint:
        """The directory read and checked whole (`read_checkpoint`); a `Checkpoint`, which
        only that reader makes, as it is."""
        return path if isinstance(path, Checkpoint) else read_checkpoint(path)

    def convert_config(self, config: dict, where: str) -> TransformerConfig:
        return convert_config(config, where)

    def convert_tokenizer(self, checkpoint: Checkpoint):
        return convert_tokenizer(checkpoint)

    def convert_weights(self, model, checkpoint: Checkpoint) -> None:
        convert_weights(model, checkpoint)

    def decoding_settings(self, checkpoint: Checkpoint):
        return decoding_settings(checkpoint)

    def with_languages(self, checkpoint: Checkpoint, settings, source_language, target_language):
        return with_languages(checkpoint, settings, source_language, target_language)

    def ignored_generation_settings(self, checkpoint: Checkpoint) -> list[str]:
        """`bart.ignored_generation_settings`, less forced_bos_token_id: the target prefix."""
        pad = special_ids(checkpoint.config)["pad_token_id"]  # never generated: our <pad>
        applied = ("forced_bos_token_id",)
        return bart.ignored_generation_settings(checkpoint.generation, pad, applied)

    def import_notes(self, checkpoint: Checkpoint, settings) -> list[str]:
        return import_notes(settings)

    def record(self, checkpoint: Checkpoint) -> dict:
        decoding = decoding_defaults(checkpoint.generation)
        ignored = self.ignored_generation_settings(checkpoint)
        return bart.provenance(MODEL_TYPE, checkpoint, decoding, ignored)


FAMILY = M2M100Family()
# The names these had before the converter protocol.
transformer_config, assign_weights = convert_config, convert_weights

__all__ = [
    "FAMILY",
    "Checkpoint",
    "M2M100Error",
    "M2M100Family",
    "SafetensorsWeights",
    "convert_config",
    "convert_tokenizer",
    "convert_weights",
    "decoding_defaults",
    "decoding_settings",
    "import_notes",
    "load_m2m100",
    "load_vocabularies",
    "read_checkpoint",
    "transformer_config",
    "vocabulary_order",
    "with_languages",
]
