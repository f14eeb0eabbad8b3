"""`TransformerTokenizer`: a model's source and target vocabularies as one keras-hub
`Tokenizer`, saved with the model (preset assets, `.keras` files)."""

from __future__ import annotations

import keras
import keras_hub

from keras_transformer.config import PAD_ID
from keras_transformer.text import BOS_ID, EOS_ID, MANIFEST, UNK_ID, Vocabularies


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerTokenizer(keras_hub.tokenizers.Tokenizer):
    """The source and target SentencePiece models of a translation model, as one keras-hub
    `Tokenizer` (a shared vocabulary is one model for both sides).

    `tokenize` cuts source text (what the encoder reads), `tokenize_target` target text, and
    `detokenize` turns target ids back into text; ids are without BOS and EOS, which the
    preprocessor and the searches add. The vocabulary-wide methods (`vocabulary_size`,
    `get_vocabulary`, `id_to_token`, `token_to_id`) are the target side's: the side
    `generate` writes. The special ids are this library's everywhere: pad 0, unk 1, start
    (BOS) 2, end (EOS) 3. An imported OPUS-MT model's tokenizers (SentencePiece pieces
    numbered by its vocabulary list, `kt.pretrained`) are held the same way.

    The vocabulary files (`kt.text.Vocabularies.save`'s: the SentencePiece model(s), their
    sha256 manifest and, for an imported model, its piece lists) are the tokenizer's assets:
    `save_to_preset` writes them under `assets/tokenizer/`, and a `.keras` file carries them.

    Args:
        vocabularies: `kt.text.Vocabularies` or None. None makes an empty tokenizer that
            loading fills (`load_assets`). Defaults to None.
        **kwargs: other `keras_hub.tokenizers.Tokenizer` arguments (`name`...).

    Examples:
        >>> import keras_transformer as kt
        >>> from keras_transformer.models import TransformerTokenizer
        >>> vocabularies = kt.text.Vocabularies.train(  # or Vocabularies.load("runs/demo/vocab")
        ...     ["In the beginning God created the heaven and the earth."],
        ...     ["En el principio creó Dios los cielos y la tierra."], 300)
        >>> tokenizer = TransformerTokenizer(vocabularies)
        >>> tokenizer.detokenize(tokenizer.tokenize_target(["En el principio"]))
        ['En el principio']
    """

    def __init__(self, vocabularies: Vocabularies | None = None, **kwargs):
        super().__init__(**kwargs)
        self.vocabularies = vocabularies
        self.file_assets = [MANIFEST]  # `Vocabularies.save` writes it last, always
        self.pad_token_id = PAD_ID
        self.unk_token_id = UNK_ID
        self.start_token_id = BOS_ID
        self.end_token_id = EOS_ID
        self.built = True  # no weights: Keras's whole-model tools (quantize...) visit it

    def _vocabularies(self) -> Vocabularies:
        if self.vocabularies is None:
            raise ValueError(
                "This TransformerTokenizer has no vocabulary yet: make it with "
                "TransformerTokenizer(kt.text.Vocabularies...), or load it with "
                "TransformerSeq2SeqLM.from_preset"
            )
        return self.vocabularies

    @property
    def source(self):
        """The source side's tokenizer (a keras-hub `SentencePieceTokenizer`, or an imported
        model's `PieceVocabularyTokenizer`)."""
        return self._vocabularies().source

    @property
    def target(self):
        """The target side's tokenizer."""
        return self._vocabularies().target

    @property
    def special_token_ids(self) -> list[int]:
        """The ids `detokenize` leaves out: pad, start and end (and unk, as the
        SentencePiece op does)."""
        return [PAD_ID, UNK_ID, BOS_ID, EOS_ID]

    def tokenize(self, inputs):
        """Source text (str, list or string tensor) to ragged int32 ids, without EOS."""
        return self.source.tokenize(inputs)

    def tokenize_target(self, inputs):
        """Target text to ragged int32 ids, without BOS and EOS."""
        return self.target.tokenize(inputs)

    def detokenize(self, inputs):
        """Target ids (EOS-terminated, 0-padded, or ragged) to text."""
        return self.target.detokenize(inputs)

    def vocabulary_size(self) -> int:
        return self.target.vocabulary_size()

    def get_vocabulary(self) -> list[str]:
        return self.target.get_vocabulary()

    def id_to_token(self, id: int) -> str:
        return self.target.id_to_token(id)

    def token_to_id(self, token: str) -> int:
        return self.target.token_to_id(token)

    def save_assets(self, dir_path) -> None:
        """Writes the vocabulary files into `dir_path` (a preset's `assets/tokenizer/`, or
        a `.keras` file's assets)."""
        self._vocabularies().save(dir_path)

    def load_assets(self, dir_path) -> None:
        """Reads what `save_assets` wrote, checking each file against its sha256."""
        self.vocabularies = Vocabularies.load(dir_path)


__all__ = ["TransformerTokenizer"]
