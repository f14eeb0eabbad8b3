"""A LiteRT file of builtin ops only: UTF-8 bytes in, UTF-8 bytes out, no string tensor
(`kt.export.export(..., format="litert", ops="builtin")`), for the stock LiteRT runtimes
(Android's, iOS's, LiteRT.js in a browser), which run LiteRT's builtin ops and have neither
string tensors nor tensorflow-text's kernels.

The file's signature `serving_default` takes `text`, int32 `[B, N]`: B texts' UTF-8 bytes,
a row each, 0-padded (a byte 0 ends the text; a longer text is cut to N bytes by its caller,
at a character's start; a row of zeros is an empty text), and gives `translations`, int32
`[B, M]`: each translation's UTF-8 bytes, 0-padded. B is 1 unless the export asks for more
(`batch`): each row is cut and translated as a file of one row would (an empty one gives an
empty answer). B, N and M are in the manifest (`"signatures"`), as is `"ops": "builtin"`. A
file of a vocabulary with language codes (an imported NLLB-200 model) also takes
`source_language` and `target_language`, int32 `[B]`: a row's index of a code in the
manifest's `languages.source` and `languages.target` (-1: none; an index out of the list:
the translation is ""). Inside it:

1. SentencePiece's cut over the bytes: unigram (`kt.export.litert_unigram.UnigramCut`:
   Viterbi over the pieces that start at each byte, a `WHILE` loop), or BPE with the
   model's normalizer (`kt.export.litert_bpe_bytes`: the precompiled charsmap, NFKC, then
   the merges), the source language's code first; the pieces cut to `max_length - 1`, then
   EOS, as the text file cuts them.
2. The search of every other door (`kt.decoding.DecodingPlan`), traced as `kt.export.litert`'s,
   the target language's code forced first.
3. Detokenization: each id's bytes from a table (`kt.export.litert_text.piece_surfaces`: the text
   file's, a word boundary a space but before the first piece that shows; language codes
   and special tokens none), laid end to end by a cumulative sum and a scatter.

What it does not hold (refused by name): a unigram model whose normalizer is not the
identity one (a precompiled character map: NFKC), user-defined pieces, a piece vocabulary
(OPUS-MT), M2M100's language codes; for a BPE model, what `kt.export.litert_bpe_bytes.
check_model` refuses. Where it differs from the text file: a "▁" written in the text stays
its three bytes (the text file reads it as a space); with the identity normalizer, tabs and
other whitespace than U+0020 are characters, as SentencePiece leaves them, but a text of
whitespace alone is blank only when it is spaces; a text is cut at N bytes before it is
normalized.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from keras_transformer.core import rules
from keras_transformer.export.litert_unigram import UnigramCut, check_model, compact
from keras_transformer.special_ids import PAD_ID


def surface_bytes(pieces: list[str], *, unk: str, byte_pieces: bool = True, silent=()) -> dict:
    """Each id's bytes as the text file's detokenization gives them
    (`kt.export.litert_text.piece_surfaces`, with its options), as arrays: `table`
    `[vocab, width]` (a space first where the piece starts a word, then its text), `lengths`
    and `spaces` `[vocab]`, and `shown` (whether an id gives anything)."""
    from keras_transformer.export.litert_text import piece_surfaces

    texts, spaces = piece_surfaces(pieces, unk=unk, byte_pieces=byte_pieces, silent=silent)
    surfaces = [b" " * space + text for text, space in zip(texts, spaces, strict=True)]
    width = max(1, max(len(s) for s in surfaces))
    table = np.zeros((len(surfaces), width), np.int32)
    for i, surface in enumerate(surfaces):
        table[i, : len(surface)] = list(surface)
    return {
        "table": table,
        "lengths": np.array([len(s) for s in surfaces], np.int32),
        "spaces": np.array(spaces, np.int32),
        "shown": np.array([len(s) > 0 for s in surfaces], np.int32),
    }


def detokenize(surfaces: dict, ids, source_ids, max_length: int):
    """Ids `[batch, out_len]` (EOS-terminated, 0-padded, out_len <= max_length) -> UTF-8
    bytes int32 `[batch, max_length * width]`, 0-padded: each id's bytes (`surface_bytes`),
    the first shown id's space left out; nothing where the source is EOS alone."""
    table = tf.constant(surfaces["table"])
    width = surfaces["table"].shape[1]
    empty = rules.nothing_to_translate(tf.math.count_nonzero(source_ids, axis=1))
    ids = tf.where(empty[:, None], PAD_ID, ids)
    ids = tf.pad(ids, [[0, 0], [0, max_length - tf.shape(ids)[1]]])
    batch = tf.shape(ids)[0]
    shown = tf.gather(tf.constant(surfaces["shown"]), ids) > 0  # (batch, max_length)
    first = tf.argmax(tf.cast(shown, tf.int32), axis=1, output_type=tf.int32)[:, None]
    column = tf.range(max_length)[None, :]
    skip = tf.gather(tf.constant(surfaces["spaces"]), ids) * tf.cast(column == first, tf.int32)
    lengths = tf.gather(tf.constant(surfaces["lengths"]), ids) - skip  # (batch, max_length)
    offsets = tf.range(width)[None, None, :] + skip[..., None]
    rows = tf.gather(table, ids)  # (batch, max_length, width)
    shifted = tf.gather(rows, tf.minimum(offsets, width - 1), batch_dims=2)
    keep = tf.range(width)[None, None, :] < lengths[..., None]
    out = max_length * width
    flat = tf.reshape(shifted, [batch, out])
    return tf.maximum(compact(flat, tf.reshape(keep, [batch, out]), out), 0)


