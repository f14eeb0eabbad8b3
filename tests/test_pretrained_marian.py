"""OPUS-MT (Marian) import: parity with transformers on checkpoints that transformers made
(tests/fixtures/marian, made once by its make_fixture.py; no torch or transformers here).

Token ids against `MarianTokenizer`, decoded text against its `decode`, teacher-forced
log-probabilities against `MarianMTModel` to 1e-4, greedy ids against `generate` (up to
where two tokens tie); the same weights from tf_model.h5 and model.safetensors; bad
checkpoints refused by name."""

import functools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.pretrained import marian

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "marian"
CHECKPOINTS = ("shared", "separate")


@functools.cache
def reference(name: str) -> dict:
    return json.loads((FIXTURES / "reference.json").read_text())["checkpoints"][name]


def imported(name: str):
    """(model, vocabularies, source order, target order) of a fixture checkpoint. The model
    is loaded once; the tokenizers anew for each test (conftest's seeding between tests
    destroys TensorFlow's SentencePiece resources of tokenizers made before it)."""
    model, source, target = _imported(name)
    return model, marian.load_vocabularies(FIXTURES / name), source, target


@functools.cache
def _imported(name: str):
    model, _ = marian.load_marian(FIXTURES / name)
    config = json.loads((FIXTURES / name / "config.json").read_text())
    vocab = json.loads((FIXTURES / name / "vocab.json").read_text())
    source = marian.vocabulary_order(vocab, config)
    target = source
    if (FIXTURES / name / "target_vocab.json").exists():
        target_vocab = json.loads((FIXTURES / name / "target_vocab.json").read_text())
        target = marian.vocabulary_order(target_vocab, config)
    return model, source, target


def ours(order: list[int]) -> dict[int, int]:
    """Marian id -> our id (Marian's start row is our <s>, not our padding)."""
    return {marian_id: i for i, marian_id in enumerate(order) if i != kt.PAD_ID}


TIE = 1e-3  # nats between a step's two best logits


@functools.cache
def first_near_ties(name: str) -> tuple[int | None, ...]:
    """For each greedy item of checkpoint `name`: the first step of transformers' output at
    which our model's two best tokens (teacher-forced along that output) are within TIE of
    each other, or None.

    Our logits and transformers' agree to about 1e-5, not to the last bit, so at such a step
    either engine may take either token, and which one depends on the CPU's rounding: the
    fixture holds steps whose two best tokens are 4e-6 apart (shared) and 2e-5 (separate).
    Greedy outputs are compared up to their first such step."""
    model, source, target = _imported(name)
    to_source, to_target = ours(source), ours(target)
    pad = json.loads((FIXTURES / name / "config.json").read_text())["pad_token_id"]
    ties = []
    for item in reference(name)["greedy"]["items"]:
        pairs = zip(item["input_ids"], item["attention_mask"], strict=True)
        source_ids = np.array([[to_source[i] for i, keep in pairs if keep]])
        output = [to_target[i] for i in item["ids"][1:] if i != pad]
        target_ids = np.array([[kt.text.BOS_ID, *output[:-1]]])
        logits = model({"source_ids": source_ids, "target_ids": target_ids}, training=False)
        logits = np.array(logits[0])
        logits[:, [kt.PAD_ID, kt.text.BOS_ID]] = -np.inf  # never generated
        best = -np.sort(-logits, axis=1)[:, :2]
        tied = np.flatnonzero(best[:, 0] - best[:, 1] < TIE)
        ties.append(int(tied[0]) if tied.size else None)
    return tuple(ties)


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_source_and_target_ids_are_marian_tokenizers(name):
    _, vocabularies, source, target = imported(name)
    for side, tokenizer, order, key in (
        ("source_encoding", vocabularies.source, source, "input_ids"),
        ("target_encoding", vocabularies.target, target, "labels"),
    ):
        items = reference(name)[side]
        ids = tokenizer.tokenize([item["text"] for item in items])
        for item, row in zip(items, ids.to_list(), strict=True):
            marian_ids = [order[i] for i in row + [kt.text.EOS_ID]]
            assert marian_ids == item[key], item["text"]
    assert len(reference(name)["source_encoding"]) >= 100


