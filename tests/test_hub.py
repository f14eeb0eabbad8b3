"""Checkpoints by Hugging Face Hub id (`keras_transformer._hub`): `hf://ORG/NAME[@REVISION]`
in `TransformerSeq2SeqLM.from_preset` and `trainers.import_pretrained`, downloaded with
huggingface_hub's own `snapshot_download` and then imported as the local directory is.

No test reaches the network: each builds a Hugging Face cache from the transformers-made
fixtures (tests/fixtures/marian, tests/fixtures/m2m100) laid out as huggingface_hub lays
out a download (`models--ORG--NAME/snapshots/COMMIT/` with links into `blobs/`, and
`refs/BRANCH` holding the commit) and sets HF_HUB_OFFLINE, so the real download code runs
and finds the files in the cache."""

import hashlib
import json
import shutil
from fnmatch import fnmatch
from pathlib import Path

import huggingface_hub
import pytest
from huggingface_hub import constants

from keras_transformer import _hub as hub
from keras_transformer._files import sha256
from tests import programs
from tests.cli import run_main
from trainers import import_pretrained

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
MARIAN = FIXTURES / "marian" / "shared"
MARIAN_SEPARATE = FIXTURES / "marian" / "separate"
NLLB = FIXTURES / "m2m100" / "nllb-tiny"
OPUS = "Helsinki-NLP/opus-mt-en-es"
NLLB_ID = "facebook/nllb-200-distilled-600M"
ENGLISH = ["In the beginning God created the heaven and the earth.", "Jesus wept.", ""]


def commit_of(name: str) -> str:
    """A 40-hex commit id, as the Hub's."""
    return hashlib.sha1(name.encode()).hexdigest()


