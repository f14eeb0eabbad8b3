"""NLLB-200 (M2M100) import: parity with transformers on a checkpoint that transformers made
(tests/fixtures/m2m100, made once by its make_fixture.py; no torch or transformers here).

Token ids against `NllbTokenizer` (115 texts, language codes and unknown characters among
them), decoded text against its `decode`, teacher-forced log-probabilities against
`M2M100ForConditionalGeneration` to 1e-4, greedy ids against `generate(forced_bos_token_id=...)`,
and the same greedy translations from the SavedModel (`serving_prefix`, and a target language
baked into `serving_default`) and from CTranslate2 (`target_prefix`); bad checkpoints refused
by name before anything is built."""

import functools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.pretrained import m2m100
from tests import programs

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "m2m100"
CHECKPOINT = FIXTURES / "nllb-tiny"
MARIAN = Path(__file__).resolve().parent / "fixtures" / "marian" / "shared"


@functools.cache
def reference() -> dict:
    return json.loads((FIXTURES / "reference.json").read_text())


@functools.cache
def _model():
    model, _ = m2m100.load_m2m100(CHECKPOINT)
    return model


def imported():
    """(model, vocabularies): the model loaded once; the tokenizer anew for each test (the
    seeding between tests would otherwise meet TensorFlow resources of an earlier test)."""
    return _model(), m2m100.load_vocabularies(CHECKPOINT)


@functools.cache
def order() -> list[int]:
    """Our id -> the checkpoint's."""
    config = json.loads((CHECKPOINT / "config.json").read_text())
    return m2m100.vocabulary_order(config, config["vocab_size"])


@functools.cache
def ours() -> dict[int, int]:
    """The checkpoint's id -> ours (its decoder start's row is our <s> as well: not that)."""
    return {theirs: i for i, theirs in enumerate(order()) if i != kt.text.BOS_ID}


def to_checkpoint(ids) -> list[int]:
    return [order()[i] for i in ids]


def source_ids(items) -> np.ndarray:
    """Our source ids `[batch, len]` (0-padded) of the greedy items' unpadded inputs."""
    rows = []
    for item in items:
        pairs = zip(item["input_ids"], item["attention_mask"], strict=True)
        rows.append([ours()[i] for i, keep in pairs if keep])
    ids = np.zeros((len(rows), max(map(len, rows))), "int32")
    for row, values in enumerate(rows):
        ids[row, : len(values)] = values
    return ids


def transformers_output(item) -> list[int]:
    """`generate`'s ids after the decoder start, without the batch's padding."""
    ids = item["ids"][1:]
    pad = reference()["tokenizer_info"]["special_ids"]["<pad>"]
    while ids and ids[-1] == pad:
        ids = ids[:-1]
    return ids


def test_source_ids_are_nllb_tokenizers_with_src_lang():
    """`NllbTokenizer(src_lang=L)(text)` is L's code, the text's ids, EOS; ours: the code's
    id, `tokenize(text)`, EOS. Written into the text (`"L text"`), the code gives the same
    ids, unless the text is empty or starts with a special token itself."""
    _, vocabularies = imported()
    tokenizer = vocabularies.source
    items = reference()["source_encoding"]
    assert len(items) >= 100
    rows = tokenizer.tokenize([item["text"] for item in items]).to_list()
    with_code = tokenizer.tokenize([f"{item['src_lang']} {item['text']}" for item in items])
    for item, row, coded in zip(items, rows, with_code.to_list(), strict=True):
        code = tokenizer.language_id(item["src_lang"])
        assert to_checkpoint([code, *row, kt.text.EOS_ID]) == item["input_ids"], item["text"]
        if item["text"] and item["tokens"][1] not in tokenizer.special_tokens:
            assert coded == [code, *row], item["text"]


def test_target_ids_are_nllb_tokenizers_with_tgt_lang():
    _, vocabularies = imported()
    tokenizer = vocabularies.target
    for item in reference()["target_encoding"]:
        row = tokenizer.tokenize([f"{item['tgt_lang']} {item['text']}"]).to_list()[0]
        assert to_checkpoint([*row, kt.text.EOS_ID]) == item["labels"], item["text"]


