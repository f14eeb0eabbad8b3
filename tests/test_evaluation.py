"""kt.evaluation: the Translator (text in, text out) and sacrebleu scores."""

import keras_transformer as kt
from tests import bible


def test_nothing_to_translate_gives_an_empty_translation_as_the_export_does():
    """An input with no source piece (empty, or only spaces) is translated to "", the
    export's rule (keras_transformer.export.savedmodel), whatever the untrained model says.
    (A tab is a piece of this vocabulary, byte fallback: translated, by the export too.)"""
    vocabularies = bible.vocabularies()
    size = vocabularies.source.vocabulary_size()
    model = kt.build_transformer(
        kt.TransformerConfig.preset("tiny", vocab_size=size, max_length=16)
    )
    translator = kt.evaluation.Translator(model, vocabularies, beam_size=1, max_extra_length=5)
    texts = ["", "In the beginning.", "   ", "God said."]
    translations = translator.translate(texts)
    assert translations[0] == translations[2] == "", translations
    assert translations[1] and translations[3], translations  # an untrained model's pieces