def check_vocabularies(vocabularies) -> None:
    """Raises ValueError naming a vocabulary a builtin-ops file does not hold (yet): a piece
    vocabulary or language codes but NLLB-200's, a SentencePiece model its cut does not cut
    as SentencePiece does."""
    from keras_transformer.decoding.settings import language_codes
    from keras_transformer.export import litert_bpe_bytes, litert_text

    source, target = vocabularies.source, vocabularies.target
    nllb = litert_text.is_nllb(source) and litert_text.is_nllb(target)
    if not nllb and (vocabularies.pieces or language_codes(source) or language_codes(target)):
        raise ValueError(
            f"a {type(source).__name__} vocabulary (a piece list or language codes: OPUS-MT, "
            "M2M100) is not in builtin-ops LiteRT files yet: ops='text' writes it"
        )
    if litert_text.model_type(source.proto) == "BPE":
        litert_bpe_bytes.check_model(source.proto)
    else:
        check_model(source.proto)


def source_cut(vocabularies, max_length: int):
    """`cut(data, source_code) -> source ids`: UTF-8 bytes `[batch, N]` and the source
    language's id `[batch]` (-1 none, -2 unknown; None for a vocabulary without codes) ->
    int32 `[batch, len]`, the pieces cut to `max_length - 1`, then EOS, 0-padded, as the
    text file lays them out: SentencePiece's unigram cut (`UnigramCut`), or for a BPE model
    (NLLB-200's) `kt.export.litert_bpe_bytes.BpeBytesCut` laid out by
    `kt.export.litert_text.bpe_source_ids` (the code first, a piece of trailing whitespace)."""
    from keras_transformer.export import litert_bpe_bytes, litert_text

    source = vocabularies.source
    if litert_text.model_type(source.proto) != "BPE":
        unigram = UnigramCut(source.proto, max_length)
        return lambda data, source_code: unigram(data)
    longest = litert_text.longest_piece(source.proto)
    cut = litert_bpe_bytes.BpeBytesCut(source.proto, max_chars=max_length * longest)
    ours = tf.constant(litert_text.our_ids(source), tf.int32) if vocabularies.pieces else None
    trailing = None
    if litert_text.trailing_piece(source):
        trailing = source.token_to_id(litert_text.WORD_BOUNDARY)

    def bpe(data, source_code):
        if source_code is None:
            source_code = tf.fill(tf.shape(data)[:1], -1)
        return litert_text.bpe_source_ids(cut, data, source_code, max_length, ours, trailing)

    return bpe