def test_the_fixture_covers_the_hard_cases():
    items = reference()["source_encoding"]
    tokens = [token for item in items for token in item["tokens"]]
    texts = [item["text"] for item in items]
    assert "" in texts and any("漢" in t for t in texts) and any("\U0001f600" in t for t in texts)
    assert tokens.count("<unk>") >= 10  # unknown characters
    assert {"spa_Latn", "fra_Latn", "deu_Latn", "eng_Latn"} <= {i["src_lang"] for i in items}
    assert any("spa_Latn" in t for t in texts) and any(t.endswith(" ") for t in texts)
    assert any("\t" in t for t in texts) and any(t.startswith(" ") for t in texts)


def test_decoding_is_nllb_tokenizers_decode():
    """`detokenize` leaves out the special tokens (language codes included), as
    `decode(skip_special_tokens=True)` does."""
    _, vocabularies = imported()
    items = reference()["decoding"]
    width = max(len(item["ids"]) for item in items)
    ids = np.zeros((len(items), width), "int32")
    for row, item in enumerate(items):
        ids[row, : len(item["ids"])] = [ours()[i] for i in item["ids"]]
    texts = [t.decode("utf-8") for t in vocabularies.target.detokenize(ids).numpy()]
    assert texts == [item["text"] for item in items]


@pytest.mark.exact
def test_teacher_forced_log_probabilities_equal_transformers():
    model, _ = imported()
    arrays = np.load(FIXTURES / "reference.npz")
    worst = 0.0
    for item in reference()["teacher_forcing"]:
        source = np.array([[ours()[i] for i in item["input_ids"]]])
        target = np.array([[ours()[i] for i in item["decoder_input_ids"]]])
        assert target[0, 0] == kt.text.EOS_ID  # </s>, the decoder start: our <s> is its copy
        target[0, 0] = kt.text.BOS_ID
        logits = model({"source_ids": source, "target_ids": target}, training=False)
        log_probs = tf.nn.log_softmax(logits)[0].numpy()  # (len, our vocab)
        labels = [ours()[i] for i in item["labels"]]
        got = log_probs[np.arange(len(labels)), labels]
        worst = max(worst, float(np.abs(got - item["label_log_probs"]).max()))
        if "npz_log_probs" in item:  # every entry of the distribution, in the checkpoint's ids
            mapped = np.empty_like(arrays[item["npz_log_probs"]])
            rows = [i for i in range(len(order())) if i != kt.text.BOS_ID]
            mapped[:, [order()[i] for i in rows]] = log_probs[:, rows]
            worst = max(worst, float(np.abs(mapped - arrays[item["npz_log_probs"]]).max()))
            assert log_probs[:, kt.text.BOS_ID].max() < -1e3  # the copy: out of the softmax
    assert worst <= 1e-4


@pytest.mark.exact
def test_greedy_ids_equal_generate_with_forced_bos_token_id():
    """32 sentences, Spanish and French forced, in transformers' padded batches of 4. The
    two best tokens along transformers' outputs are at least 2.6e-4 apart, our logits within
    about 3e-6 of transformers': no near tie for either engine to break otherwise."""
    model, vocabularies = imported()
    items = reference()["greedy"]["items"]
    limit = reference()["greedy"]["settings"]["max_new_tokens"]
    assert len(items) == 32
    search = tf.function(
        lambda source, prefix: kt.decoding.greedy_search(
            model, source, max_length=limit, target_prefix=prefix
        ),
        input_signature=[tf.TensorSpec([None, None], tf.int32)] * 2,
    )  # traced once
    for start in range(0, len(items), 4):
        batch = items[start : start + 4]
        language = vocabularies.target.language_id(batch[0]["tgt_lang"])
        prefix = np.full((len(batch), 1), language, "int32")
        ids, _ = search(source_ids(batch), prefix)
        for item, row in zip(batch, ids.numpy(), strict=True):
            got = to_checkpoint([i for i in row if i != kt.PAD_ID])
            assert got == transformers_output(item), item["text"]
            assert transformers_output(item)[-1] == 2  # each ended before the limit


