"""The LiteRT file's signatures, traced: text in, the model and the settings' search, text out.

Each signature is a `tf.function` that `kt.export.litert_convert.convert` turns into the file:
the source text cut into ids (`kt.export.litert_text`), the model's variables read once at the
top (the converter freezes them into the file's constants, reading them from a SavedModel's
checkpoint: no traced graph holds a copy of the weights), the settings' search (`file_plan`:
the `kt.decoding.DecodingPlan` of every other door), and the ids given back as text. The
search is traced with `kt.fast` switched off (its output projection would store the embedding
twice) but for the tricks a device file takes (`kt.fast.for_device_files`), and as one loop
(`kt.decoding.DecodingPlan(phases=1)`: the decoder step once in the file).

How the tied embedding table is read decides how a quantizer stores it (`TABLE_READS`):
- "constant": the lookups and the output projection read one constant; the converter's int8
  quantizer would store a copy for each use (a lookup copy and the projection's int8
  weights), and dequantize the lookup copy whole once a request, a float32 table the
  search's loop then carries from step to step;
- "int8_rows": the int8 table twice without that: the projection reads the constant (the
  converter's int8 weights, a scale a row), the lookups an int8 copy quantized here
  (`int8_lookup`: one scale), gathered and scaled row by row inside the loop;
- "gather": the table read through one lookup of all its rows (`gathered`), ids the converter
  cannot fold: the constant has one use, so int8 stores it once, and the projection runs in
  float32 on the rows;
- "embedding_lookup": the same, the lookup written as LiteRT's EMBEDDING_LOOKUP op
  (`looked_up`), the op whose table ai-edge-quantizer quantizes (int4: the table once, in
  int8).
"""

from __future__ import annotations

import dataclasses

import keras
import tensorflow as tf

from keras_transformer import _deprecation, fast
from keras_transformer.decoding.plan import DecodingPlan
from keras_transformer.decoding.settings import DecodingSettings, language_codes
from keras_transformer.export import litert_bpe, litert_text
from keras_transformer.special_ids import EOS_ID, PAD_ID

TABLE_READS = ("constant", "int8_rows", "gather", "embedding_lookup")


@_deprecation.deprecated(
    "keras_transformer.export.litert.translate_text",
    "keras_transformer.export.litert_trace.signatures(model, vocabularies, settings)"
    "['serving_default']",
)
def translate_text(model, vocabularies, settings: DecodingSettings):
    """Deprecated: `signatures(model, vocabularies, settings)["serving_default"]`, the file's
    `serving_default` (a `tf.function` text `[batch]` -> `{"translations": [batch]}`), with a
    DeprecationWarning. It goes in the next release."""
    return signatures(model, vocabularies, settings)["serving_default"]


def signatures(
    model, vocabularies, settings: DecodingSettings, *, table: str = "gather", one_table=None
) -> dict:
    """The file's signatures by name, each a traced `tf.function` giving `{"translations":
    [batch]}`: `serving_default` (text), and for a vocabulary with language codes (NLLB-200's)
    `serving_prefix` (text, target_prefix) and `serving_languages` (text, source_prefix,
    target_prefix), the prefixes language codes, string `[batch]`. `table`: how the tied
    embedding table is read, one of `TABLE_READS` (the module doc). `one_table`, deprecated
    (a DeprecationWarning; it goes in the next release): True is `table="gather"`, False
    `table="constant"`."""
    if one_table is not None:
        table = "gather" if one_table else "constant"
        _deprecation.warn(
            "keras_transformer.export.litert.signatures(one_table=...)", f"table={table!r}"
        )
    if table not in TABLE_READS:
        raise ValueError(f"table={table!r} must be one of {TABLE_READS}")
    translate = translator(model, vocabularies, settings, table=table)
    source_codes = codes(vocabularies.source)
    target_codes = codes(vocabularies.target)

    def fixed(text, name):
        """The settings' code of `name` for every row, or None."""
        code = getattr(settings, name)
        if code is None:
            return None if name == "target_prefix" else tf.fill(tf.shape(text), -1)
        codes = source_codes if name == "source_prefix" else target_codes
        return tf.fill(tf.shape(text), codes[code])

    text_spec = tf.TensorSpec([None], tf.string, "text")

    def serving_default(text):
        return translate(text, fixed(text, "source_prefix"), fixed(text, "target_prefix"))

    functions = {"serving_default": (serving_default, [text_spec])}
    if target_codes:

        def serving_prefix(text, target_prefix):
            known = language_ids(target_prefix, target_codes)
            return translate(text, fixed(text, "source_prefix"), known)

        def serving_languages(text, source_prefix, target_prefix):
            code = language_ids(source_prefix, source_codes)
            return translate(text, code, language_ids(target_prefix, target_codes))

        prefix_spec = tf.TensorSpec([None], tf.string, "target_prefix")
        source_spec = tf.TensorSpec([None], tf.string, "source_prefix")
        functions["serving_prefix"] = (serving_prefix, [text_spec, prefix_spec])
        functions["serving_languages"] = (serving_languages, [text_spec, source_spec, prefix_spec])
    return traced(functions)


