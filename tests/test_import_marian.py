"""`trainers.import_marian` as users run it: a transformers-made OPUS-MT checkpoint
(tests/fixtures/marian) becomes a model directory that the other programs take unchanged:
export (SavedModel and CTranslate2, the same greedy translations as transformers), evaluate,
and train, which fine-tunes it from its imported weights."""

import json
import shutil
from pathlib import Path

import keras
import keras_hub
import numpy as np
import pytest

import keras_transformer as kt
from tests.cli import run_main
from tests.test_pretrained_marian import first_near_ties
from tests.test_run_dir import PRESET_FILES
from tests.test_trainer import slice_config, summary_line, train_cli
from trainers.experiment import DecodingConfig, load_experiment

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "marian"


def reference(name="shared") -> dict:
    return json.loads((FIXTURES / "reference.json").read_text())["checkpoints"][name]


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("import") / "opus"
    result = run_main(
        "trainers.import_marian",
        FIXTURES / "shared",
        "--model-dir",
        model_dir,
        "--peak-learning-rate",
        "1e-3",
        "--warmup-steps",
        "10",
    )
    return model_dir, result


def test_the_import_writes_a_model_directory_with_its_provenance(imported):
    model_dir, result = imported
    assert f"into {model_dir}" in result.stdout
    names = sorted(p.name for p in model_dir.iterdir())
    expected = ["experiment.yaml", "model.keras", "pretrained.json", "vocab", *PRESET_FILES]
    expected.append("model.pretrained.keras")  # the imported weights, kept when fine-tuned
    assert names == sorted(expected)  # a model directory, and a keras-hub preset
    assert sorted(p.name for p in (model_dir / "vocab").iterdir()) == [
        "manifest.json",
        "pieces.json",
        "source.spm",
        "target.spm",
    ]
    record = json.loads((model_dir / "pretrained.json").read_text())
    assert record["name_or_path"] == "tiny-opus-mt-en-es-fixture"
    assert set(record["files"]) >= {"config.json", "model.safetensors", "vocab.json"}
    assert record["decoding"] == {"beam_size": 4, "max_length": 63}
    # evaluate's and export's defaults: the generation config's beam, transformers' exponent
    experiment = load_experiment(model_dir / "experiment.yaml", resolved=True)
    assert experiment.decoding == DecodingConfig(beam_size=4, length_penalty=1.0)
    # No preset: the base preset's name on a d_model-64 model said what it is not.
    assert "preset: null\n" in (model_dir / "experiment.yaml").read_text()
    assert experiment.preset is None and experiment.model.d_model == 64
    # Fine-tuning without XLA, which compiles every length bucket (BENCHMARKS.md).
    assert experiment.training.jit_compile is False
    task = keras_hub.models.Seq2SeqLM.from_preset(str(model_dir))
    assert isinstance(task, kt.models.TransformerSeq2SeqLM)
    assert task.decoding == experiment.decoding
    expected = keras.saving.load_model(model_dir / "model.keras").get_weights()
    for ours, theirs in zip(task.backbone.get_weights(), expected, strict=True):
        np.testing.assert_array_equal(ours, theirs)
    kept = keras.saving.load_model(model_dir / "model.pretrained.keras").get_weights()
    for ours, theirs in zip(kept, expected, strict=True):
        np.testing.assert_array_equal(ours, theirs)


