"""NLLB-200's cut in LiteRT's builtin ops (`kt.export.litert_charsmap`: the precompiled
charsmap, NFKC; `kt.export.litert_bpe_bytes`: the BPE cut of UTF-8 bytes): SentencePiece's
normalizer and ids on the NLLB fixture over 200+ texts; the fixture's builtin-ops file, run
by LiteRT's stock interpreter with no custom op, translates as its text file, with the
languages of each request."""

import json
import math
import unicodedata

import numpy as np
import pytest
import sentencepiece
import tensorflow as tf

from keras_transformer import decoding, export
from keras_transformer.export import litert, litert_bpe_bytes, litert_builtin, litert_charsmap
from keras_transformer.serving.litert_bytes import decoded, encoded
from keras_transformer.special_ids import EOS_ID
from tests import bible
from tests.test_litert import NLLB, NLLB_LINES
from tests.test_litert_builtin import alike

PROTO = (NLLB / "sentencepiece.bpe.model").read_bytes()
WIDTH = 1024  # the test's input rows (bytes)
FULL_WIDTH = {c: chr(ord(c) + 0xFEE0) for c in map(chr, range(0x21, 0x7F))}
# Edge cases: accents composed and decomposed, NFKC's full-width letters, ligatures, a
# ligature of words, compatibility characters, Hangul jamo that NFKC composes, emojis (ZWJ
# sequences, skin tones, flags), Unicode spaces and controls (nmt_nfkc's rules), characters
# the vocabulary lacks (one <unk> a run), blank texts, invalid UTF-8 (U+FFFD), long texts.
EDGES = [
    "",
    " ",
    "   \t\n ",
    "\u200b",
    "\u200b \u200b",
    "Amén. ¿Qué? ¡Sí! Ñandú, façade, naïve, Zürich",
    unicodedata.normalize("NFD", "Amén. ¿Qué? ¡Sí! Ñandú, façade, naïve, Zürich"),
    "e\u0301 A\u0300\u0301 o\u0308\u0304 \u0301alone",
    "Ｈｅｌｌｏ， ｗｏｒｌｄ！ １２３",
    "ﬁne ﬂour ﬀ ﬃ ﬄ ﬅ ﬆ Ĳ ǆ",
    "ﷺ ﷻ ﷽",
    "Ⅻ ½ ² ℃ ㎏ ™ ℡ ㈱ ① ⑴ ⒜",
    "\u1100\u1161\u11a8 \u1112\u1161\u11ab \uac01",
    "ｶﾞｷﾞ ｱｲｳ ﾊﾟ",
    "😀 emoji 👍🏽 👩‍👩‍👧 🇪🇸 🏳️‍🌈",
    "x\u00a0y\u2003z\u3000w\u202fv \u00a8\u00af\u00b4",
    "a\u0001b\u0007c\u007fd\u200ce\u200df\ufeffg",
    "ЖЖ hello ЖЖЖ 漢字 Ж",
    "Jesus wept. ",
    "Jesus wept.\u3000",
    "  And   God said,  Let there be ",
    "a" * 300,
    "In the beginning " * 40,
    "ﬁ" * 200,
    "\u1100\u1161" * 100,
]


def texts() -> list[str]:
    """The edge cases, NLLB_LINES, and verses in English and Spanish, with Spanish ones in
    NFD and full-width forms: 212 texts."""
    english = list(bible.pairs("test", 100).sources)
    spanish = list(bible.pairs("test", 80).targets)
    return [
        *EDGES,
        *NLLB_LINES,
        *english,
        *spanish[:60],
        *(unicodedata.normalize("NFD", s) for s in spanish[60:70]),
        *("".join(FULL_WIDTH.get(c, c) for c in s) for s in spanish[70:80]),
    ]


@pytest.fixture(scope="module")
def traced_cut():
    cut = litert_bpe_bytes.BpeBytesCut(PROTO, max_chars=4 * WIDTH)
    return tf.function(cut, input_signature=[tf.TensorSpec([1, WIDTH], tf.int32)])