LANGUAGE_INPUTS = ("source_language", "target_language")


def language_table(vocabularies, settings) -> dict | None:
    """A vocabulary's language codes (NLLB-200's) as the file takes them: by side, the ids
    of the codes in the manifest's `languages` order, and the index of the settings' code
    (-1: none); None for a vocabulary without codes."""
    from keras_transformer.decoding.settings import language_codes

    sides = {"source": vocabularies.source, "target": vocabularies.target}
    if not language_codes(vocabularies.target):
        return None
    table = {}
    for side, tokenizer in sides.items():
        codes = language_codes(tokenizer)
        setting = getattr(settings, f"{side}_prefix")
        table[side] = {
            "ids": [tokenizer.token_to_id(code) for code in codes] or [-2],
            "default": codes.index(setting) if setting in codes else -1,
        }
    return table


def language_ids(index, side: dict):
    """Indices into a side's codes, int32 `[batch]` -> the codes' ids: -1 for -1 (none),
    -2 for any other index out of the list (a code the file lacks: the row answers "")."""
    ids = side["ids"]
    inside = (index >= 0) & (index < len(ids))
    found = tf.gather(tf.constant(ids, tf.int32), tf.clip_by_value(index, 0, len(ids) - 1))
    return tf.where(inside, found, tf.where(index == -1, -1, -2))


def signatures(
    model,
    vocabularies,
    settings,
    *,
    input_bytes: int | None = None,
    table: str = "gather",
    batch: int = 1,
) -> dict:
    """The builtin-ops file's `serving_default`, traced: `text` int32 `[batch,
    input_bytes]` (UTF-8, 0-padded), and for a vocabulary with language codes (NLLB-200's)
    `source_language` and `target_language` int32 `[batch]` (`LANGUAGE_INPUTS`: a code's
    index in the manifest's `languages`, -1 for none) -> `{"translations": int32 [batch,
    output_bytes]}` (the module doc), and the two sizes: `(functions, input_bytes,
    output_bytes)`. `input_bytes` None: the model's `max_length` times the longest piece's
    bytes (a text cut there is never cut before the `max_length - 1` pieces the text file
    keeps, but where the normalizer drops or joins characters). `table`: how the tied
    embedding table is read, one of `kt.export.litert_trace.TABLE_READS` but
    "embedding_lookup" (as `kt.export.litert.write` picks it for the weights' type).
    `batch`: the texts of one run (`check_batch`), each row searched as alone."""
    import keras

    from keras_transformer import fast
    from keras_transformer.export.litert_trace import blanked, embedding_tables, file_plan, gathered

    if table not in ("constant", "gather"):
        raise ValueError(f"table={table!r}: a builtin-ops file reads 'constant' or 'gather'")

    check_vocabularies(vocabularies)
    max_length = model.config.max_length
    cut = source_cut(vocabularies, max_length)
    languages = language_table(vocabularies, settings)
    if input_bytes is None:
        pieces = vocabularies.source.get_vocabulary()
        input_bytes = max_length * max(len(piece.encode()) for piece in pieces)
    surfaces = surface_bytes(vocabularies.target.get_vocabulary(), **target_surfaces(vocabularies))
    output_bytes = max_length * surfaces["table"].shape[1]
    weights = [(variable, variable.numpy()) for variable in model.variables]
    tables = {id(t) for t in embedding_tables(model)} if table == "gather" else set()
    plan = file_plan(settings)  # the text file's search, as one loop

    def serving_default(text, *language):
        source_code = target_code = prefix = None
        if languages is not None:
            source_code = language_ids(language[0], languages["source"])
            target_code = language_ids(language[1], languages["target"])
        source_ids = cut(text, source_code)
        if target_code is not None:  # a row with an unknown code translates nothing
            source_ids = blanked(source_ids, (target_code == -2) | (source_code == -2))
            prefix = tf.maximum(target_code, 0)[:, None]  # 0: nothing forced
        # Each variable read as a constant of its value (`kt.export.litert.signatures`).
        constants = [
            # `gathered` needs a length the converter cannot fold: the source's.
            (
                variable,
                gathered(value, source_ids[0]) if id(variable) in tables else tf.constant(value),
            )
            for variable, value in weights
        ]
        with keras.StatelessScope(state_mapping=constants):
            ids, _ = plan.search(model, source_ids, prefix)
        out = detokenize(surfaces, ids[:, :max_length], source_ids, max_length)
        return {"translations": tf.reshape(out, [batch, output_bytes])}

    spec = [tf.TensorSpec([batch, input_bytes], tf.int32, "text")]
    if languages is not None:
        spec += [tf.TensorSpec([batch], tf.int32, name) for name in LANGUAGE_INPUTS]
    # The stock path: as `kt.export.litert.signatures` traces it.
    with fast.switched(False):
        traced = tf.function(serving_default, input_signature=spec, autograph=False)
        traced.get_concrete_function()
    return {"serving_default": traced}, input_bytes, output_bytes