def test_beam_search_and_sampling_start_with_the_forced_language():
    model, vocabularies = imported()
    items = reference()["greedy"]["items"][:4]
    french = vocabularies.target.language_id("fra_Latn")
    beam, scores = kt.decoding.beam_search(
        model, source_ids(items), beam_size=3, target_prefix=[french]
    )
    drawn, _ = kt.decoding.sample(model, source_ids(items), seed=1, target_prefix=[french])
    assert (beam.numpy()[:, 0] == french).all() and (drawn.numpy()[:, 0] == french).all()
    assert np.isfinite(scores.numpy()).all()


@pytest.mark.slow  # six signatures traced and saved: the slowest test here
@pytest.mark.exact
def test_the_saved_model_takes_the_target_language_per_request(tmp_path):
    """`serving_prefix` (written for a vocabulary with language codes) gives transformers'
    greedy translations with each request's language, and `serving_languages` with each
    request's two languages; `serving_default` those of the languages baked in
    (`source_prefix="eng_Latn"`, `target_prefix="spa_Latn"`), the source's code written in
    the text or not. Exactly: every greedy step of these items is 2.6e-4 apart or more
    (`test_greedy_ids_equal_generate_with_forced_bos_token_id`)."""
    model, vocabularies = imported()
    items = reference()["greedy"]["items"]
    limit = reference()["greedy"]["settings"]["max_new_tokens"]
    path = kt.export.export(
        model,
        tmp_path / "nllb",
        vocabularies=vocabularies,
        decoding=kt.decoding.DecodingSettings(
            beam_size=1,
            max_extra_length=limit,
            target_prefix="spa_Latn",
            source_prefix="eng_Latn",
        ),
    )
    manifest = json.loads((path / "assets.extra" / "manifest.json").read_text())
    assert manifest["decoding"]["target_prefix"] == "spa_Latn"
    assert manifest["decoding"]["source_prefix"] == "eng_Latn"
    assert {"serving_prefix", "serving_languages"} <= set(manifest["signatures"])
    loaded = tf.saved_model.load(str(path))
    texts = [f"eng_Latn {item['text']}" for item in items]
    languages = tf.constant([item["tgt_lang"] for item in items])
    expected = [item["translation"] for item in items]
    prefixed = loaded.signatures["serving_prefix"](text=tf.constant(texts), target_prefix=languages)
    assert [t.decode("utf-8") for t in prefixed["translation"].numpy()] == expected
    # Both languages a request: the source's given, or "" where the text starts with it.
    plain = [item["text"] for item in items]
    for text, source in ((plain, "eng_Latn"), (texts, ""), (texts, "fra_Latn")):
        both = loaded.signatures["serving_languages"](
            text=tf.constant(text),
            source_prefix=tf.constant([source] * len(items)),
            target_prefix=languages,
        )
        assert [t.decode("utf-8") for t in both["translation"].numpy()] == expected, source
    spanish = [item for item in items if item["tgt_lang"] == "spa_Latn"]
    expected = [item["translation"] for item in spanish]
    for text in ([item["text"] for item in spanish], [f"eng_Latn {i['text']}" for i in spanish]):
        default = loaded.signatures["serving_default"](text=tf.constant(text + ["", " "]))
        got = [t.decode("utf-8") for t in default["translation"].numpy()]
        assert got == expected + ["", ""]  # blank sources stay blank: nothing to translate
    with pytest.raises(tf.errors.InvalidArgumentError, match="source_prefix.*xxx_Zzzz"):
        loaded.signatures["serving_languages"](
            text=tf.constant(plain[:2]),
            source_prefix=tf.constant(["eng_Latn", "xxx_Zzzz"]),
            target_prefix=languages[:2],
        )
    with pytest.raises(tf.errors.InvalidArgumentError, match="one entry per sentence"):
        loaded.signatures["serving_languages"](
            text=tf.constant(plain[:2]),
            source_prefix=tf.constant(["eng_Latn"]),
            target_prefix=languages[:2],
        )
    with pytest.raises(tf.errors.InvalidArgumentError, match="one entry per sentence"):
        loaded.signatures["serving_prefix"](
            text=tf.constant(texts[:2]), target_prefix=tf.constant(["spa_Latn"])
        )
    # An unknown language fails the request (TF Serving: INVALID_ARGUMENT), naming the code.
    for bad in ("xxx_Zzzz", "spa_latn"):
        with pytest.raises(tf.errors.InvalidArgumentError, match=f"language codes.*{bad}"):
            loaded.signatures["serving_prefix"](
                text=tf.constant(texts[:2]), target_prefix=tf.constant(["spa_Latn", bad])
            )


