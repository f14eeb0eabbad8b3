"""What a Marian (OPUS-MT) checkpoint's generation settings give this library's decoding
(generation_config.json, or config.json's where a checkpoint converted before transformers
wrote that file has none): the settings in this library's terms (`decoding_defaults`), the
`DecodingSettings` an import starts from (`decoding_settings`, with transformers' Marian's
values where they set none), the refusal of language codes, which a Marian model does not take
(`refuse_languages`), and the sentences that say what an import decides where the checkpoint
leaves it open (`import_notes`). `marian` converts the checkpoint and offers these names too.
"""

from __future__ import annotations

from keras_transformer.pretrained import bart
from keras_transformer.pretrained.marian_checkpoint import (
    Checkpoint,
    MarianError,
    number,
    read_json,
    shared_embeddings,
    table_rows,
)

# transformers' length penalty exponent where generation_config.json sets none (it divides a
# score by |Y| ** alpha, this library by ((5 + |Y|) / 6) ** alpha).
LENGTH_PENALTY = 1.0


def decoding_defaults(generation: dict, where: str = "generation_config.json") -> dict:
    """`bart.decoding_defaults`: the decoding settings generation_config.json sets (beam_size,
    length_penalty, max_length), refusing with `MarianError`."""
    return bart.decoding_defaults(generation, where, MarianError)


def decoding_settings(checkpoint: Checkpoint):
    """The `DecodingSettings` of a checkpoint: the beam size and length penalty that its
    generation settings set (`decoding_defaults`), and where they set none what transformers'
    Marian decodes with: 4 beams (this library's default too) and `LENGTH_PENALTY`."""
    from keras_transformer.decoding.settings import DecodingSettings

    defaults = decoding_defaults(checkpoint.generation, checkpoint.generation_source)
    return DecodingSettings(
        beam_size=defaults.get("beam_size", DecodingSettings.beam_size),
        length_penalty=defaults.get("length_penalty", LENGTH_PENALTY),
    )


def refuse_languages(checkpoint: Checkpoint, source_language, target_language) -> None:
    """`MarianError` for any language code asked for: a Marian model takes none (a
    multilingual one reads its target language from a >>xxx<< token in the source text)."""
    for flag, language in (("target", target_language), ("source", source_language)):
        if language is not None:
            raise MarianError(
                f"--{flag}-language={language}: {checkpoint.path} is a Marian model, which takes "
                "no language code (a multilingual one reads a >>xxx<< token at the start of the "
                "source text: trainers.evaluate and trainers.export put it there with "
                "--source-prefix '>>spa<<')"
            )


def import_notes(checkpoint: Checkpoint) -> list[str]:
    """What the import decides where the checkpoint leaves it open, a sentence each, for an
    importer to print and record: the decoding defaults of this library that apply where the
    generation settings are null or absent, generation settings read from config.json, a
    decoder_vocab_size that transformers does not use, a table row that no piece names."""
    from keras_transformer.decoding import DecodingSettings

    notes = []
    config, generation = checkpoint.config, checkpoint.generation
    source = checkpoint.generation_source
    if source == "config.json" and generation:
        settings = ", ".join(f"{key}={value!r}" for key, value in generation.items())
        notes.append(
            f"no generation_config.json: config.json's generation settings apply, as "
            f"transformers reads them ({settings})"
        )
    defaults = DecodingSettings()
    state = {True: "is null", False: "is not set"}
    if generation.get("num_beams") is None:
        notes.append(
            f"{source}: num_beams {state['num_beams' in generation]}; this library's default "
            f"beam size, {defaults.beam_size}, applies"
        )
    if generation.get("max_length") is None:
        notes.append(
            f"{source}: max_length {state['max_length' in generation]}; this library's default "
            f"length limit applies (the source's length + {defaults.max_extra_length} tokens, "
            "within the model's positions)"
        )
    where = "config.json"
    if shared_embeddings(config, where) and config.get("decoder_vocab_size") is not None:
        rows = table_rows(config, where)[0]
        if number(config, "decoder_vocab_size", int, where) != rows:
            notes.append(
                f"config.json: decoder_vocab_size={config['decoder_vocab_size']} is not used: "
                f"with shared embeddings transformers gives every table vocab_size={rows} rows, "
                "and so does the import"
            )
    target = checkpoint.path / "target_vocab.json"
    sides = [("source", checkpoint.path / "vocab.json"), ("target", target)]
    if not target.exists():  # one vocabulary, one note
        sides = [("shared", checkpoint.path / "vocab.json"), ("shared", None)]
    for (side, file), rows in zip(sides, table_rows(config, where), strict=True):
        size = len(read_json(file)) if file else rows
        if rows == size + 1:
            notes.append(
                f"{file.name}: the {side} embedding table has a row beyond its {size} ids "
                f"(id {size}); kept, as transformers keeps it in the softmax, as an id that no "
                "text gives and that decodes to nothing"
            )
    return notes


__all__ = [
    "LENGTH_PENALTY",
    "decoding_defaults",
    "decoding_settings",
    "import_notes",
    "refuse_languages",
]