def traced(functions: dict) -> dict:
    """`{name: (function, input_signature)}` -> `{name: tf.function}`, each traced on the
    stock path (the speed switch's output projection keeps a second copy of the embedding
    table, which a device file would carry) with the tricks a device file takes
    (`kt.fast.for_device_files`: beam search's top-k by blocks); the search inside is
    `file_plan`'s, one loop."""
    found = {}
    with fast.switched(False), fast.for_device_files():
        for name, (function, spec) in functions.items():
            found[name] = tf.function(function, input_signature=spec, autograph=False)
            found[name].get_concrete_function()
    return found


def translator(model, vocabularies, settings: DecodingSettings, *, table: str = "gather"):
    """`translate(text, source_code, target_code) -> {"translations": [batch]}`: the text
    cut into ids, the search over the model's variables (each read once, outside the
    search's loop), the ids as text. Codes:
    int32 `[batch]` ids, -1 for none, -2 for a code the vocabulary lacks (the row answers
    ""); `target_code` None: no target prefix."""
    max_length = model.config.max_length
    source, target = vocabularies.source, vocabularies.target
    pieces = vocabularies.pieces  # SentencePiece's pieces numbered by a list (OPUS-MT, NLLB)
    # SentencePiece's ids -> the vocabulary's (the same where the model is its own).
    ours = tf.constant(litert_text.our_ids(source), tf.int32) if pieces else None
    cut = source_cut(source, max_length)
    trailing = None  # NLLB's tokenizer gives trailing whitespace a piece of its own
    if isinstance(cut, litert_bpe.BpeCut) and litert_text.trailing_piece(source):
        trailing = source.token_to_id(litert_text.WORD_BOUNDARY)
    surfaces = litert_text.surface_tables(
        *litert_text.piece_surfaces(
            target.get_vocabulary(),
            unk="" if pieces else litert_text.UNK_SURFACE,
            byte_pieces=not pieces,
            silent=target.special_tokens.values() if litert_text.is_nllb(target) else (),
        )
    )
    variables = list(model.variables)
    whole = table in ("gather", "embedding_lookup")  # the table read whole, then used
    tables = {id(t) for t in embedding_tables(model)} if whole else set()
    # "int8_rows": each table layer's int8 lookup copy (variables read below, as the model's).
    layers = table_layers(model) if table == "int8_rows" else []
    int8 = {layer: int8_lookup(layer.embeddings) for layer in layers}
    read_table = looked_up if table == "embedding_lookup" else gathered
    plan = file_plan(settings)

    def translate(text, source_code, target_code):
        if isinstance(cut, litert_bpe.BpeCut):
            source_ids = litert_text.bpe_source_ids(
                cut, text, source_code, max_length, ours, trailing
            )
        else:
            source_ids = litert_text.source_ids(cut, text, max_length, ours)
        if target_code is not None:  # a row with an unknown code translates nothing
            source_ids = blanked(source_ids, target_code == -2)
        # Each variable read once, here, outside the search's `while` loop, which captures
        # the values: the converter freezes these reads into constants. No copy of the
        # weights is held in Python or in the traced graphs, where constants would put one
        # in each signature's graph.
        constants = [
            (variable, read_table(value, text) if id(variable) in tables else value)
            for variable, value in ((v, tf.convert_to_tensor(v)) for v in variables)
        ]
        prefix = None if target_code is None else tf.maximum(target_code, 0)[:, None]
        lookups = {layer: lookup() for layer, lookup in int8.items()}
        with fast.device_lookups(lookups), keras.StatelessScope(state_mapping=constants):
            ids, _ = plan.search(model, source_ids, prefix)
        return {"translations": litert_text.translations(surfaces, ids, source_ids, max_length)}

    return translate


def file_plan(settings: DecodingSettings) -> DecodingPlan:
    """The search a file holds: the settings' own, traced as one loop (`phases=1`: the
    file holds the decoder step once, where the search's phases would each carry a copy).
    The prefixes are not the plan's: the file forces a language code's id (`translator`)."""
    return DecodingPlan(
        dataclasses.replace(settings, source_prefix=None, target_prefix=None),
        n_best=settings.n_best,
        phases=1,
    )


def source_cut(source, max_length: int):
    """The source text's cut: SentencePiece's BPE in builtin ops (`litert_bpe.BpeCut`) for
    a BPE model, tensorflow-text's `FastSentencepieceTokenizer` for a unigram one."""
    import tensorflow_text

    if litert_text.model_type(source.proto) == "BPE":
        longest = litert_text.longest_piece(source.proto)
        return litert_bpe.BpeCut(source.proto, max_chars=max_length * longest)
    return tensorflow_text.FastSentencepieceTokenizer(source.proto)


def codes(tokenizer) -> dict[str, int]:
    """A tokenizer's language codes (NLLB-200's) and their ids."""
    return {code: tokenizer.token_to_id(code) for code in language_codes(tokenizer)}