def test_an_unknown_language_code_is_refused_at_every_door(tmp_path):
    """`generate`, `Translator` and both exports check a target prefix's codes against the
    vocabulary's (the SavedModel's per-request check: the test above)."""
    from keras_transformer.models import TransformerSeq2SeqLM

    model, vocabularies = imported()
    task = TransformerSeq2SeqLM.from_transformer(model, vocabularies)
    assert task.generate("eng_Latn Hello", target_prefix="spa_Latn")  # known: translates
    with pytest.raises(ValueError, match="'xxx_Zzzz' is not one of this model's .* codes"):
        task.generate("eng_Latn Hello", target_prefix="xxx_Zzzz")
    with pytest.raises(ValueError, match="did you mean 'spa_Latn'"):
        task.generate("eng_Latn Hello", target_prefix="spa_latn")
    bad = kt.decoding.DecodingSettings(beam_size=1, target_prefix="xxx_Zzzz")
    with pytest.raises(ValueError, match="'xxx_Zzzz' is not one"):
        kt.evaluation.Translator(model, vocabularies, decoding=bad)
    for name in ("savedmodel", "ctranslate2"):
        with pytest.raises(ValueError, match="'xxx_Zzzz' is not one"):
            kt.export.export(
                model, tmp_path / name, format=name, vocabularies=vocabularies, decoding=bad
            )
        assert not (tmp_path / name).exists()


def test_the_source_language_is_a_setting_that_generate_and_translator_apply():
    """`source_prefix` puts NLLB's source language code first, as the text written with it
    by hand: the same translations through `generate` (per call, or the task's settings)
    and `Translator`; a code the vocabulary lacks is refused by name."""
    from keras_transformer.models import TransformerSeq2SeqLM

    model, vocabularies = imported()
    items = reference()["greedy"]["items"][:6]
    limit = reference()["greedy"]["settings"]["max_new_tokens"]
    settings = kt.decoding.DecodingSettings(
        beam_size=1, max_extra_length=limit, target_prefix="spa_Latn"
    )
    task = TransformerSeq2SeqLM.from_transformer(model, vocabularies, decoding=settings)
    plain = [item["text"] for item in items]
    coded = [f"eng_Latn {text}" for text in plain]
    expected = task.generate(coded)
    assert len(set(expected)) > 1
    assert task.generate(plain, source_prefix="eng_Latn") == expected
    assert task.generate(coded, source_prefix="fra_Latn") == expected  # its own code kept
    assert task.generate(plain) != expected  # no code: another input
    task.decoding = settings.replace(source_prefix="eng_Latn")
    assert task.generate(plain) == expected
    assert kt.evaluation.Translator(task).translate(plain) == expected
    translator = kt.evaluation.Translator(
        model, vocabularies, decoding=settings, source_prefix="eng_Latn"
    )
    assert translator.translate(plain) == expected
    with pytest.raises(ValueError, match="'eng_latn'.*did you mean 'eng_Latn'"):
        task.generate(plain, source_prefix="eng_latn")