def test_a_second_import_or_a_bad_checkpoint_writes_nothing(imported, tmp_path):
    model_dir, _ = imported
    again = run_main(
        "trainers.import_marian", FIXTURES / "shared", "--model-dir", model_dir, check=False
    )
    assert again.returncode == 2 and "exists and is not empty" in again.stderr
    broken = edited_copy(tmp_path / "broken", "config.json", d_model=48)
    result = run_main(
        "trainers.import_marian", broken, "--model-dir", tmp_path / "new", check=False
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "model.safetensors: model.encoder.layers.0.self_attn.q_proj.weight has shape" in (
        result.stderr
    )
    assert not (tmp_path / "new").exists()


def edited_copy(path: Path, name: str, **changes) -> Path:
    """A copy of the separate-vocabulary fixture at `path`, its JSON file `name` changed."""
    shutil.copytree(FIXTURES / "separate", path)
    settings = json.loads((path / name).read_text())
    (path / name).write_text(json.dumps({**settings, **changes}))
    return path


def test_generation_settings_are_checked_before_any_work_and_the_unapplied_ones_named(tmp_path):
    checkpoint = edited_copy(tmp_path / "checkpoint", "generation_config.json", num_beams=0)
    generation = json.loads((FIXTURES / "separate" / "generation_config.json").read_text())
    refused = run_main(
        "trainers.import_marian", checkpoint, "--model-dir", tmp_path / "new", check=False
    )
    assert refused.returncode == 2
    assert "generation_config.json: num_beams=0 must be >= 1" in refused.stderr
    assert not (tmp_path / "new").exists()
    # Settings that the decoders do not apply: imported, with a note and their record.
    sampled = {**generation, "do_sample": True, "no_repeat_ngram_size": 3}
    (checkpoint / "generation_config.json").write_text(json.dumps(sampled))
    result = run_main("trainers.import_marian", checkpoint, "--model-dir", tmp_path / "new")
    note = "does not apply: do_sample=True, no_repeat_ngram_size=3"
    assert note in result.stderr
    record = json.loads((tmp_path / "new" / "pretrained.json").read_text())
    assert record["ignored_generation_settings"] == ["do_sample=True", "no_repeat_ngram_size=3"]


def test_a_file_as_the_model_directory_is_refused_and_kept(tmp_path):
    file = tmp_path / "notes.txt"
    file.write_text("mine")
    result = run_main(
        "trainers.import_marian", FIXTURES / "separate", "--model-dir", file, check=False
    )
    assert result.returncode == 2 and f"--model-dir {file} is a file" in result.stderr
    assert file.read_text() == "mine"
    # A directory under a file: one line, before any work (not the traceback of a mkdir).
    under = run_main(
        "trainers.import_marian", FIXTURES / "separate", "--model-dir", file / "x", check=False
    )
    assert under.returncode == 2
    assert under.stderr == (
        f"python -m trainers.import_marian: error: --model-dir {file / 'x'}: {file} is a file, "
        "not a folder\n"
    )
    assert file.read_text() == "mine"


def natural_ends(items):
    """The greedy items whose transformers translation ended with EOS within every length
    limit (ours: source + 50 tokens, EOS included; transformers': 63 after the start)."""
    kept = []
    for item in items:
        output = item["ids"][1:]  # after the decoder start; padded after EOS
        length = output.index(0) + 1 if 0 in output else len(output)
        # An input with nothing to translate is answered "" by the exports (transformers
        # decodes from </s> alone): not compared.
        if item["source"].strip() and length < min(63, sum(item["attention_mask"]) + 50):
            kept.append(item)
    return kept


@pytest.mark.exact
def test_both_exports_translate_as_transformers_generate(imported, tmp_path):
    from keras_transformer.serving import CTranslate2Translator, SavedModelTranslator

    model_dir, _ = imported
    # Those without a near tie, where either engine may take either token.
    greedy = zip(reference()["greedy"]["items"], first_near_ties("shared"), strict=True)
    items = natural_ends([item for item, tie in greedy if tie is None])
    assert len(items) >= 10
    sources = [item["source"] for item in items]
    expected = [item["text"] for item in items]
    run_main(
        "trainers.export",
        "--model-dir",
        model_dir,
        "--out",
        tmp_path / "sm",
        "--beam-size",
        "1",
    )
    saved = SavedModelTranslator(tmp_path / "sm" / "1")
    got = [h[0].text for h in saved.translate([s.encode() for s in sources])]
    assert got == expected
    run_main(
        "trainers.export",
        "--model-dir",
        model_dir,
        "--out",
        tmp_path / "ct2",
        "--format",
        "ctranslate2",
    )
    ct2 = CTranslate2Translator(tmp_path / "ct2")
    assert [h[0].text for h in ct2.translate(sources, beam_size=1)] == expected


@pytest.mark.exact
def test_evaluate_scores_what_the_exported_saved_model_serves(imported, tmp_path):
    """With the directory's settings (the generation config's beam of 4, length penalty
    1.0), every translation that evaluate scores is the one the SavedModel that export wrote
    serves (the imported model's translations are sentences), and the BLEU is that of the
    lines evaluate wrote. Two graphs of one engine on the fixture's weights, over batches of other
    widths: a translation may differ only where the search, replayed (`ties.replay_beam`,
    the directory's settings), meets a choice within SCORE_TOLERANCE
    (`ties.translations_part_at_a_tie`); all but two alike (all when written)."""
    from keras_transformer import evaluation
    from keras_transformer.models import TransformerSeq2SeqLM
    from keras_transformer.serving import SavedModelTranslator
    from tests import ties
    from trainers.run_dir import RunDirectory

    model_dir, _ = imported
    items = [item for item in reference()["greedy"]["items"] if item["source"].strip()]
    sources, references = [item["source"] for item in items], [item["text"] for item in items]
    (tmp_path / "src").write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    (tmp_path / "ref").write_text("".join(r + "\n" for r in references), encoding="utf-8")
    texts = ("--source", tmp_path / "src", "--reference", tmp_path / "ref")
    output = ("--output", tmp_path / "evaluated.hyp")
    scores = json.loads(
        run_main("trainers.evaluate", "--model-dir", model_dir, *texts, *output).stdout
    )
    assert (scores["beam_size"], scores["length_penalty"]) == (4, 1.0)
    run_main("trainers.export", "--model-dir", model_dir, "--out", tmp_path / "sm")
    saved = SavedModelTranslator(tmp_path / "sm" / "1")
    served = [h[0].text for h in saved.translate([s.encode() for s in sources])]
    evaluated = (tmp_path / "evaluated.hyp").read_text(encoding="utf-8").splitlines()
    assert len(set(served)) > len(sources) // 2  # sentences, not one answer
    assert len(served) == len(evaluated) == len(sources)
    if served != evaluated:
        model = keras.saving.load_model(model_dir / "model.keras")
        vocabularies = RunDirectory(model_dir).load_vocabularies()
        settings = TransformerSeq2SeqLM.from_preset(model_dir).decoding
        for sentence, mine, other in zip(sources, evaluated, served, strict=True):
            assert mine == other or ties.translations_part_at_a_tie(
                model, vocabularies, settings, sentence, mine, other, tolerance=ties.SCORE_TOLERANCE
            ), (sentence, mine, other)
    assert sum(a == b for a, b in zip(served, evaluated, strict=True)) >= len(sources) - 2
    assert evaluation.score(evaluated, references)["bleu"] == scores["bleu"]


@pytest.mark.exact
def test_training_fine_tunes_the_imported_weights(imported, tmp_path, capsys):
    model_dir, _ = imported
    fine_tuned = tmp_path / "fine-tuned"
    shutil.copytree(model_dir, fine_tuned)
    train_file = slice_config(tmp_path).parent / "train.tsv"
    result = train_cli(
        None,
        fine_tuned,
        "--set",
        f"data.train={train_file}",
        "--set",
        "training.steps=20",
        "--set",
        "training.steps_per_epoch=10",
    )  # without XLA: the imported experiment's default
    pretrained = fine_tuned / "model.pretrained.keras"
    assert f"starting from the pretrained weights of {pretrained}" in result.stdout
    # The imported file holds no optimizer state, and is loaded before Adam exists: no
    # "Skipping variable loading for optimizer 'adam', ... the saved optimizer has 0".
    assert "Skipping variable loading" not in result.stderr, result.stderr[-2000:]
    summary = summary_line(result.stdout)
    assert summary["steps"] == 20 and summary["jit_compile"] is False
    assert summary["final_loss"] < summary["initial_loss"]  # no margin
    # model.keras is the fine-tuned model; the imported one stays, named so.
    imported_weights = keras.saving.load_model(model_dir / "model.keras").get_weights()
    for kept, imported_weight in zip(
        keras.saving.load_model(pretrained).get_weights(), imported_weights, strict=True
    ):
        np.testing.assert_array_equal(kept, imported_weight)
    tuned = keras.saving.load_model(fine_tuned / "model.keras").get_weights()
    assert any(not np.array_equal(a, b) for a, b in zip(tuned, imported_weights, strict=True))
    # The directory now belongs to this fine-tuning: the same command resumes it (in this
    # process: nothing to train); a bad flag is refused as the flag's.
    from trainers import train

    # The program turns the speed switch on for the run (training.fast); in this process it
    # must be left as it was, for the tests that run after this one.
    with kt.fast.switched(kt.fast.is_enabled()):
        assert train.main(["--model-dir", str(fine_tuned), "--set", "training.steps=20"]) == 0
        assert "already holds this run" in capsys.readouterr().out
        assert train.main(["--model-dir", str(fine_tuned), "--set", "training.steps=1"]) == 2
    refused = capsys.readouterr().err
    assert refused.startswith(
        f"python -m trainers.train: error: --set training.steps=1 (with "
        f"{fine_tuned / 'experiment.yaml'}): "
        "training.steps=1 is not a multiple of training.steps_per_epoch=10"
    ), refused
    # Starting over, as docs/guides/pretrained.md says: without the fine-tuning's files,
    # training starts from the imported weights again, on any data.
    for name in ("backup", "checkpoints", "logs"):
        shutil.rmtree(fine_tuned / name)
    (fine_tuned / "train_summary.json").unlink()
    other = shutil.copyfile(train_file, tmp_path / "other.tsv")  # another data.train
    again = train_cli(
        None,
        fine_tuned,
        "--set",
        f"data.train={other}",
        "--set",
        "training.steps=10",
    )
    assert f"starting from the pretrained weights of {pretrained}" in again.stdout
    assert summary_line(again.stdout)["initial_loss"] == pytest.approx(
        summary["initial_loss"], rel=0.2
    )
    assert load_experiment(fine_tuned / "experiment.yaml", resolved=True).data.train == str(other)
