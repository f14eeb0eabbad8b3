"""Import a pretrained checkpoint: `python -m trainers.import_pretrained PATH --model-dir DIR`.

    huggingface-cli download Helsinki-NLP/opus-mt-en-es --local-dir opus-mt-en-es
    python -m trainers.import_pretrained opus-mt-en-es --model-dir runs/opus-en-es
    python -m trainers.evaluate --model-dir runs/opus-en-es --source new.en --reference new.es
    python -m trainers.train --model-dir runs/opus-en-es --set data.train=mine.tsv \\
        --set data.dev=mine-dev.tsv --set training.steps=2000

    huggingface-cli download facebook/nllb-200-distilled-600M --local-dir nllb-600M
    python -m trainers.import_pretrained nllb-600M --model-dir runs/nllb-en-es \\
        --source-language eng_Latn --target-language spa_Latn

PATH is a checkpoint directory in Hugging Face transformers' format, read without torch, of
either architecture this library reads, chosen by config.json's `model_type`, or its id on
the Hugging Face Hub, `hf://ORG/NAME` or `hf://ORG/NAME@REVISION`
(`python -m trainers.import_pretrained hf://Helsinki-NLP/opus-mt-en-es --model-dir DIR`),
whose files the import reads are downloaded into the Hugging Face cache first (none with
HF_HUB_OFFLINE=1: they must be there), and recorded as pretrained.json's source at their commit:

- `marian`: an OPUS-MT model (config.json, source.spm, target.spm, vocab.json, and
  model.safetensors or tf_model.h5);
- `m2m_100`: an NLLB-200 model (config.json, sentencepiece.bpe.model, tokenizer.json,
  tokenizer_config.json, and model.safetensors or its shards). Its source text starts with
  the source language's code (`eng_Latn Hello`), as transformers' `src_lang` puts it:
  `--source-language` puts it there (the decoding settings' `source_prefix`; a line that
  starts with a code keeps its own), or the text carries it. Its translations start with
  the target language's code, `--target-language` (or generation_config.json's
  `forced_bos_token_id`), stored as the decoding settings' `target_prefix`.
  `trainers.evaluate` and `trainers.export` change either (`--source-prefix`,
  `--target-prefix`), and the SavedModel's `serving_languages` signature takes both per
  request.

`python -m trainers.import_marian` is the same command under its first name.

DIR becomes a model directory like the ones `trainers.train` writes, so every program works
on it: `evaluate`, `export` (SavedModel and CTranslate2), `translate`, `visualize`,
`average_checkpoints`, and `train`, which fine-tunes it:

    DIR/experiment.yaml   the model's TransformerConfig (no preset), no training data
                          yet, a fine-tuning schedule (see below) without XLA
                          (`training.jit_compile: false`), and the decoding defaults of
                          evaluate and export: generation_config.json's beam size, and
                          transformers' length penalty exponent (1.0 unless it sets one)
    DIR/vocab/            the checkpoint's SentencePiece model(s), pieces.json (its
                          vocabularies in this library's ids), and their sha256
    DIR/model.keras       the imported model (this library's ids: the docstrings of
                          keras_transformer.pretrained.marian and .m2m100), which
                          fine-tuning replaces
    DIR/model.pretrained.keras  the same, kept: fine-tuning starts from it, and
                          `trainers.evaluate --model model.pretrained.keras` scores it
    DIR/config.json...    the same model as a keras-hub preset (config.json, task.json,
                          model.weights.h5, preprocessor.json, tokenizer.json, metadata.json,
                          assets/), as trainers.train writes it: TransformerSeq2SeqLM
                          .from_preset(DIR) and keras_hub.models.Seq2SeqLM.from_preset(DIR)
    DIR/pretrained.json   where it came from: the config's name, each file's sha256,
                          what generation_config.json sets (beam size, length penalty,
                          length limit), and the settings it has that this library's
                          decoding does not apply (also printed)

The fine-tuning schedule is the paper's warmup and inverse square root (`WarmupSchedule`),
scaled so that it peaks at `--peak-learning-rate` (5e-5) after `--warmup-steps` (500)
updates: the from-scratch schedule peaks near 7e-4 for d_model 512, enough to undo in a few
hundred updates what the model learned from hundreds of millions of pairs; Adam's moments
start empty, and the short warmup lets them settle before the full rate.

Everything is checked before anything is written (a directory that is not a checkpoint of
either kind, missing files, an unsupported config value, weights whose shapes do not match
the config, a target language the vocabulary lacks), and DIR is written under a temporary
name and renamed: a failed import leaves nothing. Exit status 2 for such errors, with the
reason.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import sys
import time
from pathlib import Path

from trainers import errors, flags, startup_logs
from trainers.errors import ConfigError

PRETRAINED = "pretrained.json"
# keras_transformer._hub.PREFIX, written out: parsing the arguments imports no library.
HUB_PREFIX = "hf://"


def parse_args(argv=None, prog: str | None = None):
    parser = flags.ArgumentParser(
        prog=prog or flags.prog("trainers.import_pretrained"), description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "path",
        type=_path_or_hub_id,
        help="the checkpoint directory, or hf://ORG/NAME[@REVISION] on the Hugging Face Hub",
    )
    parser.add_argument("--model-dir", required=True, type=Path, help="the new model directory")
    parser.add_argument(
        "--target-language",
        help="NLLB-200: the language code every translation starts with, e.g. spa_Latn "
        "(default: generation_config.json's forced_bos_token_id, if set)",
    )
    parser.add_argument(
        "--source-language",
        help="NLLB-200: the language code put at the start of every source sentence that "
        "does not start with one, e.g. eng_Latn (default: none; the text carries it)",
    )
    parser.add_argument(
        "--peak-learning-rate",
        type=float,
        default=5e-5,
        help="the fine-tuning schedule's highest learning rate (default 5e-5)",
    )
    parser.add_argument(
        "--warmup-steps", type=int, default=500, help="updates to reach it (default 500)"
    )
    return parser.parse_args(argv)


def _path_or_hub_id(text: str):
    """A checkpoint directory as a Path; a Hub id as the string it is (a Path would merge the
    `//` of `hf://`)."""
    return text if text.startswith(HUB_PREFIX) else Path(text)


@errors.program
def main(argv=None, prog: str | None = None) -> int:
    args = parse_args(argv, prog)
    # Before TensorFlow starts: a mistyped path costs no start-up. A Hugging Face id
    # (hf://ORG/NAME) is no local path: its reader checks it.
    if not isinstance(args.path, str) and not args.path.exists():
        return errors.fail(f"{args.path}: no such checkpoint directory")
    try:
        written = import_pretrained(
            args.path,
            args.model_dir,
            target_language=args.target_language,
            source_language=args.source_language,
            peak_learning_rate=args.peak_learning_rate,
            warmup_steps=args.warmup_steps,
        )
    except errors.USER_ERRORS as error:
        return errors.fail(error)
    print(f"imported {args.path} into {written}")
    return errors.EXIT_OK


def import_pretrained(
    path,
    model_dir,
    *,
    target_language: str | None = None,
    source_language: str | None = None,
    peak_learning_rate: float = 5e-5,
    warmup_steps: int = 500,
) -> Path:
    """Writes the model directory `model_dir` from the checkpoint at `path` (Marian or
    M2M100, by config.json's `model_type`), a directory or a Hub id (`hf://ORG/NAME`)."""
    from keras_transformer import pretrained
    from keras_transformer._files import sha256

    model_dir = Path(model_dir)
    _check_arguments(model_dir, peak_learning_rate, warmup_steps)
    if str(path).startswith(HUB_PREFIX):
        path, source = _from_hub(str(path))  # downloaded first: the checks below read it
    else:
        source = str(Path(path).resolve())
    try:
        with startup_logs.native_logs():
            imported = pretrained.import_checkpoint(
                Path(path), source_language=source_language, target_language=target_language
            )
    except pretrained.CheckpointError as error:
        raise ConfigError(str(error)) from None
    if imported.ignored:
        print(
            "note: generation_config.json sets what this library's decoding does not apply: "
            f"{', '.join(imported.ignored)}",
            file=sys.stderr,
        )
    for note in imported.notes:
        print(f"note: {note}", file=sys.stderr)
    config = imported.model.config
    experiment = _experiment(
        Path(path), config, imported.decoding, peak_learning_rate, warmup_steps
    )
    record = {
        **imported.record,
        "source": source,
        "files": {p.name: sha256(p) for p in imported.files},
        "notes": imported.notes,
        "imported": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    _write(model_dir, imported, experiment, record)
    return model_dir


def _check_arguments(model_dir: Path, peak_learning_rate: float, warmup_steps: int) -> None:
    """A new or empty directory that can be created, and a schedule that can work: refused
    before anything is read."""
    if model_dir.exists() and not model_dir.is_dir():
        raise ConfigError(f"--model-dir {model_dir} is a file; choose a new directory")
    if model_dir.exists() and any(model_dir.iterdir()):
        raise ConfigError(f"--model-dir {model_dir} exists and is not empty; choose a new one")
    if problem := flags.creatable(model_dir):
        raise ConfigError(f"--model-dir {model_dir}: {problem}")
    if not peak_learning_rate > 0:
        raise ConfigError(f"--peak-learning-rate={peak_learning_rate} must be > 0")
    if warmup_steps < 1:
        raise ConfigError(f"--warmup-steps={warmup_steps} must be >= 1")


def _write(model_dir: Path, imported, experiment, record: dict) -> None:
    """The model directory, written whole (in a temporary directory, then renamed): the
    vocabulary, experiment.yaml, the model and its preset, a copy kept for fine-tuning, and
    the import's record."""
    from keras_transformer._files import atomic_directory
    from trainers.run_dir import PRETRAINED_MODEL, RunDirectory, write_json

    try:
        if model_dir.exists():
            model_dir.rmdir()  # empty: replaced by the complete directory
        model_dir.parent.mkdir(parents=True, exist_ok=True)
        with atomic_directory(model_dir) as temporary:
            run = RunDirectory(temporary)
            imported.vocabularies.save(run.vocab)
            run.save_experiment(experiment)
            run.save_trained(imported.model, imported.vocabularies)  # model.keras, the preset
            shutil.copyfile(run.model(), run.model(PRETRAINED_MODEL))  # kept when fine-tuned
            write_json(temporary / PRETRAINED, record)
    except OSError as error:  # a full disk, a folder made read-only meanwhile...
        raise ConfigError(f"--model-dir {model_dir}: cannot write there ({error})") from None


def _from_hub(uri: str) -> tuple[Path, str]:
    """The downloaded snapshot of a Hub checkpoint, and its id at that commit (the record's
    source)."""
    from keras_transformer import _hub as hub

    try:
        snapshot = hub.fetch(uri)
    except hub.HubError as error:
        raise ConfigError(str(error)) from None
    if snapshot.model_type is None:
        raise ConfigError(
            f"{uri}: {snapshot.path / hub.CONFIG} is not a Marian or NLLB-200 checkpoint's "
            f"(model_type 'marian' or 'm2m_100'); keras-hub's own presets load with "
            "keras_hub.models.Task.from_preset"
        )
    return snapshot.path, snapshot.pinned


def import_marian(path, model_dir, **kwargs) -> Path:
    """`import_pretrained`, under the name it had when it imported Marian models only."""
    return import_pretrained(path, model_dir, **kwargs)


def _experiment(
    path: Path,
    config,
    decoding,
    peak_learning_rate: float,
    warmup_steps: int,
):
    """The experiment of an imported model: its config, no training data yet (fine-tuning
    sets data.train), its languages (the decoding settings' codes, or tokenizer_config.json's:
    Marian's source_lang and target_lang, NLLB's src_lang and tgt_lang), the fine-tuning
    schedule and the decoding settings `decoding`."""
    from trainers.experiment import DataConfig, Experiment, TrainingConfig

    languages = _read_optional_json(path / "tokenizer_config.json")
    source = (
        decoding.source_prefix or languages.get("source_lang") or languages.get("src_lang") or "src"
    )
    target = decoding.target_prefix or languages.get("target_lang") or languages.get("tgt_lang")
    data = DataConfig(
        train="",
        source_language=str(source),
        target_language=str(target or "tgt"),
        shared_vocab=config.share_embeddings,
        vocab_size=config.target_vocab,
    )
    # WarmupSchedule peaks at scale * d_model^-0.5 * warmup^-0.5 (update = warmup).
    scale = peak_learning_rate * math.sqrt(config.d_model) * math.sqrt(warmup_steps)
    # Without XLA: it compiles one program a length bucket (and a dev batch shape), which a
    # fine-tuning of a few hundred updates on a CPU never earns back (BENCHMARKS.md,
    # "Fine-tuning an imported model").
    training = dataclasses.replace(
        TrainingConfig(),
        steps=1000,
        steps_per_epoch=100,
        warmup_steps=warmup_steps,
        learning_rate_scale=scale,
        jit_compile=False,
        bleu_max_sentences=200,
    )
    return Experiment(None, config, data, training, decoding)  # no preset: the sizes above


def _read_optional_json(path: Path) -> dict:
    import json

    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


if __name__ == "__main__":
    sys.exit(main())
