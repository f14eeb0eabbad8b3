"""Readers of published checkpoints, into this library's `Transformer` and tokenizers.

bart            what the BART family shares in converting: the config's sizes and checks,
                the weight-name map, the decoding defaults; `convert` runs a family's
                converter (keras-hub's protocol: `convert_config`, `convert_weights`,
                `convert_tokenizer`)
bart_checkpoint what the BART family shares in reading: config.json, generation_config.json
                and the weights read and checked (without torch)
marian          OPUS-MT (Marian) models in Hugging Face transformers' format: `load_marian`;
                the directory read by `marian_checkpoint`, the vocabularies by `marian_vocab`
m2m100          NLLB-200 and M2M100 (m2m100_418M, 1.2B) models in Hugging Face transformers'
                format: `load_m2m100`; the directory read by `m2m100_checkpoint`, their
                tokenizer files by `nllb_vocab` (NLLB-200's) and `m2m100_vocab` (M2M100's own)
checkpoint      deprecated alias of `marian`

Their tokenizers (`PieceVocabularyTokenizer`, `NllbTokenizer`, `M2M100Tokenizer`) live in
`kt.tokenizers`.

`load(path)` reads any of them, choosing by config.json's `model_type`.
"""

from keras_transformer._backends import require_tensorflow

require_tensorflow("kt.pretrained")

import json  # noqa: E402
from pathlib import Path  # noqa: E402

from keras_transformer.pretrained.m2m100 import M2M100Error, load_m2m100  # noqa: E402
from keras_transformer.pretrained.marian import load_marian  # noqa: E402

# config.json's model_type -> the reader of such a checkpoint directory.
LOADERS = {"marian": load_marian, "m2m_100": load_m2m100}


def model_type(path) -> str:
    """The `model_type` of a checkpoint directory's config.json; ValueError naming the file
    when there is none or it is not one this library reads."""
    config_path = Path(path) / "config.json"
    if not Path(path).is_dir():
        raise ValueError(f"{path}: not a directory (expected a Hugging Face checkpoint)")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{config_path}: missing") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"{config_path}: not valid JSON ({error})") from None
    found = config.get("model_type") if isinstance(config, dict) else None
    if found not in LOADERS:
        raise ValueError(
            f"{config_path}: model_type={found!r} is not one this library reads "
            f"(it reads {', '.join(repr(t) for t in LOADERS)})"
        )
    return found


def load(path):
    """A Hugging Face checkpoint directory as `(model, vocabularies)`: an OPUS-MT (Marian,
    `model_type: marian`), NLLB-200 or M2M100 (`model_type: m2m_100`) model, by config.json's
    `model_type`. Nothing is built before the directory is read and checked.

    Examples:
        Skipped by the doctests: it needs a checkpoint downloaded beforehand.

        >>> import keras_transformer as kt
        >>> model, vocabularies = kt.pretrained.load("nllb-200-distilled-600M")  # doctest: +SKIP
    """
    return LOADERS[model_type(path)](path)


__all__ = ["M2M100Error", "load", "load_m2m100", "load_marian", "model_type"]