def test_the_charsmap_s_rules_are_sentencepiece_s_normalizer():
    """Every rule of the fixture's map (225,276: NFKC's and nmt_nfkc's) read from its trie:
    SentencePiece normalizes each key, alone, to its value (spaces as "▁", the ends'
    dropped)."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    model = pb.ModelProto()
    model.ParseFromString(PROTO)
    found = litert_charsmap.rules(model.normalizer_spec.precompiled_charsmap)
    assert len(found) > 200_000
    spm = sentencepiece.SentencePieceProcessor(model_proto=PROTO)
    keys = sorted(found)
    for key in keys[:: len(keys) // 2000]:
        value = found[key].decode().strip(" ")
        expected = "\u2581" + "\u2581".join(value.split()) if value.strip() else ""
        assert spm.normalize(key.decode()) == expected, key


def test_the_normalizer_is_sentencepiece_s(traced_cut):
    """The charsmap then the whitespace rules, traced, give SentencePiece's normalized
    text ("▁" as a space) on every text."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    model = pb.ModelProto()
    model.ParseFromString(PROTO)
    spec = model.normalizer_spec
    charsmap = litert_charsmap.Charsmap(spec.precompiled_charsmap)
    normalize = tf.function(
        lambda data: litert_charsmap.whitespace(charsmap(data, 4 * WIDTH), spec),
        input_signature=[tf.TensorSpec([1, WIDTH], tf.int32)],
    )
    spm = sentencepiece.SentencePieceProcessor(model_proto=PROTO)
    for text in texts():
        row = encoded(text.encode(), WIDTH)
        got = bytes(int(b) for b in normalize(tf.constant(row)).numpy()[0] if b)
        cut_text = bytes(int(b) for b in row[0] if b).decode()
        assert got.decode().replace(" ", "\u2581") == spm.normalize(cut_text), text


def test_the_bpe_cut_of_bytes_is_sentencepiece_s(traced_cut):
    """`BpeBytesCut`, traced as the file holds it, gives SentencePiece's ids on 212 texts
    (a text longer than the row compared as the row cuts it), says which are blank, and
    which end with whitespace as `litert_bpe.ends_with_space` reads it; an invalid UTF-8
    byte is SentencePiece's U+FFFD, not normalized (nmt_nfkc maps a U+FFFD of the text to a
    space)."""
    from keras_transformer.export import litert_bpe

    spm = sentencepiece.SentencePieceProcessor(model_proto=PROTO)
    all_texts = texts()
    assert len(all_texts) >= 200
    rows = [encoded(text.encode(), WIDTH) for text in all_texts]
    invalid = [b"abc\xff\xfedef", b"caf\xc3", b"\xe2\x82 x", b"\xed\xa0\x80 surrogate"]
    rows += [encoded(data, WIDTH) for data in invalid]
    for row in rows:
        data = bytes(int(b) for b in row[0] if b)
        ids, blank, trailing = traced_cut(tf.constant(row))
        expected = spm.encode(data)  # bytes: SentencePiece's own reading of invalid UTF-8
        assert [i for i in ids.numpy()[0].tolist() if i >= 0] == expected, data
        assert bool(blank.numpy()[0]) == (not expected), data
        if data.decode("utf-8", "replace") == data.decode("utf-8", "surrogateescape"):
            text_trailing = litert_bpe.ends_with_space(tf.constant([data]))
            assert bool(trailing.numpy()[0]) == bool(text_trailing.numpy()[0]), data


