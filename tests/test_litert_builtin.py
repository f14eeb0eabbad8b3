"""The builtin-ops LiteRT file (`kt.export.litert_builtin`: UTF-8 bytes in and out, no custom
op, no string tensor): SentencePiece's unigram cut in builtin ops equals SentencePiece's;
LiteRT's stock interpreter runs the file, without a custom op, and its translations equal
the library's; what it cannot hold is refused before anything is written."""

import json
import math
import re

import numpy as np
import pytest
import sentencepiece
import tensorflow as tf

import keras_transformer as kt
from keras_transformer import export, serving
from keras_transformer.export import litert, litert_unigram
from keras_transformer.serving.litert_bytes import decoded, encoded, encoded_rows
from keras_transformer.special_ids import EOS_ID
from tests import bible, ties

MAX_LENGTH = 24
SENTENCES = [
    "In the beginning God created the heavens.",
    "Amen.",
    "",
    "   ",
    "  And   God said,  Let there be ",
    "naïve café ☃ 中文 𝄞 — “quoted”",  # characters the vocabulary lacks: their bytes' pieces
    "And the earth was without form, and void; and darkness was upon the face of the deep. "
    "And the Spirit of God moved upon the face of the waters.",
]
SEARCHES = {
    "greedy": kt.decoding.DecodingSettings(beam_size=1),
    "beam": kt.decoding.DecodingSettings(beam_size=4),
}


def verses(count: int) -> list[str]:
    return list(bible.pairs("test", count).sources)


@pytest.fixture(scope="module")
def tiny():
    """An untrained tiny model (the bundled vocabulary, max_length 24, one layer a side)."""
    return bible.tiny_model(max_length=MAX_LENGTH)


def test_the_unigram_cut_is_sentencepiece_s():
    """Ids of `UnigramCut` (traced, as the file holds it) equal SentencePiece's, cut to
    `max_length - 1` then EOS, on verses, spaces, characters the vocabulary lacks (byte
    fallback), a text longer than the cut."""
    proto = bible.vocabularies().source.proto
    model = sentencepiece.SentencePieceProcessor(model_proto=proto)
    width = 600
    cut = tf.function(
        litert_unigram.UnigramCut(proto, MAX_LENGTH),
        input_signature=[tf.TensorSpec([1, width], tf.int32)],
    )
    texts = [*SENTENCES, "\ttab", "x" * 700, *verses(40)]
    for text in texts:
        row = encoded(text.encode(), width)
        ids = cut(tf.constant(row)).numpy()[0].tolist()
        cut_text = bytes(int(b) for b in row[0] if b).decode()
        expected = model.encode(cut_text)[: MAX_LENGTH - 1] if cut_text.strip(" ") else []
        assert ids[: ids.index(EOS_ID) + 1] == [*expected, EOS_ID], text
        assert not any(ids[ids.index(EOS_ID) + 1 :]), text  # 0-padded


def test_the_piece_table_holds_every_normal_piece_once():
    proto = bible.vocabularies().source.proto
    table = litert_unigram.piece_table(proto)
    model = sentencepiece.SentencePieceProcessor(model_proto=proto)
    normal = [
        i
        for i in range(model.get_piece_size())
        if not (model.is_control(i) or model.is_unknown(i) or model.is_byte(i))
    ]
    assert sorted(i for i in table["ids"].tolist() if i >= 0) == normal
    assert table["probes"] <= 16 and table["longest"] == max(
        len(litert_unigram._symbols(model.id_to_piece(i))) for i in normal
    )


def _builtin_files(tiny, root, **options) -> dict:
    """The tiny model's builtin-ops LiteRT directories under `root`, one a search of
    `SEARCHES`, written with `options` (`batch=`...)."""
    model, vocabularies = tiny
    return {
        name: export.export(
            model,
            root / name,
            format="litert",
            ops="builtin",
            vocabularies=vocabularies,
            decoding=settings,
            **options,
        )
        for name, settings in SEARCHES.items()
    }


@pytest.fixture(scope="module")
def builtin(tiny, tmp_path_factory):
    """The tiny model's builtin-ops LiteRT directories, one a search."""
    return _builtin_files(tiny, tmp_path_factory.mktemp("builtin"))