def test_the_fixture_covers_the_hard_cases():
    texts = [item["text"] for item in reference("shared")["source_encoding"]]
    assert "" in texts and any(t.startswith(">>es<<") for t in texts)
    assert any(">>xx<<" in t for t in texts) and any("\U0001f600" in t or "漢" in t for t in texts)
    omitted = reference("shared")["omitted_pieces"]["source"]
    pieces = vocabulary_pieces("shared")
    assert omitted and not set(omitted) & set(pieces)  # pieces missing from vocab.json


def vocabulary_pieces(name):
    return set(json.loads((FIXTURES / name / "vocab.json").read_text()))


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_decoding_is_marian_tokenizers_decode(name):
    _, vocabularies, _, target = imported(name)
    mapping = ours(target)
    items = reference(name)["decoding"]
    width = max(len(item["ids"]) for item in items)
    ids = np.zeros((len(items), width), "int32")
    for row, item in enumerate(items):
        # An id past the vocabulary decodes as <unk> there: so here.
        ids[row, : len(item["ids"])] = [mapping.get(i, kt.text.UNK_ID) for i in item["ids"]]
    texts = [t.decode("utf-8") for t in vocabularies.target.detokenize(ids).numpy()]
    assert texts == [item["text"] for item in items]


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_the_ctranslate2_client_cuts_and_joins_pieces_as_marian_tokenizer(name):
    """`kt.serving.PieceRules` (the CTranslate2 runtime's, plain Python) with the rules the
    CTranslate2 export writes, pieces numbered as CTranslate2 numbers them (our vocabulary
    lists): transformers' ids for every encoding item (empty strings, `>>xx<<` prefixes,
    special tokens inside text, pieces missing from vocab.json) and its text for every
    decoding item."""
    import sentencepiece

    from keras_transformer.export.ctranslate2 import _piece_rules
    from keras_transformer.serving import PieceRules

    _, vocabularies, source_order, target_order = imported(name)
    rules = _piece_rules(vocabularies)["pieces"]

    def spm(file):
        return sentencepiece.SentencePieceProcessor(model_file=str(FIXTURES / name / file))

    for side, file, tokenizer, order, key in (
        ("source_encoding", "source.spm", vocabularies.source, source_order, "input_ids"),
        ("target_encoding", "target.spm", vocabularies.target, target_order, "labels"),
    ):
        client = PieceRules(spm(file), None, rules)
        index = {piece: i for i, piece in enumerate(tokenizer.get_vocabulary())}
        for item in reference(name)[side]:
            ours_ids = [index.get(p, kt.text.UNK_ID) for p in client.split(item["text"])]
            assert [order[i] for i in ours_ids + [kt.text.EOS_ID]] == item[key], item["text"]
    target_pieces = vocabularies.target.get_vocabulary()
    client = PieceRules(spm("source.spm"), spm("target.spm"), rules, target_pieces)
    mapping = ours(target_order)
    for item in reference(name)["decoding"]:
        pieces = [target_pieces[mapping.get(i, kt.text.UNK_ID)] for i in item["ids"]]
        assert client.join(pieces) == item["text"], item["ids"]


@pytest.mark.parametrize("name", CHECKPOINTS)
@pytest.mark.exact
def test_teacher_forced_log_probabilities_equal_transformers(name):
    model, _, source, target = imported(name)
    to_source, to_target = ours(source), ours(target)
    arrays = np.load(FIXTURES / "reference.npz")
    worst = 0.0
    for index, item in enumerate(reference(name)["teacher_forcing"]):
        source_ids = np.array([[to_source[i] for i in item["input_ids"]]])
        target_ids = np.array([[to_target[i] for i in item["decoder_input_ids"]]])
        assert target_ids[0, 0] == kt.text.BOS_ID  # Marian's start, our <s>
        logits = model({"source_ids": source_ids, "target_ids": target_ids}, training=False)
        log_probs = tf.nn.log_softmax(logits)[0].numpy()  # (len, our vocab)
        labels = [to_target[i] for i in item["labels"]]
        got = log_probs[np.arange(len(labels)), labels]
        worst = max(worst, float(np.abs(got - item["label_log_probs"]).max()))
        full = f"{name}_tf{index}_log_probs"
        if full in arrays.files:  # every entry of the distribution, in Marian's order
            theirs = arrays[full]
            mapped = np.empty_like(theirs)
            mapped[:, target[1:]] = log_probs[:, 1:]  # our padding row is out of the softmax
            worst = max(worst, float(np.abs(mapped - theirs).max()))
    assert worst <= 1e-4


