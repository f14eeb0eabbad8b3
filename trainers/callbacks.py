"""Training callbacks beyond Keras's own: dev-set BLEU and throughput."""

from __future__ import annotations

import time

import keras
import tensorflow as tf

from keras_transformer import evaluation


class BleuCallback(keras.callbacks.Callback):
    """Decodes the dev set every `every_steps` optimizer updates (and at the end of training)
    and logs sacrebleu's BLEU and chrF to TensorBoard under "dev/bleu" and "dev/chrf".

    Args:
        vocabularies: the model's `Vocabularies`.
        sources, references: dev sentences (str), untouched.
        every_steps: int. 0 = only at the end of training. Counted in updates: with gradient
            accumulation over N batches, the optimizer's `iterations` holds one value for N
            batches, and the dev set is decoded once, at the batch that made the update.
        beam_size: int. 1 = greedy.
        log_dir: str or None. TensorBoard directory for the scalars.
        decoding: `kt.decoding.DecodingSettings` or None. The other settings (the languages:
            `target_prefix`, `source_prefix`; the length penalty), the best translation
            scored; None takes the defaults.
    """

    def __init__(
        self,
        vocabularies,
        sources,
        references,
        *,
        every_steps=0,
        beam_size=1,
        log_dir=None,
        decoding=None,
    ):
        super().__init__()
        self.decoding = decoding
        self.vocabularies = vocabularies
        self.sources, self.references = list(sources), list(references)
        self.every_steps = every_steps
        self.beam_size = beam_size
        self.writer = tf.summary.create_file_writer(str(log_dir)) if log_dir else None
        self.last: dict | None = None
        self._translator = None

    def _step(self) -> int:
        return int(self.model.optimizer.iterations.numpy())

    def evaluate(self) -> dict:
        if self._translator is None:
            self._translator = evaluation.Translator(
                self.model,
                self.vocabularies,
                decoding=self.decoding,
                beam_size=self.beam_size,
                n_best=1,
            )
        started = time.perf_counter()
        hypotheses = self._translator.translate(self.sources)
        self.last = {
            "step": self._step(),
            **evaluation.score(hypotheses, self.references),
            "seconds": round(time.perf_counter() - started, 1),
        }
        print(
            f"\nstep {self.last['step']}: dev BLEU {self.last['bleu']:.2f}, "
            f"chrF {self.last['chrf']:.2f} ({len(self.sources)} sentences, "
            f"{self.last['seconds']} s)",
            flush=True,
        )
        if self.writer is not None:
            with self.writer.as_default(step=self.last["step"]):
                tf.summary.scalar("dev/bleu", self.last["bleu"])
                tf.summary.scalar("dev/chrf", self.last["chrf"])
            self.writer.flush()
        return self.last

    def on_train_batch_end(self, batch, logs=None):
        if not self.every_steps:
            return
        step = self._step()
        if step > 0 and step % self.every_steps == 0 and step != self._last_step():
            self.evaluate()

    def _last_step(self) -> int | None:
        return self.last["step"] if self.last else None

    def on_train_end(self, logs=None):
        if self._last_step() != self._step():
            self.evaluate()


class Throughput(keras.callbacks.Callback):
    """Target tokens per second of each epoch, from the `tokens` metric (a global count).

    Records the first batch's loss, and the tokens and seconds of every epoch, so the run's
    steady throughput excludes the first epoch (graph tracing and XLA compilation)."""

    def __init__(self):
        super().__init__()
        self.initial_loss = None
        self.epochs: list[dict] = []

    def on_epoch_begin(self, epoch, logs=None):
        self._started = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        if self.initial_loss is None and logs and "loss" in logs:
            self.initial_loss = float(logs["loss"])

    def on_epoch_end(self, epoch, logs=None):
        seconds = time.perf_counter() - self._started
        tokens = float((logs or {}).get("tokens", 0.0))
        self.epochs.append(
            {
                "epoch": epoch + 1,
                "tokens": tokens,
                "seconds": seconds,
                "loss": float((logs or {}).get("loss", float("nan"))),
            }
        )
        if logs is not None:
            logs["tokens_per_second"] = tokens / seconds

    def tokens_per_second(self) -> float | None:
        """Throughput over the epochs after the first (over all if there is only one)."""
        epochs = self.epochs[1:] or self.epochs
        seconds = sum(e["seconds"] for e in epochs)
        return sum(e["tokens"] for e in epochs) / seconds if seconds else None