@pytest.mark.exact
def test_the_ctranslate2_export_gives_transformers_greedy_ids(tmp_path):
    """CTranslate2 runs our export (its position table from our `position_offset`, the
    decoder start's copy out of the softmax by the output bias) with the target language as
    its `target_prefix`: transformers' greedy ids for all 32 sentences, exactly (their greedy
    steps are 2.6e-4 apart or more, the engines' logits 2e-5)."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    model, vocabularies = imported()
    path = kt.export.export(
        model,
        tmp_path / "ct2",
        format="ctranslate2",
        vocabularies=vocabularies,
        decoding=kt.decoding.DecodingSettings(target_prefix="spa_Latn"),
    )
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["decoding"]["target_prefix"] == "spa_Latn"
    items = reference()["greedy"]["items"]
    pieces = vocabularies.source.get_vocabulary()
    rows = vocabularies.source.tokenize([f"eng_Latn {item['text']}" for item in items])
    translator = ctranslate2.Translator(str(path), device="cpu")
    results = translator.translate_batch(
        [[pieces[i] for i in row] for row in rows.to_list()],
        target_prefix=[[item["tgt_lang"]] for item in items],
        beam_size=1,
        max_decoding_length=reference()["greedy"]["settings"]["max_new_tokens"],
    )
    index = {piece: i for i, piece in enumerate(pieces)}
    for item, result in zip(items, results, strict=True):
        got = to_checkpoint([index[token] for token in result.hypotheses[0]])
        assert got + [2] == transformers_output(item), item["text"]


def test_load_chooses_the_reader_by_model_type(tmp_path):
    model, vocabularies = kt.pretrained.load(CHECKPOINT)
    assert model.config.position_offset == 2 and model.config.norm_first
    assert model.config.sinusoid_frequencies == "fairseq"
    assert vocabularies.source.language_id("spa_Latn") == ours()[1003]
    assert kt.pretrained.model_type(MARIAN) == "marian"
    other = tmp_path / "bart"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "bart"}))
    with pytest.raises(ValueError, match="model_type='bart' is not one this library reads"):
        kt.pretrained.load(other)


def test_a_saved_nllb_vocabulary_loads_in_a_new_process(tmp_path):
    """`Vocabularies.load` finds `NllbTokenizer` by the name pieces.json records in a process
    that never ran the importer: an imported model directory, or a preset saved from one,
    loaded by `from_preset` in a program or a notebook started afterwards."""
    vocabularies = m2m100.load_vocabularies(CHECKPOINT)
    vocabularies.save(tmp_path / "vocab")
    code = (
        "import sys\n"
        "from keras_transformer.text import Vocabularies\n"
        "source = Vocabularies.load(sys.argv[1]).source\n"
        "print(type(source).__name__, source.language_id('spa_Latn'))\n"
    )
    result = programs.snippet(code, tmp_path / "vocab", timeout=300)
    expected = f"NllbTokenizer {vocabularies.source.language_id('spa_Latn')}"
    assert result.stdout.splitlines()[-1] == expected


def test_from_preset_imports_the_checkpoint_and_saves_it_as_a_preset(tmp_path):
    """The task of an NLLB checkpoint decodes as transformers' generation_config.json says
    (greedy, length penalty 1); saved as a preset and loaded again, its tokenizer is still
    NLLB's (language codes, special tokens), and its model the same."""
    from keras_transformer.models import TransformerSeq2SeqLM

    task = TransformerSeq2SeqLM.from_preset(CHECKPOINT)
    assert task.decoding.beam_size == 1 and task.decoding.length_penalty == 1.0
    task.save_to_preset(tmp_path / "preset")
    again = TransformerSeq2SeqLM.from_preset(tmp_path / "preset")
    source = again.preprocessor.tokenizer.source
    assert type(source).__name__ == "NllbTokenizer" and "spa_Latn" in source.language_codes
    item = reference()["source_encoding"][2]
    row = source.tokenize([item["text"]]).to_list()[0]
    code = source.language_id(item["src_lang"])
    assert to_checkpoint([code, *row, kt.text.EOS_ID]) == item["input_ids"]
    for ours_weight, theirs in zip(task.backbone.weights, again.backbone.weights, strict=True):
        np.testing.assert_array_equal(np.asarray(ours_weight), np.asarray(theirs))