@pytest.mark.parametrize("name", CHECKPOINTS)
@pytest.mark.exact
def test_greedy_ids_equal_transformers_generate(name):
    """All sentences in one padded batch (padding never changes a sentence's translation),
    transformers' limit of 64 positions: 63 tokens after the start, the last forced EOS. Each
    up to its first near tie (`first_near_ties`), where either token may come."""
    model, _, source, target = imported(name)
    to_source = ours(source)
    pad = json.loads((FIXTURES / name / "config.json").read_text())["pad_token_id"]
    generation = reference(name)["greedy"]["generation_config"]
    limit = marian.decoding_defaults(generation)["max_length"]
    items = reference(name)["greedy"]["items"]
    assert len(items) >= 25
    rows = []
    for item in items:
        pairs = zip(item["input_ids"], item["attention_mask"], strict=True)
        rows.append([to_source[i] for i, keep in pairs if keep])
    source_ids = np.zeros((len(rows), max(map(len, rows))), "int32")
    for row, ids in enumerate(rows):
        source_ids[row, : len(ids)] = ids
    search = tf.function(
        lambda s: kt.decoding.greedy_search(model, s, max_extra_length=limit, max_length=limit)
    )
    ids, _ = search(source_ids)
    ties = first_near_ties(name)
    assert sum(tie is None for tie in ties) >= 20  # most compared whole
    for item, row, tie in zip(items, ids.numpy(), ties, strict=True):
        got = [target[i] for i in row if i != kt.PAD_ID]
        expected = [i for i in item["ids"][1:] if i != pad]
        assert got[:tie] == expected[:tie], item["source"]  # tie None: the whole output


@pytest.mark.exact
def test_the_library_translator_gives_text():
    """kt.evaluation.Translator (what trainers.evaluate and the dev BLEU run) returns plain
    strings for an imported model too: the greedy translations of transformers (those
    without a near tie, `first_near_ties`)."""
    model, vocabularies, _, _ = imported("shared")
    items = []
    greedy = zip(reference("shared")["greedy"]["items"], first_near_ties("shared"), strict=True)
    for item, tie in greedy:
        output = item["ids"][1:]  # ended within both engines' length limits
        length = output.index(0) + 1 if 0 in output else len(output)
        if item["source"] and length < min(63, sum(item["attention_mask"]) + 50) and tie is None:
            items.append(item)
    assert len(items) >= 10
    translator = kt.evaluation.Translator(model, vocabularies, beam_size=1)
    got = translator.translate([item["source"] for item in items])
    assert got == [item["text"] for item in items]


def test_tf_model_h5_holds_the_same_weights_as_safetensors(tmp_path):
    only_h5 = tmp_path / "h5"
    shutil.copytree(FIXTURES / "shared", only_h5, ignore=shutil.ignore_patterns("*.safetensors"))
    from_h5, _ = marian.load_marian(only_h5)
    from_safetensors = imported("shared")[0]
    for a, b in zip(from_h5.weights, from_safetensors.weights, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6, err_msg=a.path)


def test_the_architecture_options_are_general(tmp_path):
    config = imported("shared")[0].config
    assert (config.activation, config.sinusoid_layout, config.output_bias) == (
        "silu",
        "concatenated",
        True,
    )
    assert config.layer_norm_epsilon == 1e-5 and not config.norm_first
    separate = imported("separate")[0]
    assert not separate.config.share_embeddings
    assert separate.source_embedding is not separate.target_embedding


# -- Refusals ------------------------------------------------------------------------------


def copy_of(tmp_path, name="shared") -> Path:
    path = tmp_path / name
    shutil.copytree(FIXTURES / name, path)
    return path