def language_ids(prefixes, codes: dict[str, int]):
    """Language codes, string `[batch]` -> their ids, int32 `[batch]`: -1 for "" (none), -2
    for a code not in `codes`."""
    match = tf.equal(prefixes[:, None], tf.constant(list(codes))[None, :])  # (batch, codes)
    index = tf.argmax(tf.cast(match, tf.int32), axis=1, output_type=tf.int32)
    ids = tf.gather(tf.constant(list(codes.values()), tf.int32), index)
    none = tf.where(tf.equal(prefixes, ""), -1, -2)
    return tf.where(tf.reduce_any(match, axis=1), ids, none)


def blanked(source_ids, rows):
    """Source ids with `rows` (bool `[batch]`) made EOS alone: nothing to translate."""
    column = tf.range(tf.shape(source_ids)[1])[None, :]
    eos_only = tf.where(column == 0, EOS_ID, PAD_ID)
    return tf.where(rows[:, None], eos_only, source_ids)


def embedding_tables(model) -> list:
    """The token embedding tables: each both a lookup (the embedding) and, tied, the
    output projection's weights."""
    return [layer.embeddings for layer in table_layers(model)]


def table_layers(model) -> list:
    """The token embedding table layers (each a `TransformerEmbedding`'s `token_embedding`),
    once each (a shared embedding is one)."""
    layers = {id(layer): layer for layer in (model.source_embedding, model.target_embedding)}
    return [layer.token_embedding for layer in layers.values()]


def int8_lookup(table, rows_at_once: int = 4096):
    """An embedding table's int8 lookup copy, for a file that also keeps the converter's
    int8 projection weights of it: `lookup() -> function(ids) -> rows`, called inside the
    traced signature (it reads the copy there, once, outside the search's loop). The copy is
    a `tf.Variable` the converter freezes into an int8 constant, `round(table / scale)` with
    one scale, `max|table| / 127` (a lookup's per-tensor quantization, as the converter's
    own); its rows are gathered, then cast and scaled: inside the loop, a step's rows only.
    Made `rows_at_once` rows at a time: no float32 copy of a large table beyond the model's.
    """
    vocab, width = table.shape
    peak = 0.0
    for start in range(0, vocab, rows_at_once):
        rows = table[start : start + rows_at_once]
        peak = max(peak, float(tf.reduce_max(tf.abs(rows))))
    scale = (peak or 1.0) / 127.0
    copy = tf.Variable(tf.zeros([vocab, width], tf.int8), trainable=False, name="int8_lookup")
    for start in range(0, vocab, rows_at_once):
        rows = table[start : start + rows_at_once]
        copy[start : start + rows_at_once].assign(
            tf.cast(tf.clip_by_value(tf.round(rows / scale), -127.0, 127.0), tf.int8)
        )

    def lookup():
        values = tf.convert_to_tensor(copy)
        return lambda ids: tf.cast(tf.gather(values, ids), tf.float32) * scale

    return lookup


def all_rows(vocab: int, text):
    """The ids 0 .. vocab - 1, int32 `[vocab]`, computed from the input (`text`, any
    `[batch]` tensor) so that the converter cannot fold a lookup of them into a constant."""
    return tf.range(tf.maximum(tf.shape(text)[0], vocab))[:vocab]


def gathered(value, text):
    """An embedding table `[vocab, d_model]` read through a lookup of all its rows: the
    constant then has one use, a lookup, so int8 stores it once, where a lookup (per-tensor
    scale) and the tied output projection (a scale a row) would each store their own int8
    copy."""
    vocab, width = value.shape
    rows = tf.gather(value, all_rows(vocab, text))
    return tf.reshape(rows, [vocab, width])


def looked_up(value, text):
    """An embedding table `[vocab, d_model]` read as `gathered` reads it, through LiteRT's
    EMBEDDING_LOOKUP op: the converter writes a function that says it implements
    "embedding_matmul" (`tf.function(experimental_implements=...)`, its composite of
    `tfl.embedding_lookup(ids, table)`) as that op, whose table ai-edge-quantizer quantizes
    (a GATHER's it leaves in float32)."""
    vocab, width = value.shape
    rows = _embedding_lookup(value, all_rows(vocab, text))
    return tf.reshape(rows, [vocab, width])


@tf.function(experimental_implements="embedding_matmul", autograph=False)
def _embedding_lookup(table, ids):
    """`table [vocab, width]`, `ids [n]` -> rows `[n, width]`: the converter's composite
    (its arguments in this order) made LiteRT's EMBEDDING_LOOKUP."""
    return tf.gather(table, ids)


__all__ = [
    "TABLE_READS",
    "blanked",
    "codes",
    "embedding_tables",
    "gathered",
    "int8_lookup",
    "language_ids",
    "looked_up",
    "signatures",
    "source_cut",
    "table_layers",
    "traced",
    "translate_text",
    "translator",
]