def target_surfaces(vocabularies) -> dict:
    """`piece_surfaces`' options for the target vocabulary, as the text file's
    (`kt.export.litert_trace.translator`): a piece vocabulary leaves `<unk>` out and has no
    byte pieces; NLLB-200's language codes and special tokens give nothing."""
    from keras_transformer.export import litert_text
    from keras_transformer.export.litert_text import UNK_SURFACE

    target, pieces = vocabularies.target, vocabularies.pieces
    return {
        "unk": "" if pieces else UNK_SURFACE,
        "byte_pieces": not pieces,
        "silent": target.special_tokens.values() if litert_text.is_nllb(target) else (),
    }


def described_signatures(
    input_bytes: int, output_bytes: int, batch: int = 1, *, languages: bool = False
) -> dict:
    """The file's signature as the manifest describes it: `batch` rows of `input_bytes`
    in, of `output_bytes` out (`languages`: it takes `LANGUAGE_INPUTS`, indices into the
    manifest's `languages`)."""
    inputs = {"text": f"int32 [{batch}, {input_bytes}] UTF-8 bytes, 0-padded"}
    if languages:
        inputs |= {
            f"{side}_language": f"int32 [{batch}] index in languages.{side}, -1 for none"
            for side in ("source", "target")
        }
    return {
        "serving_default": {
            "inputs": inputs,
            "outputs": {"translations": f"int32 [{batch}, {output_bytes}] UTF-8 bytes, 0-padded"},
            "batch": batch,
            "input_bytes": input_bytes,
            "output_bytes": output_bytes,
        }
    }


def check_batch(batch, ops: str, quantize: str | None) -> None:
    """Raises ValueError naming a `batch` a file cannot take: not a whole number of 1 or
    more, or above 1 in a file that is not builtin-ops (a text file takes any number of
    strings a run) or with int4 weights (not in builtin-ops files)."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch={batch!r}: the texts of one run of the file, 1 or more")
    if batch > 1 and ops != "builtin":
        raise ValueError(
            f"batch={batch} applies to ops='builtin' only (a text file takes any number of "
            "strings a run)"
        )
    if batch > 1 and quantize == "int4":
        raise ValueError(
            f"batch={batch} with quantize='int4': int4 is not in builtin-ops files "
            "(ops='builtin') yet"
        )


def check_builtin(ops: list[str]) -> None:
    """Raises ValueError naming every op of `ops` that is not a LiteRT builtin."""
    other = [op for op in ops if not op.isupper() or not op.replace("_", "").isalnum()]
    if other:
        raise ValueError(f"the builtin-ops LiteRT file would hold other ops: {other}")


__all__ = [
    "LANGUAGE_INPUTS",
    "check_batch",
    "check_builtin",
    "check_vocabularies",
    "described_signatures",
    "detokenize",
    "language_ids",
    "language_table",
    "signatures",
    "source_cut",
    "surface_bytes",
    "target_surfaces",
]