def test_builtin_file_layout_ops_and_tensors(builtin):
    directory = builtin["beam"]
    facts = json.loads((directory / "manifest.json").read_text())
    assert facts["format"] == "litert" and facts["ops"] == "builtin"
    assert facts["custom_ops"] == []
    signature = facts["signatures"]["serving_default"]
    assert signature["input_bytes"] > 0 and signature["output_bytes"] > 0
    assert signature["batch"] == 1
    blob = (directory / "model.tflite").read_bytes()
    ops = litert.op_names(blob)
    assert "WHILE" in ops and all(re.fullmatch(r"[A-Z0-9_]+", op) for op in ops), ops
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_content=blob).get_signature_runner()
    [(name, given)] = runner.get_input_details().items()
    assert name == "text" and given["dtype"] == np.int32
    assert list(given["shape"]) == [1, signature["input_bytes"]]
    [(name, answer)] = runner.get_output_details().items()
    assert name == "translations" and answer["dtype"] == np.int32
    assert list(answer["shape"]) == [1, signature["output_bytes"]]


def alike(model, vocabularies, settings, sentences, ours, theirs) -> int:
    """How many translations of `theirs` equal `ours`; each other one must part at a tie
    (tests/ties.py: greedy within TIE, beam within LAST_BITS)."""
    tolerance = ties.TIE if settings.beam_size == 1 else ties.LAST_BITS
    same = 0
    for sentence, mine, other in zip(sentences, ours, theirs, strict=True):
        if mine == other:
            same += 1
            continue
        assert ties.translations_part_at_a_tie(
            model, vocabularies, settings, sentence, mine, other, tolerance=tolerance
        ), (sentence, mine, other)
    return same


@pytest.mark.exact
@pytest.mark.parametrize("name", list(SEARCHES))
def test_the_stock_interpreter_translates_as_the_library(tiny, builtin, name):
    """LiteRT's `Interpreter`, no custom op registered, bytes in and out: the translations
    of `kt.evaluation.Translator` (the preprocessor's text, the same search), blank input
    "". The rule (tests/ties.py): a translation may differ only where the search parts at
    a tie; at least 98% alike (all of them when written). `kt.serving.open` answers the
    same as the bare interpreter."""
    from ai_edge_litert.interpreter import Interpreter

    model, vocabularies = tiny
    settings = SEARCHES[name]
    directory = builtin[name]
    width = json.loads((directory / "manifest.json").read_text())["signatures"]["serving_default"][
        "input_bytes"
    ]
    runner = Interpreter(model_path=str(directory / "model.tflite")).get_signature_runner()
    texts = [*SENTENCES, *verses(30)]
    theirs = [
        decoded(runner(text=encoded(text.encode(), width))["translations"][0]) for text in texts
    ]
    ours = kt.evaluation.Translator(model, vocabularies, decoding=settings).translate(texts)
    same = alike(model, vocabularies, settings, texts, ours, theirs)
    assert same >= math.ceil(0.98 * len(texts)), (same, len(texts))
    assert theirs[2] == theirs[3] == ""
    opened = serving.open(directory)
    assert [h[0].text for h in opened.translate(texts)] == theirs


BATCH = 4  # the batched files' rows a run


@pytest.fixture(scope="module")
def batched(tiny, tmp_path_factory):
    """The tiny model's builtin-ops LiteRT directories of `BATCH` rows a run, one a search."""
    return _builtin_files(tiny, tmp_path_factory.mktemp("batched"), batch=BATCH)


@pytest.mark.exact
@pytest.mark.parametrize("name", list(SEARCHES))
def test_a_batched_file_translates_each_row_as_the_one_row_file(tiny, builtin, batched, name):
    """A file of `[BATCH, N]` (`batch=`), under LiteRT's stock `Interpreter`, runs after run
    (the last one filled with rows of zeros): each row's translation is the `[1, N]` file's
    of that text, blank texts and rows of zeros "". Another computation (the rows padded to
    the batch's longest source, the products over a batch): the rule (tests/ties.py), a
    translation may differ only where the search parts at a tie (greedy within TIE, beam's
    replay within LAST_BITS); at least 98% alike (all of them when written). `kt.serving.open`
    batches the same runs: its answers are the bare interpreter's."""
    from ai_edge_litert.interpreter import Interpreter

    model, vocabularies = tiny
    settings = SEARCHES[name]
    directory = batched[name]
    signature = json.loads((directory / "manifest.json").read_text())["signatures"][
        "serving_default"
    ]
    width = signature["input_bytes"]
    assert signature["batch"] == BATCH
    assert signature["inputs"]["text"].startswith(f"int32 [{BATCH}, {width}]")
    runner = Interpreter(model_path=str(directory / "model.tflite")).get_signature_runner()
    assert list(runner.get_input_details()["text"]["shape"]) == [BATCH, width]
    one = Interpreter(model_path=str(builtin[name] / "model.tflite")).get_signature_runner()
    texts = [*SENTENCES, *verses(30)]  # 37: the last run holds one text and three empty rows
    assert len(texts) % BATCH
    theirs, empty = [], []
    for start in range(0, len(texts), BATCH):
        chunk = [text.encode() for text in texts[start : start + BATCH]]
        answers = runner(text=encoded_rows(chunk, width, BATCH))["translations"]
        theirs += [decoded(row) for row in answers[: len(chunk)]]
        empty += [decoded(row) for row in answers[len(chunk) :]]
    ours = [decoded(one(text=encoded(text.encode(), width))["translations"][0]) for text in texts]
    assert empty == [""] * (-len(texts) % BATCH)
    assert theirs[2] == theirs[3] == ""
    same = alike(model, vocabularies, settings, texts, ours, theirs)
    assert same >= math.ceil(0.98 * len(texts)), (same, len(texts))
    opened = serving.open(directory)
    assert [h[0].text for h in opened.translate(texts)] == theirs


