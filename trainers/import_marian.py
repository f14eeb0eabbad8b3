"""Import an OPUS-MT (Marian) checkpoint: `python -m trainers.import_marian PATH --model-dir DIR`.

    huggingface-cli download Helsinki-NLP/opus-mt-en-es --local-dir opus-mt-en-es
    python -m trainers.import_marian opus-mt-en-es --model-dir runs/opus-en-es
    python -m trainers.evaluate --model-dir runs/opus-en-es --source new.en --reference new.es
    python -m trainers.train --model-dir runs/opus-en-es --set data.train=mine.tsv \\
        --set data.dev=mine-dev.tsv --set training.steps=2000

PATH is a checkpoint directory in Hugging Face transformers' format (config.json,
source.spm, target.spm, vocab.json, and model.safetensors or tf_model.h5; read without
torch). DIR becomes a model directory like the ones `trainers.train` writes, so every program
works on it: `evaluate`, `export` (SavedModel and CTranslate2), `translate`, `visualize`,
`average_checkpoints`, and `train`, which fine-tunes it:

    DIR/experiment.yaml   the model's TransformerConfig (no preset), no training data
                          yet, a fine-tuning schedule (see below) without XLA
                          (`training.jit_compile: false`), and the decoding defaults of
                          evaluate and export: generation_config.json's beam size, and
                          transformers' length penalty exponent (1.0 unless it sets one)
    DIR/vocab/            the checkpoint's source.spm and target.spm, pieces.json (its
                          vocabularies in this library's ids), and their sha256
    DIR/model.keras       the imported model (this library's ids: keras_transformer.pretrained
                          .marian's docstring), which fine-tuning replaces
    DIR/model.pretrained.keras  the same, kept: fine-tuning starts from it, and
                          `trainers.evaluate --model model.pretrained.keras` scores it
    DIR/config.json...    the same model as a keras-hub preset (config.json, task.json,
                          model.weights.h5, preprocessor.json, tokenizer.json, metadata.json,
                          assets/), as trainers.train writes it: TransformerSeq2SeqLM
                          .from_preset(DIR) and keras_hub.models.Seq2SeqLM.from_preset(DIR)
    DIR/pretrained.json   where it came from: the config's name, each file's sha256,
                          what generation_config.json sets (beam size, length penalty,
                          length limit: 511 tokens for OPUS-MT, never binding, since the
                          512 positions already cap an output), and the settings it has
                          that this library's decoding does not apply (also printed)

The fine-tuning schedule is the paper's warmup and inverse square root (`WarmupSchedule`),
scaled so that it peaks at `--peak-learning-rate` (5e-5) after `--warmup-steps` (500)
updates: the from-scratch schedule peaks near 7e-4 for d_model 512, enough to undo in a few
hundred updates what the model learned from hundreds of millions of pairs; Adam's moments
start empty, and the short warmup lets them settle before the full rate.

Everything is checked before anything is written (a directory that is not a Marian
checkpoint, missing files, an unsupported config value, weights whose shapes do not match
the config), and DIR is written under a temporary name and renamed: a failed import leaves
nothing. Exit status 2 for such errors, with the reason.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import shutil
import sys
import time
from pathlib import Path

from trainers import errors, flags, startup_logs
from trainers.errors import ConfigError

PRETRAINED = "pretrained.json"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m trainers.import_marian", description=__doc__.split("\n")[0]
    )
    parser.add_argument("path", type=Path, help="the checkpoint directory")
    parser.add_argument("--model-dir", required=True, type=Path, help="the new model directory")
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


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        written = import_marian(
            args.path,
            args.model_dir,
            peak_learning_rate=args.peak_learning_rate,
            warmup_steps=args.warmup_steps,
        )
    except errors.USER_ERRORS as error:
        return errors.fail(error)
    print(f"imported {args.path} into {written}")
    return errors.EXIT_OK


def import_marian(
    path, model_dir, *, peak_learning_rate: float = 5e-5, warmup_steps: int = 500
) -> Path:
    """Writes the model directory `model_dir` from the Marian checkpoint at `path`."""
    from keras_transformer.files import atomic_directory, sha256
    from keras_transformer.pretrained import marian
    from trainers.run_dir import PRETRAINED_MODEL, RunDirectory, write_json

    model_dir = Path(model_dir)
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
    try:
        checkpoint = marian.read_checkpoint(path)
        decoding = marian.decoding_defaults(checkpoint.generation, checkpoint.generation_source)
        with startup_logs.native_logs():
            model, vocabularies = marian.load_marian(checkpoint)
    except marian.MarianError as error:
        raise ConfigError(str(error)) from None
    ignored = marian.ignored_generation_settings(
        checkpoint.generation, checkpoint.config.get("pad_token_id")
    )
    if ignored:
        print(
            "note: generation_config.json sets what this library's decoding does not apply: "
            f"{', '.join(ignored)}",
            file=sys.stderr,
        )
    notes = marian.import_notes(checkpoint)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    experiment = _experiment(checkpoint, model.config, decoding, peak_learning_rate, warmup_steps)
    record = {
        "format": "marian (Hugging Face transformers)",
        "source": str(Path(path).resolve()),
        "name_or_path": checkpoint.config.get("_name_or_path"),
        "transformers_version": checkpoint.config.get("transformers_version"),
        "files": {p.name: sha256(p) for p in checkpoint.files},
        "decoding": decoding,
        "ignored_generation_settings": ignored,
        "notes": notes,
        "imported": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    try:
        if model_dir.exists():
            model_dir.rmdir()  # empty: replaced by the complete directory
        model_dir.parent.mkdir(parents=True, exist_ok=True)
        with atomic_directory(model_dir) as temporary:
            run = RunDirectory(temporary)
            vocabularies.save(run.vocab)
            run.save_experiment(experiment)
            run.save_trained(model, vocabularies)  # model.keras and the preset
            shutil.copyfile(run.model(), run.model(PRETRAINED_MODEL))  # kept when fine-tuned
            write_json(temporary / PRETRAINED, record)
    except OSError as error:  # a full disk, a folder made read-only meanwhile...
        raise ConfigError(f"--model-dir {model_dir}: cannot write there ({error})") from None
    return model_dir


def _experiment(checkpoint, config, decoding: dict, peak_learning_rate: float, warmup_steps: int):
    """The experiment of an imported model: its config, no training data yet (fine-tuning
    sets data.train), the languages of tokenizer_config.json, the fine-tuning schedule and
    the decoding defaults of generation_config.json (`decoding`, as
    `marian.decoding_defaults` reads them)."""
    from keras_transformer.decoding import DecodingSettings
    from trainers.experiment import DataConfig, Experiment, TrainingConfig

    languages = _read_optional_json(checkpoint.path / "tokenizer_config.json")
    data = DataConfig(
        train="",
        source_language=str(languages.get("source_lang") or "src"),
        target_language=str(languages.get("target_lang") or "tgt"),
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
    # generation_config.json's beam, and transformers' length penalty exponent (1.0 unless it
    # sets one; transformers divides by |Y| ** alpha, we by ((5 + |Y|) / 6) ** alpha).
    defaults = DecodingSettings(
        beam_size=decoding.get("beam_size", 4),
        length_penalty=decoding.get("length_penalty", 1.0),
    )
    return Experiment(None, config, data, training, defaults)  # no preset: the sizes above


def _read_optional_json(path: Path) -> dict:
    import json

    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


if __name__ == "__main__":
    sys.exit(main())