def test_a_directory_with_only_pytorch_weights_names_the_files_it_needs(tmp_path):
    path = copy_of(tmp_path)
    for weights in ("model.safetensors", "tf_model.h5"):
        (path / weights).unlink()
    (path / "pytorch_model.bin").write_bytes(b"torch pickle")
    with pytest.raises(marian.MarianError, match="needs model.safetensors or tf_model.h5"):
        marian.read_checkpoint(path)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"model_type": "bart"}, "model_type='bart'; only Marian"),
        ({"normalize_before": True}, "normalize_before=True is not supported"),
        ({"activation_function": "gelu_new"}, "activation_function='gelu_new' is not supported"),
        ({"decoder_ffn_dim": 256}, "encoder_ffn_dim=128 differs from decoder_ffn_dim=256"),
        ({"d_model": 32}, "has shape"),
        ({"vocab_size": "1575"}, "vocab_size='1575' is not an integer"),
        ({"encoder_layers": 1.5}, "encoder_layers=1.5 is not an integer"),
        ({"dropout": [0.1]}, r"dropout=\[0.1\] is not a number"),
        ({"share_encoder_decoder_embeddings": "yes"}, "is not a boolean"),
        ({"eos_token_id": 5}, "eos_token_id=5, but .*vocab.json gives </s> the id 0"),
        # A config.json that has fewer layers than the weights: refused, not cut short.
        (
            {"encoder_layers": 1},
            "weights that config.json has no place for, such as model.encoder.layers.1",
        ),
    ],
)
def test_an_unsupported_config_is_refused_naming_the_key(tmp_path, change, message):
    path = copy_of(tmp_path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(marian.MarianError, match=message):
        marian.load_marian(path)


def test_a_missing_key_means_transformers_default(tmp_path):
    """config.json without `activation_function` is transformers' gelu; without
    `scale_embedding` it would be unscaled embeddings, which is not Marian's: refused."""
    path = copy_of(tmp_path, "separate")
    config = json.loads((path / "config.json").read_text())
    del config["activation_function"]
    assert marian.transformer_config(config).activation == "gelu"
    del config["scale_embedding"]
    with pytest.raises(marian.MarianError, match="no 'scale_embedding'; transformers then"):
        marian.transformer_config(config)


def write_vocab(path: Path, name: str, pairs: list) -> None:
    """`pairs` as a JSON object in `path / name`, in their order, repeats kept."""
    body = ", ".join(f"{json.dumps(piece)}: {json.dumps(i)}" for piece, i in pairs)
    (path / name).write_text("{" + body + "}")


def vocab_pairs(name="separate", file="vocab.json") -> list:
    return list(json.loads((FIXTURES / name / file).read_text()).items())


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda v: v + [v[5]], r"vocab.json: '.*' appears twice"),
        (lambda v: v[:5] + [(v[5][0], 5.0)] + v[6:], "has the id 5.0, not an integer"),
        (lambda v: v[:5] + [(v[5][0], 6)] + v[6:], "and '.*' have the same id 6"),
        (lambda v: v[:5] + [(v[5][0], 999)] + v[6:], "must be 0..394; '.*' has 999"),
        (lambda v: [p for p in v if p[0] != "</s>"] + [("x", 0)], "no </s> piece"),
        # Our name of the decoder start, which Marian's vocabularies do not have as a piece.
        (lambda v: v[:5] + [("<s>", 5)] + v[6:], r"vocab.json: pieces\[.*\]='<s>' repeats"),
    ],
)
def test_a_bad_vocabulary_is_refused_naming_the_file(tmp_path, change, message):
    path = copy_of(tmp_path, "separate")
    write_vocab(path, "vocab.json", change(vocab_pairs()))
    with pytest.raises(marian.MarianError, match=message):
        marian.load_marian(path)


def test_a_file_that_is_not_a_sentencepiece_model_is_refused(tmp_path):
    path = copy_of(tmp_path, "separate")
    (path / "target.spm").write_bytes(b"not a model")
    with pytest.raises(marian.MarianError, match="target.spm: not a SentencePiece model"):
        marian.load_marian(path)