def copy_of(tmp_path) -> Path:
    copy = tmp_path / "nllb"
    shutil.copytree(CHECKPOINT, copy)
    return copy


def edit_json(path: Path, **changes) -> None:
    values = json.loads(path.read_text())
    values.update(changes)
    for key in [k for k, v in changes.items() if v is None]:
        del values[key]
    path.write_text(json.dumps(values))


@pytest.mark.parametrize(
    "change, message",
    [
        ({"model_type": "mbart"}, "model_type='mbart'"),
        ({"scale_embedding": False}, "scale_embedding=False is not supported"),
        ({"tie_word_embeddings": False}, "tie_word_embeddings=False is not supported"),
        ({"activation_function": "gelu_new"}, "activation_function='gelu_new' is not supported"),
        ({"decoder_attention_heads": 2}, "encoder_attention_heads=4 differs"),
        ({"d_model": 30}, "d_model=30 is not divisible by num_heads=4"),
        ({"vocab_size": 1000}, "vocab_size=1000 rows"),
        ({"encoder_layers": 1}, "weights that config.json has no place for"),
        ({"decoder_layers": 3}, "no weight 'model.decoder.layers.2"),
        ({"pad_token_id": 2}, "pad_token_id and eos_token_id are both 2"),
        ({"decoder_start_token_id": 5000}, "decoder_start_token_id=5000 is outside"),
        ({"tokenizer_class": "MBart50Tokenizer"}, "tokenizer_class='MBart50Tokenizer'"),
    ],
)
def test_an_unsupported_checkpoint_is_refused_naming_the_key(tmp_path, change, message):
    checkpoint = copy_of(tmp_path)
    edit_json(checkpoint / "config.json", **change)
    if "tokenizer_class" in change:
        edit_json(checkpoint / "tokenizer_config.json", tokenizer_class=None)
    with pytest.raises(m2m100.M2M100Error, match=message):
        m2m100.read_checkpoint(checkpoint)


def test_missing_tokenizer_and_weight_files_are_named(tmp_path):
    checkpoint = copy_of(tmp_path)
    (checkpoint / "sentencepiece.bpe.model").unlink()
    with pytest.raises(m2m100.M2M100Error, match="missing sentencepiece.bpe.model"):
        kt.pretrained.load(checkpoint)
    shutil.copy(CHECKPOINT / "sentencepiece.bpe.model", checkpoint)
    (checkpoint / "tokenizer.json").unlink()
    with pytest.raises(m2m100.M2M100Error, match="no added tokens"):
        kt.pretrained.load(checkpoint)
    shutil.copy(CHECKPOINT / "tokenizer.json", checkpoint)
    (checkpoint / "model.safetensors").rename(checkpoint / "pytorch_model.bin")
    with pytest.raises(m2m100.M2M100Error, match="found pytorch_model.bin"):
        kt.pretrained.load(checkpoint)
    (checkpoint / "config.json").write_text("{")
    with pytest.raises(ValueError, match="not valid JSON"):
        kt.pretrained.load(checkpoint)


def test_a_weight_of_the_wrong_shape_or_an_untied_copy_is_named(tmp_path):
    from safetensors.numpy import load_file, save_file

    checkpoint = copy_of(tmp_path)
    weights = load_file(str(CHECKPOINT / "model.safetensors"))
    name = "model.encoder.layers.1.fc1.weight"
    save_file({**weights, name: weights[name][:, :16].copy()}, checkpoint / "model.safetensors")
    with pytest.raises(m2m100.M2M100Error, match=f"{name} has shape \\[64, 16\\]"):
        m2m100.read_checkpoint(checkpoint)
    untied = {**weights, "lm_head.weight": weights["model.shared.weight"] + 1}
    save_file(untied, checkpoint / "model.safetensors")
    with pytest.raises(m2m100.M2M100Error, match="lm_head.weight differs"):
        m2m100.read_checkpoint(checkpoint)
    tied = {**weights, "lm_head.weight": weights["model.shared.weight"].copy()}
    save_file(tied, checkpoint / "model.safetensors")
    m2m100.read_checkpoint(checkpoint)  # an equal copy is fine