def test_the_builtin_source_ids_are_the_preprocessor_s():
    """`litert_builtin.source_cut` (the code first, a piece of trailing whitespace, the cut
    to max_length - 1, EOS) gives the preprocessor's source ids of each line, with the
    language code's index, the longest line cut; a text the normalizer leaves nothing of
    ("\u200b") is EOS alone, as the text file gives it (the preprocessor gives its code)."""
    from keras_transformer.models.preprocessor import TransformerSeq2SeqLMPreprocessor
    from keras_transformer.pretrained import m2m100

    model, _ = m2m100.load_m2m100(NLLB)
    vocabularies = m2m100.load_vocabularies(NLLB)
    max_length = model.config.max_length
    cut = litert_builtin.source_cut(vocabularies, max_length)
    table = litert_builtin.language_table(
        vocabularies, decoding.DecodingSettings(source_prefix="eng_Latn")
    )
    traced = tf.function(
        lambda data, index: cut(data, litert_builtin.language_ids(index, table["source"])),
        input_signature=[tf.TensorSpec([1, WIDTH], tf.int32), tf.TensorSpec([1], tf.int32)],
    )
    preprocessor = TransformerSeq2SeqLMPreprocessor.for_model(model, vocabularies)
    spm = sentencepiece.SentencePieceProcessor(model_proto=PROTO)
    codes = vocabularies.source.language_codes
    # Not a line that starts with a code: the file cuts it as text (`LiteRTTranslator`
    # takes it off first).
    for text in [*EDGES, *(line for line in NLLB_LINES if not line.startswith("fra_Latn"))]:
        if len(text.encode()) > WIDTH:
            continue
        for language in ("eng_Latn", "fra_Latn"):
            got = traced(tf.constant(encoded(text.encode(), WIDTH)), [codes.index(language)])
            expected = preprocessor.source_ids(tf.constant([text]), language).numpy()[0]
            if not spm.encode(text):  # blank to the normalizer: EOS alone, as the text file
                expected = np.array([EOS_ID])
            got = got.numpy()[0]
            assert got[: len(expected)].tolist() == expected.tolist(), text
            assert not got[len(expected) :].any(), text
    unknown = traced(tf.constant(encoded(b"Hello", WIDTH)), [len(codes)]).numpy()[0]
    assert unknown[0] == EOS_ID and not unknown[1:].any()  # EOS alone: nothing to translate


def test_refusals_of_the_normalizer_and_the_cut():
    """A value holding a run of spaces, a model marking words with a trailing "▁" and a
    normalizer without escaped whitespace are refused by name."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    def changed(edit):
        model = pb.ModelProto()
        model.ParseFromString(PROTO)
        edit(model)
        return model.SerializeToString()

    def suffix(model):
        model.trainer_spec.treat_whitespace_as_suffix = True

    def unescaped(model):
        model.normalizer_spec.escape_whitespaces = False

    with pytest.raises(ValueError, match="trailing '▁'"):
        litert_bpe_bytes.check_model(changed(suffix))
    with pytest.raises(ValueError, match="does not escape whitespace"):
        litert_bpe_bytes.check_model(changed(unescaped))
    with pytest.raises(ValueError, match="shorter than its header"):
        litert_charsmap.trie(b"ab")


SEARCHES = {
    "greedy": decoding.DecodingSettings(beam_size=1, max_extra_length=8, source_prefix="eng_Latn"),
    "beam": decoding.DecodingSettings(beam_size=4, max_extra_length=8, source_prefix="eng_Latn"),
}


@pytest.fixture(scope="module")
def nllb_files(tmp_path_factory):
    """The NLLB fixture's builtin-ops and text LiteRT files, greedy and beam 4, English the
    export's source language, Spanish its target."""
    from keras_transformer.pretrained import m2m100

    model, _ = m2m100.load_m2m100(NLLB)
    vocabularies = m2m100.load_vocabularies(NLLB)
    root = tmp_path_factory.mktemp("nllb_builtin")
    files = {}
    for name, settings in SEARCHES.items():
        settings = settings.replace(target_prefix="spa_Latn")
        for ops in ("builtin", "text"):
            files[name, ops] = export.export(
                model,
                root / f"{name}-{ops}",
                format="litert",
                ops=ops,
                vocabularies=vocabularies,
                decoding=settings,
            )
    return model, vocabularies, files


def test_the_nllb_builtin_file_s_ops_inputs_and_manifest(nllb_files):
    _, vocabularies, files = nllb_files
    directory = files["greedy", "builtin"]
    facts = json.loads((directory / "manifest.json").read_text())
    assert facts["ops"] == "builtin" and facts["custom_ops"] == []
    assert facts["languages"]["source"] == vocabularies.source.language_codes
    signature = facts["signatures"]["serving_default"]
    assert sorted(signature["inputs"]) == ["source_language", "target_language", "text"]
    ops = litert.op_names((directory / "model.tflite").read_bytes())
    litert_builtin.check_builtin(ops)
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=str(directory / "model.tflite")).get_signature_runner()
    inputs = runner.get_input_details()
    assert list(inputs["text"]["shape"]) == [1, signature["input_bytes"]]
    assert [list(inputs[n]["shape"]) for n in litert_builtin.LANGUAGE_INPUTS] == [[1], [1]]


