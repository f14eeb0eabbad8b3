"""The source prefix setting (`DecodingSettings.source_prefix`): the rule that puts it in
front of a source, in Python and in the graph alike, and the check of its language codes."""

import pytest
import tensorflow as tf

from keras_transformer.decoding.settings import (
    KEEPS_ITS_SOURCE,
    DecodingSettings,
    check_source_prefix,
    with_source_prefix,
)

SOURCES = [
    "Hello",
    "eng_Latn Hello",
    "  eng_Latn Hello",
    "eng_Latn",
    "eng_LatnHello",  # not a word of its own: prefixed
    ">>spa<< Hola",
    "__en__ Hi",
    "ENG_latn x",
    "",
    " \u3000 ",
    "\u3000fra_Latn\u3000x",
    "\x1c",
    "\x85",
    "a\nb",
    "Hello eng_Latn",
]


def test_python_and_the_graph_leave_the_same_sources_as_they_are():
    kept = tf.strings.regex_full_match(SOURCES, KEEPS_ITS_SOURCE).numpy().tolist()
    in_python = [with_source_prefix(text, "spa_Latn") == text for text in SOURCES]
    assert kept == in_python
    assert in_python.count(False) == 4  # Hello, eng_LatnHello, a\nb, Hello eng_Latn


def test_the_prefix_goes_first_with_one_space():
    assert with_source_prefix("Hello world", "eng_Latn") == "eng_Latn Hello world"
    assert with_source_prefix("Hola", ">>fra<<") == ">>fra<< Hola"
    assert with_source_prefix("fra_Latn Salut", "eng_Latn") == "fra_Latn Salut"
    assert with_source_prefix("   ", "eng_Latn") == "   "
    assert with_source_prefix("Hello", None) == "Hello"


def test_the_setting_is_checked_and_round_trips():
    settings = DecodingSettings(source_prefix="eng_Latn")
    assert DecodingSettings.from_dict(settings.to_dict()) == settings
    assert settings.replace(beam_size=2).source_prefix == "eng_Latn"
    for bad in ("", "  ", 3):
        with pytest.raises(ValueError, match="source_prefix="):
            DecodingSettings(source_prefix=bad)


class _Codes:
    language_codes = ["eng_Latn", "spa_Latn"]


class _Pieces:
    def get_vocabulary(self):
        return ["<pad>", "<unk>", "<s>", "</s>", ">>spa<<", ">>fra<<", "▁Hola"]

    def token_to_id(self, token):
        pieces = self.get_vocabulary()
        return pieces.index(token) if token in pieces else 1


def test_a_language_code_the_vocabulary_lacks_is_refused_by_name():
    check_source_prefix("eng_Latn", _Codes())
    check_source_prefix(">>spa<<", _Pieces())
    check_source_prefix("Dear sir:", _Codes())  # plain text passes
    with pytest.raises(ValueError, match=r"'eng_latn'.*did you mean 'eng_Latn'"):
        check_source_prefix("eng_latn", _Codes())
    with pytest.raises(ValueError, match=r"'>>deu<<' is not one of .* \(>>spa<<, >>fra<<\)"):
        check_source_prefix(">>deu<<", _Pieces())
    with pytest.raises(ValueError, match="source vocabulary has none"):
        check_source_prefix("eng_Latn", object())
    with pytest.raises(ValueError, match="--source-prefix="):
        check_source_prefix("xxx_Zzzz", _Codes(), where="--source-prefix")


def test_the_programs_prefix_flags_refuse_blank_text_by_name(capsys):
    import argparse

    from trainers import flags

    parser = argparse.ArgumentParser(prog="kt-evaluate")
    flags.add_prefixes(parser)
    assert parser.parse_args(["--source-prefix", "eng_Latn"]).source_prefix == "eng_Latn"
    for flag in ("--source-prefix", "--target-prefix"):
        with pytest.raises(SystemExit) as exit:
            parser.parse_args([flag, " "])
        assert exit.value.code == 2
        assert f"argument {flag}: must not be blank" in capsys.readouterr().err
