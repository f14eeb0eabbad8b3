"""The converters of published checkpoints behind one contract (STYLE 21): `CheckpointFamily`,
the `typing.Protocol` that each family of checkpoints implements whole (`marian.FAMILY`:
OPUS-MT; `m2m100.FAMILY`: NLLB-200 and M2M100), and `FAMILIES`, the one table that picks the
family by config.json's `model_type`.

Every door that takes a checkpoint goes through `import_checkpoint`: `kt.pretrained.load`,
`TransformerSeq2SeqLM.from_preset` and `trainers.import_pretrained` alike, so none of them
names a family. It runs the contract in one order, the same for every family: the checkpoint
read and checked whole (config.json, the generation settings, the tokenizer files, the
weights' names, shapes and tied copies), its decoding settings and languages, what the import
decided (notes) and what it records, and last the model built and its weights set
(`bart.convert`, keras-hub's `convert_config`, `convert_tokenizer`, `convert_weights`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol

from keras_transformer.pretrained import bart, m2m100, marian
from keras_transformer.pretrained.bart_checkpoint import Checkpoint, CheckpointError

if TYPE_CHECKING:
    from keras_transformer.config import TransformerConfig
    from keras_transformer.decoding.settings import DecodingSettings
    from keras_transformer.model import Transformer
    from keras_transformer.text import Vocabularies


class CheckpointFamily(Protocol):
    """A family of published checkpoints that this library converts: what `import_checkpoint`
    asks of each, in the order it asks. Each method refuses with the family's subclass of
    `CheckpointError`, the message naming the file and the key.

    Attributes:
        model_type: str. config.json's `model_type` of the family's checkpoints.
        title: str. The name users know the checkpoints by ("OPUS-MT", "NLLB-200").
    """

    model_type: str
    title: str

    def read_checkpoint(self, path) -> Checkpoint:
        """The checkpoint directory `path` read and checked whole before anything is built:
        config.json (every value the model's config takes), the generation settings, the
        tokenizer files, and the weights (every one the model takes, of its shape, a tied
        copy equal to its table, nothing left over). Its `files` are those the import reads."""

    def convert_config(self, config: dict, where: str) -> TransformerConfig:
        """keras-hub's `convert_config`: the `TransformerConfig` of config.json (`where`)."""

    def convert_tokenizer(self, checkpoint: Checkpoint) -> Vocabularies:
        """keras-hub's `convert_tokenizer`: the checkpoint's tokenizers, in this library's ids."""

    def convert_weights(self, model, checkpoint: Checkpoint) -> None:
        """keras-hub's `convert_weights`: every weight of `model` (built from
        `convert_config`) set from the checkpoint, in this library's ids."""

    def decoding_settings(self, checkpoint: Checkpoint) -> DecodingSettings:
        """The `DecodingSettings` that the checkpoint's generation settings give, with what
        transformers decodes with where they set none."""

    def with_languages(
        self,
        checkpoint: Checkpoint,
        settings: DecodingSettings,
        source_language: str | None,
        target_language: str | None,
    ) -> DecodingSettings:
        """`settings` with the source and target languages asked for (None: none), checked
        against the checkpoint; a family whose models take no language refuses any."""

    def ignored_generation_settings(self, checkpoint: Checkpoint) -> list[str]:
        """The generation settings that this library's decoding does not apply, as
        "key=value" (empty where there are none)."""

    def import_notes(self, checkpoint: Checkpoint, settings: DecodingSettings) -> list[str]:
        """What the import decides where the checkpoint leaves it open, a sentence each,
        given the decoding settings it ends with (empty where it decides nothing)."""

    def record(self, checkpoint: Checkpoint) -> dict:
        """The facts of a record of the import (`bart.provenance`): the format, the name and
        transformers version config.json gives, the generation settings in this library's
        terms, and those not applied."""


# config.json's model_type -> the family of checkpoints that reads it: the one table.
FAMILIES: dict[str, CheckpointFamily] = {
    family.model_type: family for family in (marian.FAMILY, m2m100.FAMILY)
}


class ImportedCheckpoint(NamedTuple):
    """A checkpoint read, checked and converted (`import_checkpoint`).

    Attributes:
        model: the `keras_transformer.Transformer` holding its weights.
        vocabularies: its `keras_transformer.text.Vocabularies`.
        decoding: its `DecodingSettings`, with the languages asked for.
        files: the checkpoint's files that were read.
        record: the facts of its provenance (`CheckpointFamily.record`).
        notes: what the import decided, a sentence each.
        ignored: the generation settings that this library's decoding does not apply.
    """

    model: Transformer
    vocabularies: Vocabularies
    decoding: DecodingSettings
    files: list[Path]
    record: dict
    notes: list[str]
    ignored: list[str]


def model_type(path) -> str:
    """The `model_type` of a checkpoint directory's config.json, a key of `FAMILIES`;
    `CheckpointError` naming the file when there is none or it is not one this library
    reads."""
    config_path = Path(path) / "config.json"
    if not Path(path).is_dir():
        raise CheckpointError(f"{path}: not a directory (expected a Hugging Face checkpoint)")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{config_path}: missing") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{config_path}: not valid JSON ({error})") from None
    found = config.get("model_type") if isinstance(config, dict) else None
    if found not in FAMILIES:
        raise CheckpointError(
            f"{config_path}: model_type={found!r} is not one this library reads "
            f"(it reads {', '.join(repr(t) for t in FAMILIES)})"
        )
    return found