def test_a_tokenizer_that_does_not_number_pieces_with_fairseqs_offset_is_refused(tmp_path):
    checkpoint = copy_of(tmp_path)
    tokenizer = json.loads((checkpoint / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    first, second = list(vocab)[10:12]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (checkpoint / "tokenizer.json").write_text(json.dumps(tokenizer))
    with pytest.raises(m2m100.M2M100Error, match="fairseq's offset gives that id"):
        m2m100.read_checkpoint(checkpoint)


def test_an_unsupported_model_type_fails_before_anything_is_written(tmp_path):
    """An export of a directory that is not a supported checkpoint names the model_type and
    writes nothing."""
    from keras_transformer.models import TransformerSeq2SeqLM

    checkpoint = copy_of(tmp_path)
    edit_json(checkpoint / "config.json", model_type="t5")
    with pytest.raises(ValueError, match="model_type='t5' is not one this library converts"):
        TransformerSeq2SeqLM.from_preset(checkpoint)
    with pytest.raises(ValueError, match="model_type='t5'"):
        kt.export.export(checkpoint, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_generation_config_gives_transformers_decoding_defaults():
    assert m2m100.decoding_defaults({"max_length": 200}) == {
        "beam_size": 1,
        "length_penalty": 1.0,
        "target_prefix": None,
        "max_length": 199,
    }
    settings = {"num_beams": 4, "length_penalty": 0.6, "forced_bos_token_id": 1003}
    assert m2m100.decoding_defaults(settings)["target_prefix"] == 1003
    with pytest.raises(m2m100.M2M100Error, match="num_beams=0 must be >= 1"):
        m2m100.decoding_defaults({"num_beams": 0})


def test_weights_are_read_one_at_a_time_and_the_table_by_blocks(monkeypatch):
    """The reader holds names and shapes only: checking a checkpoint reads no weight, and
    the import reads each one when it assigns it, the embedding table a block of rows at a
    time (here 100 rows, 11 blocks), into the same model as a whole read gives."""
    from safetensors.numpy import load_file

    reads = []
    original = m2m100.SafetensorsWeights._read

    def counted(self, name, read):
        reads.append(name)
        return original(self, name, read)

    monkeypatch.setattr(m2m100.SafetensorsWeights, "_read", counted)
    checkpoint = m2m100.read_checkpoint(CHECKPOINT)
    assert reads == [] and "model.shared.weight" in checkpoint.weights
    assert checkpoint.weights.shape("model.shared.weight") == (1009, 32)
    monkeypatch.setattr(m2m100, "ROWS_AT_ONCE", 100)
    model, _ = m2m100.load_m2m100(checkpoint)
    assert reads.count("model.shared.weight") == 11
    whole = load_file(str(CHECKPOINT / "model.safetensors"))
    np.testing.assert_array_equal(
        np.asarray(model.target_embedding.token_embedding.embeddings),
        whole["model.shared.weight"][order()],
    )
    kernel = model.encoder.encoder_layers[0].feed_forward.inner_dense.kernel
    np.testing.assert_array_equal(np.asarray(kernel), whole["model.encoder.layers.0.fc1.weight"].T)


def test_zeros_initialized_builds_zeros_and_puts_keras_back():
    import keras

    from keras_transformer.model import zeros_initialized

    original = keras.layers.Layer.add_weight
    with zeros_initialized():
        layer = keras.layers.Dense(3, kernel_initializer="ones")
        layer.build((None, 2))
    assert not np.asarray(layer.kernel).any()
    assert keras.layers.Layer.add_weight is original
    after = keras.layers.Dense(3, kernel_initializer="ones")
    after.build((None, 2))
    assert np.asarray(after.kernel).all()