def add_to_cache(cache: Path, repo_id: str, files: Path, commit: str, refs=("main",)) -> Path:
    """The files under `files` as huggingface_hub leaves a download of `repo_id` at `commit`:
    each in blobs/ under its hash, linked from snapshots/COMMIT/ by a relative link, and each
    of `refs` naming the commit. Returns the snapshot directory."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir(exist_ok=True)
    for file in sorted(p for p in files.rglob("*") if p.is_file()):
        digest = sha256(file)
        if not (repo / "blobs" / digest).exists():
            shutil.copyfile(file, repo / "blobs" / digest)
        name = file.relative_to(files)
        (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
        (snapshot / name).symlink_to(Path(*[".."] * len(name.parts), "..", "blobs", digest))
    for ref in refs:
        (repo / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(commit)
    return snapshot


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """An empty Hugging Face cache, in this process (huggingface_hub read its environment
    when it was imported) and in the environment its subprocesses get, with the network off."""
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


@pytest.fixture
def downloads(monkeypatch):
    """The `allow_patterns` of every `snapshot_download` call, which still runs."""
    calls = []
    real = huggingface_hub.snapshot_download

    def recording(repo_id, **kwargs):
        calls.append((repo_id, kwargs.get("revision"), list(kwargs["allow_patterns"])))
        return real(repo_id, **kwargs)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", recording)
    return calls


def test_the_prefix_the_program_tests_is_the_librarys():
    assert import_pretrained.HUB_PREFIX == hub.PREFIX


@pytest.mark.parametrize(
    ("uri", "says"),
    [
        ("hf://", "Empty body"),
        ("hf://onlyname", "must be 'namespace/name'"),
        ("hf://Helsinki-NLP/opus-mt-en-es@", "Empty revision"),
        ("hf://Helsinki--NLP/opus-mt-en-es", "Cannot have -- or .."),
        ("hf://datasets/Helsinki-NLP/opus-100", "a dataset repository"),
        ("hf://Helsinki-NLP/opus-mt-en-es/config.json", "names 'config.json' inside"),
    ],
)
def test_a_malformed_id_is_refused_by_name_before_any_download(uri, says, offline, downloads):
    with pytest.raises(hub.HubError, match=f"^{uri}: .*{says}") as raised:
        hub.fetch(uri)
    assert "\n" not in str(raised.value)
    from keras_transformer.models import TransformerSeq2SeqLM

    with pytest.raises(ValueError, match=f"^{uri}: .*{says}"):
        TransformerSeq2SeqLM.from_preset(uri)
    result = run_main(
        "trainers.import_pretrained", uri, "--model-dir", offline.parent / "out", check=False
    )
    assert result.returncode == 2
    assert f"{uri}: " in result.stderr and says in result.stderr
    assert downloads == [] and list(offline.iterdir()) == []
    assert not (offline.parent / "out").exists()


def test_a_repository_or_file_not_in_the_cache_offline_is_one_line_naming_the_id(offline, tmp_path):
    with pytest.raises(hub.HubError) as raised:
        hub.fetch(f"hf://{OPUS}")
    message = str(raised.value)
    assert message.startswith(f"hf://{OPUS}: not in the Hugging Face cache ({offline})")
    assert "the network is off (HF_HUB_OFFLINE is set), or no such repository" in message
    assert "\n" not in message
    # A revision the cache does not have.
    add_to_cache(offline, OPUS, MARIAN, commit_of("a"))
    with pytest.raises(hub.HubError, match=f"^hf://{OPUS}@v2: not in the Hugging Face cache"):
        hub.fetch(f"hf://{OPUS}@v2")
    # A snapshot cached without a file the import reads: named, with the snapshot.
    partial = tmp_path / "partial"
    shutil.copytree(MARIAN, partial)
    (partial / "target.spm").unlink()
    (partial / "model.safetensors").unlink()
    (partial / "tf_model.h5").unlink()
    snapshot = add_to_cache(offline, "me/partial", partial, commit_of("p"))
    with pytest.raises(hub.HubError) as raised:
        hub.fetch("hf://me/partial")
    assert str(raised.value) == (
        f"hf://me/partial: target.spm, model.safetensors or tf_model.h5 not in the Hugging "
        f"Face cache ({snapshot}) and the network is off (HF_HUB_OFFLINE is set), or the "
        "repository has no such file"
    )
    model_dir = tmp_path / "out"
    result = run_main(
        "trainers.import_pretrained", "hf://me/partial", "--model-dir", model_dir, check=False
    )
    assert result.returncode == 2 and "hf://me/partial: target.spm, model" in result.stderr
    assert not model_dir.exists()


def test_only_the_files_the_importer_reads_are_asked_for(offline, downloads):
    """What an OPUS-MT and an NLLB-200 repository hold; the patterns of the calls select
    the importer's files, the weights it prefers, and a second choice only without them."""
    opus_repository = [
        ".gitattributes",
        "README.md",
        "config.json",
        "flax_model.msgpack",
        "generation_config.json",
        "metadata.json",
        "model.safetensors",
        "pytorch_model.bin",
        "rust_model.ot",
        "source.spm",
        "target.spm",
        "tf_model.h5",
        "tokenizer_config.json",
        "vocab.json",
    ]
    nllb_repository = [
        ".gitattributes",
        "README.md",
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "pytorch_model.bin",
        "sentencepiece.bpe.model",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]

    def asked(repository):
        patterns = [p for _, _, call in downloads for p in call]
        return sorted(name for name in repository if any(fnmatch(name, p) for p in patterns))

    add_to_cache(offline, OPUS, MARIAN, commit_of("opus"))
    snapshot = hub.fetch(f"hf://{OPUS}")
    assert (snapshot.model_type, snapshot.commit) == ("marian", commit_of("opus"))
    assert snapshot.pinned == f"hf://{OPUS}@{commit_of('opus')}"
    assert downloads[0] == (OPUS, None, ["config.json"])
    assert {revision for _, revision, _ in downloads[1:]} == {commit_of("opus")}
    assert asked(opus_repository) == [
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "source.spm",
        "target.spm",
        "tokenizer_config.json",
        "vocab.json",
    ]
    downloads.clear()
    add_to_cache(offline, NLLB_ID, NLLB, commit_of("nllb"))
    assert hub.fetch(f"hf://{NLLB_ID}").model_type == "m2m_100"
    assert asked(nllb_repository) == [
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "sentencepiece.bpe.model",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    # Marian without model.safetensors: then tf_model.h5, in a call of its own.
    h5_only = offline.parent / "h5"
    shutil.copytree(MARIAN, h5_only)
    (h5_only / "model.safetensors").unlink()
    add_to_cache(offline, "me/h5", h5_only, commit_of("h5"))
    downloads.clear()
    hub.fetch("hf://me/h5")
    assert downloads[-1] == ("me/h5", commit_of("h5"), ["tf_model.h5"])
    # A keras-hub preset (config.json names a registered Keras class): config.json alone.
    preset = offline.parent / "preset"
    preset.mkdir()
    (preset / "config.json").write_text(json.dumps({"registered_name": "keras_hub>X"}))
    (preset / "model.weights.h5").write_bytes(b"not read")
    add_to_cache(offline, "me/preset", preset, commit_of("preset"))
    downloads.clear()
    assert hub.fetch("hf://me/preset").model_type is None
    assert downloads == [("me/preset", None, ["config.json"])]


@pytest.mark.slow
def test_from_preset_by_hub_id_is_the_local_checkpoints_task(offline):
    """OPUS-MT and NLLB-200 by id translate as the same fixtures read from their folders; a
    revision (a tag, a commit) picks another snapshot of the repository."""
    from keras_transformer.models import TransformerSeq2SeqLM

    add_to_cache(offline, OPUS, MARIAN, commit_of("shared"), refs=("main",))
    add_to_cache(offline, OPUS, MARIAN_SEPARATE, commit_of("separate"), refs=("v0",))
    task = TransformerSeq2SeqLM.from_preset(f"hf://{OPUS}")
    local = TransformerSeq2SeqLM.from_preset(MARIAN)
    assert task.decoding == local.decoding
    assert task.generate(ENGLISH) == local.generate(ENGLISH)
    separate = TransformerSeq2SeqLM.from_preset(MARIAN_SEPARATE)
    for revision in ("v0", commit_of("separate")):
        tagged = TransformerSeq2SeqLM.from_preset(f"hf://{OPUS}@{revision}")
        assert tagged.backbone.get_config() == separate.backbone.get_config()
        assert tagged.generate(ENGLISH) == separate.generate(ENGLISH)

    add_to_cache(offline, NLLB_ID, NLLB, commit_of("nllb"))
    task = TransformerSeq2SeqLM.from_preset(f"hf://{NLLB_ID}", decoding={"max_extra_length": 10})
    local = TransformerSeq2SeqLM.from_preset(NLLB, decoding={"max_extra_length": 10})
    sentences = [f"eng_Latn {text}" for text in ENGLISH]
    assert task.generate(sentences, target_prefix="spa_Latn") == local.generate(
        sentences, target_prefix="spa_Latn"
    )


@pytest.mark.slow
def test_a_keras_hub_preset_on_the_hub_is_left_to_keras_hubs_loader(offline, tmp_path):
    """A preset `save_to_preset` wrote, on the Hub: keras-hub downloads and loads it as it
    did before (and a revision, which keras-hub's loader does not take, is refused)."""
    from keras_transformer.models import TransformerSeq2SeqLM

    local = TransformerSeq2SeqLM.from_preset(MARIAN_SEPARATE, decoding={"beam_size": 1})
    local.save_to_preset(tmp_path / "preset")
    add_to_cache(offline, "me/tiny", tmp_path / "preset", commit_of("tiny"))
    task = TransformerSeq2SeqLM.from_preset("hf://me/tiny")
    assert task.decoding.beam_size == 1
    assert task.generate(ENGLISH) == local.generate(ENGLISH)
    with pytest.raises(ValueError, match="^hf://me/tiny@main: not a Marian or NLLB-200 .* no rev"):
        TransformerSeq2SeqLM.from_preset("hf://me/tiny@main")
    result = run_main(
        "trainers.import_pretrained", "hf://me/tiny", "--model-dir", tmp_path / "o", check=False
    )
    assert result.returncode == 2 and "hf://me/tiny: " in result.stderr
    assert "is not a Marian or NLLB-200 checkpoint's" in result.stderr


TRANSLATE = """
import json, sys
from keras_transformer.models import TransformerSeq2SeqLM

task = TransformerSeq2SeqLM.from_preset(sys.argv[1])
print(json.dumps(task.generate(json.loads(sys.argv[2]))))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("repo_id", "fixture", "flags", "sentences"),
    [
        (OPUS, MARIAN, [], ENGLISH),
        (NLLB_ID, NLLB, ["--target-language", "spa_Latn"], [f"eng_Latn {t}" for t in ENGLISH]),
    ],
)
def test_the_program_imports_a_hub_id_as_its_local_folder(
    repo_id, fixture, flags, sentences, offline, tmp_path
):
    """`trainers.import_pretrained hf://...` in a new process, offline, on a cache this
    process wrote; the model directory, loaded in another new process, translates as the
    import of the same fixture from its folder, and records the id at its commit."""
    add_to_cache(offline, repo_id, fixture, commit_of(repo_id))
    model_dir = tmp_path / "from-hub"
    result = programs.program(
        "trainers.import_pretrained", f"hf://{repo_id}", "--model-dir", model_dir, *flags
    )
    assert f"imported hf://{repo_id} into {model_dir}" in result.stdout
    record = json.loads((model_dir / "pretrained.json").read_text())
    assert record["source"] == f"hf://{repo_id}@{commit_of(repo_id)}"
    assert record["files"]["config.json"] == sha256(fixture / "config.json")

    local_dir = tmp_path / "from-folder"
    run_main("trainers.import_pretrained", fixture, "--model-dir", local_dir, *flags)
    for name in ("experiment.yaml", "vocab/pieces.json"):
        assert (model_dir / name).read_text() == (local_dir / name).read_text()
    local = json.loads((local_dir / "pretrained.json").read_text())
    assert record["files"] == local["files"] and record["decoding"] == local["decoding"]

    loaded = programs.snippet(TRANSLATE, model_dir, json.dumps(sentences))
    from keras_transformer.models import TransformerSeq2SeqLM

    expected = TransformerSeq2SeqLM.from_preset(local_dir).generate(sentences)
    assert json.loads(loaded.stdout.splitlines()[-1]) == expected
