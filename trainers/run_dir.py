"""The run directory (`--model-dir`): every path in it, the checks made before a run starts,
and how the programs read and write it.

    DIR/experiment.yaml        the resolved configuration (owns the directory)
    DIR/vocab/                 SentencePiece model(s): shared.model or source/target.model,
                               and manifest.json (their sha256: replaced files are refused)
    DIR/checkpoints/           ckpt-NNNNNNNN.weights.h5, one every training.steps_per_epoch
                               updates
    DIR/backup/                state-NNNNNNNN.npz, the training state a restarted run resumes
                               from, and latest.json, the record that commits one (see
                               trainers/checkpointing.py); a finished run keeps its last one
    DIR/logs/                  TensorBoard (dev BLEU and chrF under logs/bleu/)
    DIR/model.keras            the trained model (fine-tune it with model.fit)
    DIR/config.json, task.json, model.weights.h5, preprocessor.json, tokenizer.json,
    DIR/metadata.json, assets/ the same model as a keras-hub preset, with the vocabulary and
                               experiment.yaml's decoding settings:
                               `kt.models.TransformerSeq2SeqLM.from_preset(DIR)` and
                               `keras_hub.models.Seq2SeqLM.from_preset(DIR)` load it
    DIR/pretrained.json        an imported model's origin (trainers.import_marian)
    DIR/model.pretrained.keras the imported model, kept when fine-tuning replaces model.keras:
                               fine-tuning starts from it while backup/ holds no state (a
                               new fine-tuning, or one started over: `untrained_import`)
    DIR/model.averaged.keras   written by trainers.average_checkpoints (never replaced
                               without its --overwrite)
    DIR/train_summary.json     strategy, replicas, steps, losses, tokens/s, dev BLEU
    DIR/eval/MODEL/            hypotheses (SPLIT.hyp) and scores (SPLIT.json) from
                               trainers.evaluate, a folder for each model file it scored
                               (MODEL: its name without .keras, eval/model/ for model.keras,
                               eval/model.averaged/ for model.averaged.keras); directories
                               written before hold one model's in eval/ itself

NNNNNNNN counts the optimizer updates done (not epochs, whose size a resumed run may
change). Every file is written with `keras_transformer._files`'s
`atomic_write` (a temporary name, then a rename), so a crash never leaves a half-written file
under a real name. The preset's config.json is what makes DIR a preset: it is removed before
model.keras and the preset are replaced and written back last (`save_trained`), so a crash
between them leaves a directory that loads from model.keras, never a preset whose weights
are not model.keras's. The programs load a model through one call, `load_task`
(`TransformerSeq2SeqLM.from_preset`), which also reads a directory written before the
preset existed (model.keras, vocab/ and experiment.yaml).

The module is plain Python until a method reads or writes a model, a vocabulary or the
experiment: the programs name the directory's missing files (`check_trained`) before they
import TensorFlow.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import yaml

from trainers import startup_logs
from trainers.errors import ConfigError

if TYPE_CHECKING:
    import keras

    from keras_transformer.text import Vocabularies
    from trainers.experiment import Experiment

MODEL = "model.keras"
AVERAGED = "model.averaged.keras"
PRETRAINED_MODEL = "model.pretrained.keras"  # an imported model's weights, never replaced
PRESET_CONFIG = "config.json"  # keras-hub's root file of a preset: written last, removed first


def write_json(path, value) -> None:
    """`value` as indented JSON, written atomically."""
    from keras_transformer._files import atomic_write

    atomic_write(path, json.dumps(value, indent=2, sort_keys=True) + "\n")


def save_model(model: keras.Model, path, *, replace: bool = True) -> None:
    """`model.save`, written atomically, with no second copy of the weights in memory;
    `replace=False`: FileExistsError rather than replace an existing file."""
    from keras_transformer._files import atomic_write, save_keras_file

    atomic_write(path, lambda temporary: save_keras_file(model, temporary), replace=replace)


def _numbered(folder: Path, prefix: str, suffix: str) -> list[Path]:
    """The files `prefix` + number + `suffix` in `folder`, by increasing number."""
    found = []
    for path in folder.glob(f"{prefix}*{suffix}"):
        number = path.name[len(prefix) : -len(suffix)]
        if number.isdigit():
            found.append((int(number), path))
    return [path for _, path in sorted(found)]


@dataclasses.dataclass(frozen=True)
class CheckpointFolder:
    """DIR/checkpoints/: Keras weight files, `ckpt-NNNNNNNN.weights.h5` after update
    NNNNNNNN."""

    path: Path

    def file(self, updates: int) -> Path:
        return self.path / f"ckpt-{updates:08d}.weights.h5"

    def files(self) -> list[Path]:
        """The checkpoints there, oldest first."""
        return _numbered(self.path, "ckpt-", ".weights.h5")


@dataclasses.dataclass(frozen=True)
class BackupFolder:
    """DIR/backup/: `state-NNNNNNNN.npz` (every variable after update NNNNNNNN) and
    `latest.json` (the committed state's name and sha256)."""

    path: Path

    @property
    def latest(self) -> Path:
        return self.path / "latest.json"

    def state(self, updates: int) -> Path:
        return self.path / f"state-{updates:08d}.npz"

    def states(self) -> list[Path]:
        """The state files there, oldest first."""
        return _numbered(self.path, "state-", ".npz")

    @staticmethod
    def updates(state: Path) -> int:
        """The updates done, from a state file's name."""
        return int(Path(state).name[len("state-") : -len(".npz")])


class RunDirectory:
    """The model directory of one run (see the module docstring for its layout).

    Args:
        root: str or path. The directory (`--model-dir`); nothing is created until a check or
            a write needs it.
    """

    def __init__(self, root):
        self.root = Path(root)
        self.experiment_file = self.root / "experiment.yaml"
        self.vocab = self.root / "vocab"
        self.checkpoints = CheckpointFolder(self.root / "checkpoints")
        self.backup = BackupFolder(self.root / "backup")
        self.logs = self.root / "logs"
        self.bleu_logs = self.logs / "bleu"
        self.summary = self.root / "train_summary.json"
        self.eval = self.root / "eval"
        self.pretrained = self.root / "pretrained.json"

    def __repr__(self) -> str:
        return f"RunDirectory({str(self.root)!r})"

    def model(self, name: str = MODEL) -> Path:
        """A model file in the directory: `model.keras`, `model.averaged.keras`..."""
        return self.root / name

    def evaluations(self, model: str = MODEL) -> Path:
        """DIR/eval/MODEL/, where trainers.evaluate writes the results of the model file
        `model` (MODEL: its name without .keras): each model file keeps its own."""
        return self.eval / PurePosixPath(model).with_suffix("")

    def hypotheses(self, name: str, model: str = MODEL) -> Path:
        """Where trainers.evaluate writes the translations of `name` (a split, or a source
        file's name) by the model file `model`; the scores go beside them (.json)."""
        return self.evaluations(model) / f"{name}.hyp"

    def metrics(self, model: str | None = None) -> dict[str, dict]:
        """The scores written so far (test and dev evaluations, the training summary), keyed
        by their path in the directory; with `model` (a model file's name, "model.keras"),
        the evaluations of another model file left out (an export's manifest then holds
        only its own model's scores). A split's scores written in eval/ itself, before each
        model file had its folder, count for the model they record, unless that model's
        folder holds newer ones."""
        found = {}
        for split in ("test", "dev"):
            own = sorted(self.eval.glob(f"*/**/{split}.json"))  # in a model file's folder
            scored = set()  # the model files whose folder holds scores of this split
            for path in [*own, self.eval / f"{split}.json"]:
                if not path.exists():
                    continue
                record = json.loads(path.read_text())
                recorded = record.get("model", model)
                if model is not None and recorded != model:
                    continue
                if path.parent != self.eval:
                    scored.add(recorded)
                elif recorded in scored:
                    continue  # superseded by the model's own folder
                found[path.relative_to(self.root).as_posix()] = record
        if self.summary.exists():
            found[self.summary.name] = json.loads(self.summary.read_text())
        return found

    # Checks made before a run starts --------------------------------------------------------

    def check_owner(self, experiment: Experiment) -> bool:
        """True if the directory already holds a run of this experiment, False if it is new.

        Raises ConfigError when it holds a run of another experiment (model or data differ);
        training settings may change between runs (more steps, another BLEU interval).
        """
        if not self.experiment_file.exists():
            return False
        saved = yaml.safe_load(self.experiment_file.read_text(encoding="utf-8"))
        ours = experiment.to_dict()
        if not saved["data"].get("train") or self.untrained_import():
            saved = {**saved, "data": ours["data"]}  # an imported model: any data fine-tunes it
        if _comparable(saved) != _comparable(ours):
            differences = [
                f"{section}.{key}: {saved[section].get(key)!r} there, {value!r} here"
                for section in ("model", "data")
                for key, value in _comparable(ours)[section].items()
                if saved[section].get(key) != value
            ]
            raise ConfigError(
                f"--model-dir {self.root} belongs to another experiment "
                f"({'; '.join(differences)}); use a new --model-dir, or the configuration it "
                "was trained with"
            )
        return True

    def untrained_import(self) -> bool:
        """Whether the directory holds an imported model (pretrained.json) that no
        fine-tuning has committed a backup to: a new import, or one whose fine-tuning was
        removed to start over. Fine-tuning it starts from model.pretrained.keras, on any
        data."""
        return self.pretrained.exists() and not self.backup.latest.exists()

    def pretrained_weights(self) -> Path:
        """The imported weights fine-tuning starts from: model.pretrained.keras, or
        model.keras in a directory imported before the import kept them apart."""
        kept = self.model(PRETRAINED_MODEL)
        return kept if kept.exists() else self.model()

    def check_disk_space(self, experiment: Experiment) -> None:
        """Refuses a run whose files cannot fit on the disk: the kept checkpoints, two backups
        (weights and Adam's two moments each), and four saved models (model.keras and the
        preset's weights, and their new copies while they are replaced), in float32."""
        config = experiment.model
        if config.share_embeddings:
            config = config.replace(vocab_size=experiment.data.vocab_size)
        else:
            size = experiment.data.vocab_size
            config = config.replace(source_vocab_size=size, target_vocab_size=size)
        weights = 4 * config.parameter_count()
        copies = experiment.training.keep_checkpoints + 2 * 3 + 4
        needed = weights * copies + (64 << 20)  # plus logs, vocabularies and summaries
        existing = self.root.absolute()
        while not existing.exists():
            existing = existing.parent
        free = shutil.disk_usage(existing).free
        if free < needed:
            raise ConfigError(
                f"--model-dir {self.root}: the run needs about {needed >> 20} MiB "
                f"({copies} copies of {weights >> 20} MiB of weights and optimizer state) but "
                f"only {free >> 20} MiB are free there"
            )

    def check_writable(self) -> None:
        """Creates the directory if needed and proves it can be written."""
        from keras_transformer._files import temporary_path

        try:
            self.root.mkdir(parents=True, exist_ok=True)
            probe = temporary_path(self.root / "write-test")
            probe.write_bytes(b"ok")
            probe.unlink()
        except OSError as error:
            raise ConfigError(f"--model-dir {self.root}: cannot write there ({error})") from None

    def check_vocabulary(self, config, vocabularies: Vocabularies) -> None:
        """The model's embedding sizes (`config`, a TransformerConfig) must be the
        vocabulary's."""
        sizes = (vocabularies.source.vocabulary_size(), vocabularies.target.vocabulary_size())
        if sizes != (config.source_vocab, config.target_vocab):
            raise ConfigError(
                f"{self.root}: the vocabulary has {sizes[0]}/{sizes[1]} source/target pieces "
                f"but the model expects {config.source_vocab}/{config.target_vocab}"
            )

    # Reading and writing --------------------------------------------------------------------

    def save_experiment(self, experiment: Experiment) -> None:
        from keras_transformer._files import atomic_write

        text = yaml.safe_dump(experiment.to_dict(), sort_keys=False)
        atomic_write(self.experiment_file, text)

    def existing_experiment(self, overrides: list[str] = ()) -> Experiment:
        """The directory's experiment.yaml with `section.key=value` overrides: what
        `trainers.train` runs when it is given no --config."""
        from trainers.experiment import load_experiment

        self.check_experiment()

        return load_experiment(self.experiment_file, overrides, resolved=True)

    def check_experiment(self) -> None:
        """ConfigError when the directory has no experiment.yaml for `trainers.train` to run
        without --config. Plain Python, as `check_trained`."""
        if not self.experiment_file.exists():
            raise ConfigError(
                f"--model-dir {self.root} has no experiment.yaml; give --config for a new run"
            )

    def load_experiment(self) -> Experiment:
        """The experiment the directory was trained with (vocabulary sizes included)."""
        from trainers.experiment import load_experiment

        self._require(self.experiment_file.name)
        return load_experiment(self.experiment_file, resolved=True)

    def wait_for_experiment(self, timeout: float = 600.0) -> None:
        """Waits for another worker (the chief) to write experiment.yaml, which it does once
        the vocabulary is saved."""
        deadline = time.monotonic() + timeout
        while not self.experiment_file.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self.experiment_file} did not appear within {timeout:.0f} s (chief failed?)"
                )
            time.sleep(0.5)

    def save_vocabularies(self, vocabularies: Vocabularies) -> None:
        vocabularies.save(self.vocab)

    def load_vocabularies(self) -> Vocabularies:
        """The vocabularies in vocab/; ConfigError if missing or not the original files."""
        from keras_transformer.text import Vocabularies

        try:
            with startup_logs.native_logs():
                return Vocabularies.load(self.vocab)
        except (OSError, ValueError) as error:
            raise ConfigError(f"--model-dir {self.root}: {error}") from None

    def finished_run(self, steps: int) -> dict | None:
        """The summary of a run that already trained for `steps` steps, or None."""
        if not self.summary.exists():
            return None
        summary = json.loads(self.summary.read_text())
        finished = summary.get("steps") == steps and not summary.get("stopped_early")
        return summary if finished else None

    def write_summary(self, summary: dict) -> None:
        write_json(self.summary, summary)

    def save_model(self, model: keras.Model, name: str = MODEL, *, replace: bool = True) -> Path:
        save_model(model, self.model(name), replace=replace)
        return self.model(name)

    def save_trained(self, model: keras.Model, vocabularies: Vocabularies) -> None:
        """Writes the trained `model` as model.keras and as a keras-hub preset (its
        `TransformerSeq2SeqLM` with `vocabularies` and experiment.yaml's decoding settings)
        into the directory root; experiment.yaml must be there.

        The preset is made complete in a temporary folder first. Then its config.json, the
        file that makes the directory a preset, is removed from the root; model.keras is
        replaced; the preset's other files are moved in, and its config.json last. A crash
        at any point leaves either the old model.keras and preset, or a directory without
        config.json that loads from model.keras alone (as one written before presets), or
        the new ones: never a preset whose weights are not model.keras's. The same
        command run again writes both (the run's summary, written after, is missing).
        """
        from keras_transformer._files import TEMPORARY_PREFIX, temporary_path
        from keras_transformer.models import TransformerSeq2SeqLM

        decoding = self.load_experiment().decoding
        task = TransformerSeq2SeqLM.from_transformer(
            model, vocabularies, decoding=decoding, share_weights=True
        )
        staging = temporary_path(self.root / "preset")
        for stale in self.root.glob(f"{TEMPORARY_PREFIX}*-preset"):  # left by a killed run
            shutil.rmtree(stale)
        try:
            task.save_to_preset(staging)
            for path in staging.rglob("*"):
                if path.is_file():
                    _fsync(path)
            (self.root / PRESET_CONFIG).unlink(missing_ok=True)
            self.save_model(model)
            for path in sorted(staging.iterdir(), key=lambda p: p.name == PRESET_CONFIG):
                target = self.root / path.name
                if path.is_dir():
                    shutil.rmtree(target, ignore_errors=True)
                    os.rename(path, target)
                else:
                    os.replace(path, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def load_task(self, model_file: str = MODEL, **decoding):
        """`(experiment, task)` of a trained directory: the `TransformerSeq2SeqLM` that
        `TransformerSeq2SeqLM.from_preset` loads from it (the preset `save_trained` wrote,
        or `model_file` and vocab/ for another model file or a directory written before
        presets), decoding with experiment.yaml's settings, each of `decoding` (the
        programs' flags) that is not None over them. ConfigError when a file is missing,
        cannot be read, or the vocabulary is not the model's."""
        from keras_transformer.decoding.settings import check_source_prefix, check_target_prefix
        from keras_transformer.models import TransformerSeq2SeqLM

        self.check_trained(model_file)
        experiment = self.load_experiment()
        try:
            settings = experiment.decoding.replace(**decoding)
            with startup_logs.native_logs():
                task = TransformerSeq2SeqLM.from_preset(
                    self.root,
                    model_file=None if model_file == MODEL else model_file,
                    decoding=settings,
                )
        except (OSError, ValueError) as error:
            raise ConfigError(f"--model-dir {self.root}: {error}") from None
        self.check_vocabulary(task.config, task.preprocessor.tokenizer.vocabularies)
        tokenizer = task.preprocessor.tokenizer
        for side, check in (("target", check_target_prefix), ("source", check_source_prefix)):
            try:  # a flag's language code against the vocabulary's, before any work
                check(getattr(settings, f"{side}_prefix"), getattr(tokenizer, side))
            except ValueError as error:
                given = decoding.get(f"{side}_prefix")
                flag = f"--{side}-prefix" if given else "experiment.yaml"
                raise ConfigError(f"{flag}: {error}") from None
        return experiment, task

    def load_trained(self, model_file: str = MODEL):
        """(experiment, vocabularies, model) of a trained directory, the model as the
        `kt.Transformer` of its .keras file (the benchmarks'; the programs use `load_task`);
        ConfigError when a file is missing or the vocabulary is not the model's."""
        import keras

        import keras_transformer  # noqa: F401  (registers the classes that load_model needs)

        self._require(self.experiment_file.name)
        self._require(model_file)
        experiment = self.load_experiment()
        vocabularies = self.load_vocabularies()
        model = keras.saving.load_model(self.model(model_file))
        self.check_vocabulary(model.config, vocabularies)
        return experiment, vocabularies, model

    def check_trained(self, model_file: str | None = MODEL) -> None:
        """ConfigError naming what a trained directory lacks: the directory itself, its
        experiment.yaml or the model file `model_file` (None: none needed). Plain Python:
        the programs that read a trained directory call it before they import TensorFlow."""
        self._require(self.experiment_file.name)
        if model_file is not None:
            self._require(model_file)

    def _require(self, name: str) -> None:
        if not self.root.is_dir():
            problem = "is a file, not a folder" if self.root.exists() else "no such folder"
            raise ConfigError(f"--model-dir {self.root}: {problem}")
        if (self.root / name).exists():
            return
        if name == self.experiment_file.name and (self.root / "task.json").exists():
            raise ConfigError(
                f"--model-dir {self.root}: a keras-hub preset (task.json), not a model "
                "directory of trainers.train (no experiment.yaml): load it with "
                "TransformerSeq2SeqLM.from_preset and export it with kt.export"
            )
        if name == self.experiment_file.name:
            raise ConfigError(f"--model-dir {self.root}: no {name}; train it first")
        raise ConfigError(f"--model-dir {self.root}: no {name} (--model names a file in it)")


def _fsync(path: Path) -> None:
    with open(path, "rb") as file:
        os.fsync(file.fileno())


def _comparable(experiment: dict) -> dict:
    """The parts of an experiment that must not change within one model directory."""
    model = {k: v for k, v in experiment["model"].items() if not k.endswith("vocab_size")}
    return {"model": model, "data": experiment["data"]}