def test_a_source_vocabulary_of_its_own_takes_its_own_special_pieces(tmp_path):
    """With separate vocabularies the source's <pad> and </s> are its own (as
    `MarianTokenizer` reads them), not config.json's ids, which are the target's: a source
    vocabulary one piece longer, its <pad> last, imports, and a sentence keeps its ids."""
    path = copy_of(tmp_path, "separate")
    pairs = vocab_pairs()
    pad = dict(pairs)["<pad>"]  # the last id
    extended = [p for p in pairs if p[0] != "<pad>"] + [("▁zzz", pad), ("<pad>", pad + 1)]
    write_vocab(path, "vocab.json", extended)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "vocab_size": pad + 2}))
    from safetensors.numpy import load_file, save_file

    weights = load_file(str(path / "model.safetensors"))
    table = weights["model.encoder.embed_tokens.weight"]
    weights["model.encoder.embed_tokens.weight"] = np.concatenate([table, table[-1:]])
    save_file(weights, str(path / "model.safetensors"))
    _, vocabularies = marian.load_marian(path)
    original = marian.load_vocabularies(FIXTURES / "separate")
    text = tf.constant(["Hello world </s> <pad>"])
    np.testing.assert_array_equal(
        vocabularies.source.tokenize(text).to_list(), original.source.tokenize(text).to_list()
    )
    assert vocabularies.source.vocabulary_size() == original.source.vocabulary_size() + 1


@pytest.mark.parametrize("copy", ["lm_head.weight", "model.encoder.embed_tokens.weight"])
def test_tied_copies_must_equal_their_table(tmp_path, copy):
    """Some checkpoints store the copies of the embedding table that transformers ties to
    it: the same values import; other values (an untied output projection) are refused."""
    from safetensors.numpy import load_file, save_file

    path = copy_of(tmp_path)
    weights = load_file(str(path / "model.safetensors"))
    weights[copy] = weights["model.shared.weight"].copy()
    save_file(weights, str(path / "model.safetensors"))
    marian.load_marian(path)
    weights[copy][5] += 1.0
    save_file(weights, str(path / "model.safetensors"))
    with pytest.raises(marian.MarianError, match=f"{copy} differs from model.shared.weight"):
        marian.load_marian(path)


@pytest.mark.parametrize(
    "setting, message",
    [
        ({"num_beams": 0}, "num_beams=0 must be >= 1"),
        ({"num_beams": "four"}, "num_beams='four' is not an integer"),
        ({"length_penalty": -0.5}, "length_penalty=-0.5 is not supported"),
        ({"max_length": 1}, "max_length=1 must be >= 2"),
    ],
)
def test_generation_settings_the_decoders_cannot_take_are_refused(setting, message):
    with pytest.raises(marian.MarianError, match=message):
        marian.decoding_defaults({"num_beams": 4, **setting})


def test_generation_settings_the_decoders_do_not_apply_are_named():
    generation = json.loads((FIXTURES / "shared" / "generation_config.json").read_text())
    assert marian.ignored_generation_settings(generation, 1574) == []  # OPUS-MT's own
    generation.update(do_sample=True, no_repeat_ngram_size=3, bad_words_ids=[[1574], [7, 8]])
    assert marian.ignored_generation_settings(generation, 1574) == [
        "do_sample=True",
        "no_repeat_ngram_size=3",
        "bad_words_ids=[[1574], [7, 8]]",
    ]


def test_missing_files_and_non_checkpoints_are_refused(tmp_path):
    with pytest.raises(marian.MarianError, match="not a directory"):
        marian.read_checkpoint(tmp_path / "nothing")
    with pytest.raises(marian.MarianError, match="config.json: missing"):
        marian.read_checkpoint(tmp_path)
    path = copy_of(tmp_path, "separate")
    (path / "target_vocab.json").unlink()
    (path / "source.spm").unlink()
    with pytest.raises(marian.MarianError, match="missing source.spm, target_vocab.json"):
        marian.read_checkpoint(path)


def test_the_former_checkpoint_module_still_reads_a_checkpoint(monkeypatch):
    """`kt.pretrained.checkpoint`, Marian's reader before the BART family's shared one
    (`bart.py`), is `marian` under its former name: every name it offered still works."""
    import importlib
    import sys

    # Imported anew whatever ran before (an earlier import left the module in sys.modules
    # and as an attribute of the package).
    monkeypatch.delitem(sys.modules, "keras_transformer.pretrained.checkpoint", raising=False)
    monkeypatch.delattr(kt.pretrained, "checkpoint", raising=False)
    with pytest.warns(DeprecationWarning, match="moved to keras_transformer.pretrained.marian"):
        checkpoint = importlib.import_module("keras_transformer.pretrained.checkpoint")
    names = ("Checkpoint", "MarianError", "read_checkpoint", "read_json", "number", "bart_sizes")
    names += ("NEUTRAL_GENERATION", "GENERATION_KEYS", "WEIGHT_FILES", "TOKENIZER_FILES")
    assert [name for name in names if not hasattr(checkpoint, name)] == []
    read = checkpoint.read_checkpoint(FIXTURES / "shared")
    assert isinstance(read, checkpoint.Checkpoint) and read.weights_file.name == "model.safetensors"
    assert "model.shared.weight" in read.weights and read.config["model_type"] == "marian"
    with pytest.raises(checkpoint.MarianError, match="num_beams='x' is not an integer"):
        checkpoint.number({"num_beams": "x"}, "num_beams")