def test_batch_refusals_name_the_argument(tiny, tmp_path, capsys):
    """A batch that is not a whole number of 1 or more, above 1 in a text-ops file or with
    int4 weights: refused in one line naming `batch`, before anything is written; the
    program's --batch likewise."""
    model, vocabularies = tiny
    for batch in (0, -2, 2.0, True):
        with pytest.raises(ValueError, match=rf"^batch={batch!r}: the texts of one run"):
            export.export(
                model,
                tmp_path / "a",
                format="litert",
                ops="builtin",
                batch=batch,
                vocabularies=vocabularies,
            )
    with pytest.raises(ValueError, match=r"^batch=4 applies to ops='builtin' only"):
        export.export(model, tmp_path / "b", format="litert", batch=4, vocabularies=vocabularies)
    with pytest.raises(ValueError, match=r"^batch=4 with quantize='int4': int4 is not in"):
        export.export(
            model,
            tmp_path / "c",
            format="litert",
            ops="builtin",
            batch=4,
            quantize="int4",
            vocabularies=vocabularies,
        )
    with pytest.raises(TypeError, match="format='web' takes no option batch"):
        export.export(model, tmp_path / "d", format="web", batch=4, vocabularies=vocabularies)
    assert not list(tmp_path.iterdir())
    from trainers import export as program

    flags = ["--model-dir", "runs/x", "--out", "out", "--format", "litert", "--batch", "4"]
    assert program.flag_problem(program.parse_args(flags)) == (
        "--batch applies to --format litert --ops builtin only"
    )
    assert program.flag_problem(program.parse_args([*flags, "--ops", "builtin"])) is None
    assert (
        program.flag_problem(program.parse_args([*flags, "--ops", "builtin", "--quantize", "int4"]))
        == "--ops builtin: --quantize int4 is not in builtin-ops files yet"
    )
    builtin_int4 = ["--ops", "builtin", "--quantize", "int4"]  # without --batch too
    assert program.flag_problem(program.parse_args([*flags[:-2], *builtin_int4])) == (
        "--ops builtin: --quantize int4 is not in builtin-ops files yet"
    )
    with pytest.raises(SystemExit):
        program.parse_args([*flags[:-1], "0"])
    assert "argument --batch: 0 must be >= 1" in capsys.readouterr().err


def test_builtin_refusals_before_anything_is_written(tiny, tmp_path):
    model, vocabularies = tiny
    with pytest.raises(ValueError, match=r"^ops='flex' must be one of \('text', 'builtin'\)"):
        export.export(model, tmp_path / "a", format="litert", ops="flex", vocabularies=vocabularies)
    with pytest.raises(TypeError, match="format='savedmodel' takes no option ops"):
        export.export(model, tmp_path / "b", ops="builtin", vocabularies=vocabularies)
    from sentencepiece import sentencepiece_model_pb2 as pb

    proto = pb.ModelProto()
    proto.ParseFromString(vocabularies.source.proto)
    proto.normalizer_spec.name = "nmt_nfkc"
    with pytest.raises(ValueError, match="normalizer is 'nmt_nfkc'"):
        litert_unigram.check_model(proto.SerializeToString())
    proto.normalizer_spec.name = "identity"
    proto.trainer_spec.model_type = pb.TrainerSpec.BPE
    with pytest.raises(ValueError, match="model is bpe: a builtin-ops LiteRT file cuts unigram"):
        litert_unigram.check_model(proto.SerializeToString())
    assert not list(tmp_path.iterdir())


def test_the_ops_flag_applies_to_the_litert_format_only():
    from trainers import export as program

    flags = ["--model-dir", "runs/x", "--out", "out", "--ops", "builtin"]
    assert program.flag_problem(program.parse_args(flags)) == (
        "--ops applies to --format litert only"
    )
    assert program.flag_problem(program.parse_args([*flags, "--format", "litert"])) is None
