"""`kt.pretrained.family`: every family of checkpoints implements the whole `CheckpointFamily`
contract, one table picks it, and `import_checkpoint` (the door of `kt.pretrained.load`,
`TransformerSeq2SeqLM.from_preset` and `trainers.import_pretrained`) gives the same model,
settings and record for OPUS-MT and NLLB-200 checkpoints (the transformers-made fixtures)."""

import inspect
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from keras_transformer import pretrained
from keras_transformer.pretrained import family, m2m100, marian

FIXTURES = Path(__file__).resolve().parent / "fixtures"
MARIAN = FIXTURES / "marian" / "shared"
NLLB = FIXTURES / "m2m100" / "nllb-tiny"


def contract() -> dict:
    """The methods of `CheckpointFamily`, name -> their parameters."""
    methods = inspect.getmembers(family.CheckpointFamily, inspect.isfunction)
    return {name: list(inspect.signature(f).parameters) for name, f in methods if name[0] != "_"}


def test_every_family_implements_the_whole_contract():
    assert set(pretrained.FAMILIES) == {"marian", "m2m_100"}
    assert pretrained.LOADERS is pretrained.FAMILIES  # the table's former name
    assert len(contract()) == 9
    for model_type, implementation in pretrained.FAMILIES.items():
        assert implementation.model_type == model_type and implementation.title
        for name, parameters in contract().items():
            method = getattr(type(implementation), name, None)
            assert callable(method), f"{model_type}: no {name}"
            assert list(inspect.signature(method).parameters) == parameters, (model_type, name)


def test_each_familys_refusal_is_a_checkpoint_error(tmp_path):
    assert issubclass(marian.MarianError, pretrained.CheckpointError)
    assert issubclass(m2m100.M2M100Error, pretrained.CheckpointError)
    assert issubclass(pretrained.CheckpointError, ValueError)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bart"}))
    with pytest.raises(pretrained.CheckpointError, match="model_type='bart' is not one this"):
        pretrained.import_checkpoint(tmp_path)


@pytest.mark.parametrize(
    ("path", "languages", "expected"),
    [
        (MARIAN, {}, {"beam_size": 4, "length_penalty": 1.0, "target_prefix": None}),
        (
            NLLB,
            {"source_language": "eng_Latn", "target_language": "spa_Latn"},
            {"beam_size": 1, "source_prefix": "eng_Latn", "target_prefix": "spa_Latn"},
        ),
    ],
)
def test_import_checkpoint_gives_what_load_gives_with_settings_files_and_record(
    path, languages, expected
):
    imported = pretrained.import_checkpoint(path, **languages)
    settings = imported.decoding.to_dict()
    assert {key: settings[key] for key in expected} == expected
    model, _ = pretrained.load(path)
    for ours, theirs in zip(imported.model.weights, model.weights, strict=True):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy(), err_msg=ours.path)
    assert {"config.json", "model.safetensors"} <= {p.name for p in imported.files}
    record = imported.record
    assert record["format"] == f"{pretrained.model_type(path)} (Hugging Face transformers)"
    assert record["ignored_generation_settings"] == imported.ignored == []
    assert all(isinstance(note, str) for note in imported.notes)


def test_languages_are_taken_by_nllb_and_refused_by_marian_before_the_model_is_built():
    with pytest.raises(marian.MarianError, match="is a Marian model, which takes no language"):
        pretrained.import_checkpoint(MARIAN, target_language="spa")
    with pytest.raises(m2m100.M2M100Error, match="--source-language=eng_latn is not one of"):
        pretrained.import_checkpoint(NLLB, source_language="eng_latn")


def test_the_generation_settings_not_applied_are_each_familys_own(tmp_path):
    """NLLB-200 applies forced_bos_token_id (the target prefix): not named as ignored; a
    setting neither family applies is named by both."""
    spanish = m2m100.read_checkpoint(NLLB).vocabulary.added["spa_Latn"]
    for source, forced, ignored in ((MARIAN, 3, ["forced_bos_token_id=3"]), (NLLB, spanish, [])):
        checkpoint = tmp_path / source.name
        shutil.copytree(source, checkpoint)
        generation = json.loads((checkpoint / "generation_config.json").read_text())
        generation.update(do_sample=True, forced_bos_token_id=forced)
        (checkpoint / "generation_config.json").write_text(json.dumps(generation))
        implementation = pretrained.FAMILIES[pretrained.model_type(checkpoint)]
        read = implementation.read_checkpoint(checkpoint)
        assert implementation.ignored_generation_settings(read) == ["do_sample=True", *ignored]