def test_the_names_of_the_split_modules_are_still_offered_where_they_were():
    """bart.py's readers moved to bart_checkpoint, marian.py's reading and vocabularies to
    marian_checkpoint and marian_vocab: each name is still its former module's, the same
    object, and Marian's error still names the file."""
    from keras_transformer.pretrained import (
        bart,
        bart_checkpoint,
        m2m100,
        marian_checkpoint,
        marian_vocab,
    )

    moved = [
        (bart, bart_checkpoint, bart_checkpoint.__all__),
        (marian, marian_checkpoint, marian_checkpoint.__all__),
        (marian, marian_vocab, [*marian_vocab.__all__, "_orders", "_vocabularies"]),
        (m2m100, bart_checkpoint, ["SafetensorsWeights"]),
    ]
    for module, home, names in moved:
        assert [n for n in names if getattr(module, n, None) is not getattr(home, n)] == []
    with pytest.raises(marian.MarianError, match=r"vocab\.json: no <unk> piece"):
        marian.vocabulary_order({"<pad>": 0, "</s>": 1})


# -- Fine-tuning and export ----------------------------------------------------------------


@pytest.mark.exact
def test_twenty_steps_of_model_fit_lower_the_loss_and_the_model_exports_again(tmp_path):
    """A user's fine-tuning: the imported model compiled and fitted on Bible verses it has
    seen little of, then exported and loaded as TF Serving would."""
    import keras

    from tests import bible, ties

    model, vocabularies = marian.load_marian(FIXTURES / "shared")
    pairs = bible.pairs("dev", 400)
    batches = kt.data.make_dataset(
        pairs.to_dataset(), vocabularies, max_length=64, tokens_per_batch=1024, seed=3
    )
    held = batches.take(4).cache()  # the same batches before and after
    held = held.apply(tf.data.experimental.assert_cardinality(4))  # (Keras: not "ran out")
    model.compile(
        optimizer=keras.optimizers.Adam(3e-4),
        loss=kt.losses.LabelSmoothedCrossEntropy(0.1),
        jit_compile=False,  # XLA would compile each length bucket, for 20 steps
    )
    before = model.evaluate(held, verbose=0)
    model.fit(batches, steps_per_epoch=20, epochs=1, verbose=0)
    assert model.evaluate(held, verbose=0) < before - 0.05
    # Greedy (beam search's export: tests/test_export.py).
    version = kt.export.export(
        model,
        tmp_path,
        vocabularies=vocabularies,
        decoding=kt.decoding.DecodingSettings(beam_size=1),
    )
    loaded = tf.saved_model.load(str(version))
    texts = [pairs.sources[0], ">>es<< " + pairs.sources[1], ""]
    # The SavedModel's greedy graph and the eager search on weights fine-tuned in the run:
    # alike but where the two part at two tokens whose logits are within SCORE_TOLERANCE
    # (tests/ties.py, texts tokenized back); one of the two sentences at most (none written).
    served = loaded.signatures["serving_default"](text=tf.constant(texts))["translation"]
    source_ids = kt.data.source_batches(texts[:2], vocabularies.source, max_length=128)
    source_ids = source_ids.get_single_element()
    ids, _ = kt.decoding.greedy_search(model, source_ids)
    expected = [t.decode() for t in vocabularies.target.detokenize(ids).numpy()]
    served = [t.decode() for t in served.numpy()]
    assert len(served) == 3 and served[2] == ""
    mine, other = (
        [ties.tokenized_back(vocabularies.target, t) for t in x] for x in (served[:2], expected)
    )
    assert len(ties.rows_parted_at_ties(model, source_ids, mine, other)) <= 1