def translate_builtin(directory, lines, source: str, target: str) -> list[str]:
    """The file under LiteRT's stock `Interpreter` (no custom op), the languages by index."""
    from ai_edge_litert.interpreter import Interpreter

    facts = json.loads((directory / "manifest.json").read_text())
    width = facts["signatures"]["serving_default"]["input_bytes"]
    runner = Interpreter(model_path=str(directory / "model.tflite")).get_signature_runner()
    languages = facts["languages"]
    out = []
    for line in lines:
        answer = runner(
            text=encoded(line.encode(), width),
            source_language=np.array([languages["source"].index(source)], np.int32),
            target_language=np.array([languages["target"].index(target)], np.int32),
        )
        out.append(decoded(answer["translations"][0]))
    return out


@pytest.mark.exact
@pytest.mark.parametrize("name", list(SEARCHES))
def test_the_nllb_builtin_file_translates_as_the_text_file(nllb_files, name):
    """The builtin-ops file under the stock interpreter (bytes, the languages' indices)
    against the text file (`serving_languages`, tensorflow-text's ops), greedy and beam 4,
    two target languages, the fixture's lines and verses. The rule (tests/ties.py, as
    test_litert_builtin's): a translation may differ only where the search parts at a tie
    (greedy within TIE, beam within LAST_BITS); at least 98% alike (all when written)."""
    from ai_edge_litert.interpreter import InterpreterWithCustomOps

    from keras_transformer.serving.litert import text_op_registrars

    model, vocabularies, files = nllb_files
    lines = [*NLLB_LINES[:6], *EDGES[5:10], *bible.pairs("test", 20).sources]
    text_runner = InterpreterWithCustomOps(
        custom_op_registerers=text_op_registrars(),
        model_path=str(files[name, "text"] / "model.tflite"),
    ).get_signature_runner("serving_languages")
    total = same = 0
    answers = {}
    for target in ("spa_Latn", "fra_Latn"):
        ours = translate_builtin(files[name, "builtin"], lines, "eng_Latn", target)
        theirs = text_runner(
            text=np.array([line.encode() for line in lines], dtype=object),
            source_prefix=np.array([b"eng_Latn"] * len(lines), dtype=object),
            target_prefix=np.array([target.encode()] * len(lines), dtype=object),
        )["translations"]
        theirs = [t.decode("utf-8", "replace") for t in theirs]
        settings = SEARCHES[name].replace(target_prefix=target)
        same += alike(model, vocabularies, settings, lines, theirs, ours)
        total += len(lines)
        answers[target] = ours
    assert same >= math.ceil(0.98 * total), (same, total)
    assert answers["spa_Latn"] != answers["fra_Latn"]
    assert answers["spa_Latn"][4] == answers["spa_Latn"][5] == ""  # blank lines


def test_an_unknown_language_index_answers_nothing_and_the_translator_takes_codes(nllb_files):
    """An index out of the manifest's list gives "" (the file cannot fail a request by
    name); `LiteRTTranslator` maps codes to indices, a leading code taken as the source
    language, and refuses a code the file lacks."""
    from keras_transformer.serving import LiteRTTranslator

    _, _, files = nllb_files
    directory = files["greedy", "builtin"]
    facts = json.loads((directory / "manifest.json").read_text())
    width = facts["signatures"]["serving_default"]["input_bytes"]
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=str(directory / "model.tflite")).get_signature_runner()
    count = len(facts["languages"]["target"])
    answers = [
        decoded(
            runner(
                text=encoded(b"Hello", width),
                source_language=np.array([s], np.int32),
                target_language=np.array([t], np.int32),
            )["translations"][0]
        )
        for s, t in ((0, count), (count, 1), (0, 1))
    ]
    assert answers[0] == answers[1] == "" and answers[2]
    translator = LiteRTTranslator(directory)
    lines = ["Hello world.", "fra_Latn Bonjour le monde."]
    got = [h[0].text for h in translator.translate(lines, target_prefix="fra_Latn")]
    assert got == [
        *translate_builtin(directory, lines[:1], "eng_Latn", "fra_Latn"),
        *translate_builtin(directory, [" Bonjour le monde."], "fra_Latn", "fra_Latn"),
    ]
    with pytest.raises(ValueError, match="target_prefix='xxx_Zzzz'"):
        translator.translate(["Hello"], target_prefix="xxx_Zzzz")
