"""Subword vocabularies: SentencePiece models learned from the training text, and tokenizers
that run inside `tf.data` and inside a SavedModel graph.

A vocabulary is trained with the `sentencepiece` package (so the special ids can be fixed:
pad 0, unk 1, bos 2, eos 3) and used through keras-hub's `SentencePieceTokenizer`, which
wraps tensorflow-text's in-graph SentencePiece op. Rules that users rely on:

- No text normalization ("identity" rule): casing, accents and punctuation come back as they
  were. Runs of whitespace collapse to one space and leading/trailing spaces are dropped.
- Byte fallback: a character never seen in training is encoded as UTF-8 bytes, so there is no
  unknown token and any Unicode text round-trips.
- Token ids exclude BOS/EOS; the data pipeline and the decoders add them.

Tokenizers survive reseeding: `tf.random.set_seed` (and `keras.utils.set_random_seed`)
clears TensorFlow's kernel cache, which held tensorflow-text's in-graph SentencePiece model;
`workarounds.keep_sentencepiece_model` keeps it elsewhere (tensorflow/text#570).

keras-hub and `sentencepiece` are imported by the functions that use them, so that importing
the special ids (as `data` and `export` do) loads neither.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from keras_transformer import _backends as backends
from keras_transformer import _logs
from keras_transformer import _workarounds as workarounds
from keras_transformer._files import atomic_write
from keras_transformer._manifest import read_manifest
from keras_transformer.special_ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID

if TYPE_CHECKING:
    import keras_hub

MODEL_TYPES = ("unigram", "bpe")
# Byte fallback needs 256 byte pieces, plus the 4 special ids and some room for real pieces.
MIN_VOCAB_SIZE = 300
MANIFEST = "manifest.json"  # sha256 of each SentencePiece model, written by Vocabularies.save
PIECES = "pieces.json"  # the vocabulary lists of piece tokenizers (imported OPUS-MT models)


def train_sentencepiece(
    sentences: Iterable[str],
    vocab_size: int,
    *,
    model_type: str = "unigram",
    max_sentences: int = 2_000_000,
    seed: int = 0,
) -> bytes:
    """Learns a SentencePiece model from `sentences` and returns its serialized proto.

    Args:
        sentences: iterable of str. The training text (source and target sides for a shared
            vocabulary).
        vocab_size: int. Pieces in the vocabulary, the 4 special ids and 256 byte pieces
            included. A soft limit: a small corpus may give fewer.
        model_type: str. "unigram" (Kudo, 2018) or "bpe". Defaults to "unigram".
        max_sentences: int. At most this many sentences, sampled, are used. Defaults to 2M.
        seed: int. Seed of SentencePiece's sampling. Defaults to 0.

    Returns:
        The model as bytes (what `make_tokenizer` and `save_vocabulary` take).
    """
    if model_type not in MODEL_TYPES:
        raise ValueError(f"model_type={model_type!r} must be one of {MODEL_TYPES}")
    if vocab_size < MIN_VOCAB_SIZE:
        raise ValueError(
            f"vocab_size={vocab_size} is too small: byte fallback needs at least "
            f"{MIN_VOCAB_SIZE} pieces"
        )
    import sentencepiece

    sentencepiece.set_random_generator_seed(seed)
    model = io.BytesIO()
    try:
        with _logs.native_logs():  # it loads what it learned: "precompiled_charsmap is empty"
            sentencepiece.SentencePieceTrainer.train(
                sentence_iterator=(s for s in sentences if s),
                model_writer=model,
                vocab_size=vocab_size,
                model_type=model_type,
                pad_id=PAD_ID,
                unk_id=UNK_ID,
                bos_id=BOS_ID,
                eos_id=EOS_ID,
                byte_fallback=True,
                normalization_rule_name="identity",
                character_coverage=1.0,
                hard_vocab_limit=False,
                input_sentence_size=max_sentences,
                shuffle_input_sentence=True,
                num_threads=os.cpu_count() or 1,
                minloglevel=2,
            )
    except RuntimeError as error:
        raise ValueError(f"SentencePiece could not learn a vocabulary: {error}") from None
    return model.getvalue()


def make_tokenizer(proto: bytes) -> keras_hub.tokenizers.SentencePieceTokenizer:
    """A keras-hub `SentencePieceTokenizer` for a SentencePiece model (bytes or a file path).

    Inside `tf.function` and `tf.data` it runs tensorflow-text's op; `tokenize` gives ragged
    int32 ids without BOS/EOS and `detokenize` skips the special ids (padding, BOS, EOS).
    It needs the tensorflow and tensorflow-text packages, on any Keras backend.
    """
    backends.require_tensorflow_package("kt.text's tokenizers")
    import keras_hub

    if isinstance(proto, (str, Path)):
        proto = Path(proto).read_bytes()
    with _logs.native_logs():  # the op logs loading a model without a normalization table
        tokenizer = keras_hub.tokenizers.SentencePieceTokenizer(proto=proto)
        workarounds.keep_sentencepiece_model(tokenizer, proto)  # survives reseeding
    pieces = [tokenizer.id_to_token(i) for i in (PAD_ID, UNK_ID, BOS_ID, EOS_ID)]
    if pieces != ["<pad>", "<unk>", "<s>", "</s>"]:
        raise ValueError(
            f"the SentencePiece model must have ids pad 0, unk 1, bos 2, eos 3; it has {pieces}"
        )
    return tokenizer


@dataclasses.dataclass(frozen=True)
class Vocabularies:
    """The source and target tokenizers of a model (one object when shared).

    Saved in a model directory as `vocab/shared.model`, or `vocab/source.model` and
    `vocab/target.model`.
    """

    source: keras_hub.tokenizers.SentencePieceTokenizer
    target: keras_hub.tokenizers.SentencePieceTokenizer

    @property
    def shared(self) -> bool:
        return self.source is self.target

    @classmethod
    def train(
        cls,
        sources: Iterable[str],
        targets: Iterable[str],
        vocab_size: int,
        *,
        shared: bool = True,
        model_type: str = "unigram",
        max_sentences: int = 2_000_000,
        seed: int = 0,
    ) -> Vocabularies:
        """Learns SentencePiece vocabularies from parallel text: one for both sides (a shared
        vocabulary, as the paper's 37,000 shared pieces for English-German, 5.1), or one per
        side.

        Args:
            sources: iterable of str. The source side of the training pairs.
            targets: iterable of str. The target side, aligned with `sources`.
            vocab_size: int. Pieces in each vocabulary, the 4 special ids (pad 0, unk 1, bos
                2, eos 3) and 256 byte pieces included. A soft limit: SentencePiece may learn
                fewer from a small corpus, so size a model with
                `vocabularies.target.vocabulary_size()` (and `.source`'s), not with this.
            shared: bool. One vocabulary for both sides (what `share_embeddings` needs);
                False learns one per side. Defaults to True.
            model_type: str. "unigram" (Kudo, 2018) or "bpe". Defaults to "unigram".
            max_sentences: int. Sentences sampled for learning (a shared vocabulary takes
                both sides of half as many pairs). Defaults to 2,000,000.
            seed: int. Seed of SentencePiece's sampling. Defaults to 0.

        Returns:
            `Vocabularies`, whose `save(folder)` writes the SentencePiece model(s).

        Examples:
            >>> import keras_transformer as kt
            >>> english = ["In the beginning God created the heaven and the earth.", "God is love."]
            >>> spanish = ["En el principio creó Dios los cielos y la tierra.", "Dios es amor."]
            >>> vocabularies = kt.text.Vocabularies.train(english, spanish, 300)  # 37,000: 5.1
            >>> vocabularies.shared, vocabularies.target.detokenize(
            ...     vocabularies.target.tokenize(["Dios es amor."]))
            (True, ['Dios es amor.'])
            >>> config = kt.TransformerConfig.preset(  # sized by the pieces actually learned
            ...     "tiny", vocab_size=vocabularies.target.vocabulary_size())
        """
        options = dict(model_type=model_type, max_sentences=max_sentences, seed=seed)
        sources, targets = list(sources), list(targets)
        if shared:
            tokenizer = make_tokenizer(
                train_sentencepiece(sources + targets, vocab_size, **options)
            )
            return cls(tokenizer, tokenizer)
        return cls(
            make_tokenizer(train_sentencepiece(sources, vocab_size, **options)),
            make_tokenizer(train_sentencepiece(targets, vocab_size, **options)),
        )

    @property
    def pieces(self) -> bool:
        """True for tokenizers that number SentencePiece's pieces by a vocabulary list (an
        imported OPUS-MT model's `PieceVocabularyTokenizer`s)."""
        return hasattr(self.source, "prefix_pattern")

    @property
    def files(self) -> dict:
        """File name -> tokenizer whose SentencePiece model it holds: `shared.model`, or
        `source.model` and `target.model`; `source.spm` and `target.spm` for piece
        vocabularies, whose lists go into `pieces.json`."""
        if self.pieces:
            return {"source.spm": self.source, "target.spm": self.target}
        if self.shared:
            return {"shared.model": self.source}
        return {"source.model": self.source, "target.model": self.target}

    @property
    def file_names(self) -> list[str]:
        """Every file `write` writes: `files`, and `pieces.json` for piece vocabularies."""
        return [*self.files, *([PIECES] if self.pieces else [])]

    def write(self, directory) -> None:
        """Writes the SentencePiece model(s) (and `pieces.json`) into `directory`, which
        exists: what an export ships beside the model."""
        directory = Path(directory)
        for name, tokenizer in self.files.items():
            atomic_write(directory / name, tokenizer.proto)
        if self.pieces:
            lists = {
                "source": self.source.pieces,
                "target": self.target.pieces,
                "prefix_pattern": self.source.prefix_pattern,
                "special_tokens": self.source.special_tokens,
            }
            if hasattr(self.source, "piece_rules"):  # a subclass's class and arguments
                lists.update(self.source.piece_rules())
            atomic_write(directory / PIECES, json.dumps(lists, ensure_ascii=False, indent=1))

    def save(self, directory) -> None:
        """Writes the vocabulary into `directory` (created if needed) with its manifest."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.write(directory)
        # Written last: a model trained with these files refuses any others.
        manifest = {
            name: hashlib.sha256((directory / name).read_bytes()).hexdigest()
            for name in self.file_names
        }
        atomic_write(directory / MANIFEST, json.dumps(manifest, indent=2))

    @classmethod
    def load(cls, directory) -> Vocabularies:
        """Reads what `save` wrote.

        Raises ValueError naming the file when a SentencePiece model is not the one `save`
        wrote (its sha256 is recorded in `manifest.json`): ids from another vocabulary would
        silently garble a model trained with this one.
        """
        directory = Path(directory)
        if (directory / MANIFEST).exists():
            manifest = read_manifest(directory / MANIFEST)
            for name, expected in manifest.items():
                path = directory / name
                if not path.exists():
                    raise FileNotFoundError(f"{path}: missing (listed in {directory / MANIFEST})")
                if hashlib.sha256(path.read_bytes()).hexdigest() != expected:
                    raise ValueError(
                        f"{path} is not the vocabulary this directory was made with (its "
                        f"sha256 differs from the one in {directory / MANIFEST}); restore "
                        "the original file: ids from another vocabulary garble the model"
                    )
        if (directory / PIECES).exists():
            from keras_transformer.tokenizers.pieces import PieceVocabularyTokenizer

            lists = json.loads((directory / PIECES).read_text(encoding="utf-8"))
            rules = dict(
                prefix_pattern=lists["prefix_pattern"], special_tokens=lists["special_tokens"]
            )
            tokenizer_class = PieceVocabularyTokenizer
            if "tokenizer" in lists:  # a subclass (NllbTokenizer): its class and arguments
                import keras

                import keras_transformer.tokenizers  # noqa: F401 (registers them all)

                tokenizer_class = keras.saving.get_registered_object(lists["tokenizer"])
                if tokenizer_class is None:
                    raise ValueError(
                        f"{directory / PIECES}: unknown tokenizer {lists['tokenizer']!r}"
                    )
                known = ("source", "target", "prefix_pattern", "special_tokens", "tokenizer")
                rules.update({key: value for key, value in lists.items() if key not in known})
            return cls(
                tokenizer_class((directory / "source.spm").read_bytes(), lists["source"], **rules),
                tokenizer_class((directory / "target.spm").read_bytes(), lists["target"], **rules),
            )
        if (directory / "shared.model").exists():
            tokenizer = make_tokenizer(directory / "shared.model")
            return cls(tokenizer, tokenizer)
        if (directory / "source.model").exists() and (directory / "target.model").exists():
            return cls(
                make_tokenizer(directory / "source.model"),
                make_tokenizer(directory / "target.model"),
            )
        raise FileNotFoundError(
            f"{directory}: no vocabulary (shared.model, or source.model and target.model, "
            "or source.spm, target.spm and pieces.json)"
        )


def detokenize(tokenizer, ids) -> list[str]:
    """Decoder output ids `[batch, len]` (EOS-terminated, 0-padded) to Python strings.

    Eagerly this runs the `sentencepiece` library, the same code as the in-graph op.
    """
    ids = np.asarray(ids, "int32")
    texts = tokenizer.detokenize(ids.reshape(len(ids), -1))
    if hasattr(texts, "numpy"):  # a tensor of bytes (keras-hub's tokenizers give str)
        return [text.decode("utf-8") for text in texts.numpy()]
    return [str(text) for text in texts]


__all__ = [
    "BOS_ID",
    "EOS_ID",
    "MIN_VOCAB_SIZE",
    "MODEL_TYPES",
    "UNK_ID",
    "Vocabularies",
    "detokenize",
    "make_tokenizer",
    "train_sentencepiece",
]