def import_checkpoint(
    path, *, source_language: str | None = None, target_language: str | None = None
) -> ImportedCheckpoint:
    """A Hugging Face checkpoint directory read, checked and converted by its family
    (`FAMILIES`, by config.json's `model_type`), with everything an importer records.

    Everything is read and checked, the languages included, before the model is built.

    Args:
        path: str or path. The checkpoint directory: OPUS-MT (Marian, `model_type: marian`),
            NLLB-200 or M2M100 (`model_type: m2m_100`).
        source_language: str or None. The language code put before every source text that
            lacks one (NLLB-200: "eng_Latn"); a family without language codes refuses it.
            Defaults to None.
        target_language: str or None. The language code every translation starts with
            (NLLB-200: "spa_Latn"); None keeps the checkpoint's own, if any. Defaults to None.

    Returns:
        An `ImportedCheckpoint`: the model, its vocabularies and decoding settings, the files
        read, the record of its provenance, the import's notes and the generation settings
        not applied.

    Raises:
        CheckpointError: the family's own (`MarianError`, `M2M100Error`), naming the file and
            the key of what is missing, unsupported or inconsistent.

    Examples:
        Skipped by the doctests: it needs an NLLB-200 checkpoint downloaded beforehand (the
        Hugging Face model directory of `facebook/nllb-200-distilled-600M`, here).

        >>> from keras_transformer import pretrained
        >>> imported = pretrained.import_checkpoint(  # doctest: +SKIP
        ...     "nllb-200-distilled-600M", target_language="spa_Latn")
        >>> imported.decoding.target_prefix  # doctest: +SKIP
        'spa_Latn'
    """
    family = FAMILIES[model_type(path)]
    checkpoint = family.read_checkpoint(path)
    settings = family.with_languages(
        checkpoint, family.decoding_settings(checkpoint), source_language, target_language
    )
    record = family.record(checkpoint)
    notes = family.import_notes(checkpoint, settings)
    ignored = family.ignored_generation_settings(checkpoint)
    model, vocabularies = bart.convert(family, checkpoint)
    return ImportedCheckpoint(
        model, vocabularies, settings, checkpoint.files, record, notes, ignored
    )


def load(path):
    """A Hugging Face checkpoint directory as `(model, vocabularies)`: an OPUS-MT (Marian,
    `model_type: marian`), NLLB-200 or M2M100 (`model_type: m2m_100`) model, read by its
    family (`FAMILIES`, by config.json's `model_type`). Nothing is built before the directory
    is read and checked.

    Examples:
        Skipped by the doctests: it needs a checkpoint downloaded beforehand.

        >>> import keras_transformer as kt
        >>> model, vocabularies = kt.pretrained.load("nllb-200-distilled-600M")  # doctest: +SKIP
    """
    family = FAMILIES[model_type(path)]
    return bart.convert(family, family.read_checkpoint(path))


__all__ = [
    "FAMILIES",
    "CheckpointFamily",
    "ImportedCheckpoint",
    "import_checkpoint",
    "load",
    "model_type",
]
