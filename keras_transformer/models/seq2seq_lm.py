"""`TransformerSeq2SeqLM`: the translation model as a keras-hub `Seq2SeqLM` task."""

from __future__ import annotations

from pathlib import Path

import keras
import keras_hub
import numpy as np
import tensorflow as tf

from keras_transformer import _backends as backends
from keras_transformer import _workarounds as workarounds
from keras_transformer import losses
from keras_transformer import metrics as kt_metrics
from keras_transformer.decoding import settings as settings_lib
from keras_transformer.decoding.plan import DecodingPlan
from keras_transformer.decoding.settings import DecodingSettings
from keras_transformer.model import TokenLossTraining
from keras_transformer.models import checks, generation, presets
from keras_transformer.models.backbone import MODEL_ARGUMENTS, TransformerBackbone
from keras_transformer.models.preprocessor import TransformerSeq2SeqLMPreprocessor
from keras_transformer.schedule import WarmupSchedule

# keras-hub's sampler names, as a keras-hub user passes them to `compile(sampler=...)`.
SAMPLING = generation.SAMPLING
UNSUPPORTED_SAMPLERS = generation.UNSUPPORTED_SAMPLERS
# The constructor's keywords, and `keras.Model`'s that it passes on (MODEL_ARGUMENTS, the
# backbone's: Keras's functional models drop any other without a word, so the constructor
# refuses them by name).
ARGUMENTS = ("backbone", "preprocessor", "decoding", "sampling", "compile")
# What keras-hub's loader, `keras_hub.models.Seq2SeqLM.from_preset(directory, ...)`, takes for
# this task: its own, and the keywords it passes on to the task (`dtype` to the backbone).
LOADER_KEYWORDS = ("load_weights", "decoding", "dtype", "preprocessor", "sampling", "compile")
LOADER_KEYWORDS += MODEL_ARGUMENTS
TAKES = generation.TAKES  # what generate translates


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerSeq2SeqLM(
    TokenLossTraining, workarounds.MultiWorkerFit, keras_hub.models.Seq2SeqLM
):
    """The Transformer as a keras-hub `Seq2SeqLM`: text in, translations out, and `fit` on
    text pairs, with this library's searches and the paper's training recipe.

    It wraps a `TransformerBackbone` (the encoder-decoder; the logits are its target
    embedding reversed, paper 3.4) and a `TransformerSeq2SeqLMPreprocessor` (the
    vocabularies), and holds the `kt.decoding.DecodingSettings` that `generate`, the exports
    and the programs decode with. Loaded with `from_preset` from a directory that
    `save_to_preset` wrote (which `keras_hub.models.Seq2SeqLM.from_preset` loads too, once
    `keras_transformer` is imported), from a Hugging Face OPUS-MT (Marian) or NLLB-200
    (M2M100) checkpoint, or from a `trainers.train` model directory.

    - `generate("text")` translates (a str, a list, or a `tf.data.Dataset` of strings) with
      cached beam search, greedy search or sampling, as `compile(sampler=...)` chose;
      `decoding` (or `compile(sampler=kt.decoding.DecodingSettings(...))`) sets the beam's
      length penalty, stopping rule, extra length and n-best, which keras-hub's
      `BeamSampler` lacks.
    - `fit(sources, targets)` (or a `tf.data.Dataset` of `(source, target)` pairs, or
      `kt.data.make_dataset`'s batches) trains with the token-weighted, label-smoothed loss;
      `compile()` defaults to the paper's recipe (5.3, 5.4).
    - `kt.export.export(task, directory)` writes the TF Serving SavedModel.

    Args:
        backbone: `TransformerBackbone`.
        preprocessor: `TransformerSeq2SeqLMPreprocessor` or None. None makes a model of ids
            alone (`generate` then takes and returns ids). Defaults to None.
        decoding: `kt.decoding.DecodingSettings`, its dict, or None (the defaults, the
            paper's). Defaults to None.
        sampling: dict or None. `kt.decoding.sample`'s settings (temperature, top_k, top_p,
            seed), which `compile` sets from a keras-hub sampler: `generate` then draws
            instead of searching. Defaults to None.
        compile: bool. `compile()` with the defaults now. Defaults to True.
        **kwargs: other `keras.Model` arguments (`name`...).

    Examples:
        `TransformerSeq2SeqLM.from_preset("runs/demo")` loads the model `make demo` trains; here
        a task is made from an untrained model and a vocabulary learned on two pairs:

        >>> import tempfile
        >>> import keras_transformer as kt
        >>> from keras_transformer.models import TransformerSeq2SeqLM
        >>> english = ["In the beginning God created the heaven and the earth.", "God is love."]
        >>> spanish = ["En el principio creó Dios los cielos y la tierra.", "Dios es amor."]
        >>> vocabularies = kt.text.Vocabularies.train(english, spanish, 300)
        >>> config = kt.TransformerConfig.preset(
        ...     "tiny", vocab_size=vocabularies.target.vocabulary_size())
        >>> task = TransformerSeq2SeqLM.from_transformer(kt.build_transformer(config), vocabularies)
        >>> task.compile(sampler="greedy")  # the default: the paper's beam search
        >>> isinstance(task.generate("God is love."), str)  # a translation, untrained here
        True
        >>> task.compile(sampler="beam")  # two of the beam's, best first, with their scores
        >>> answer = task.generate("God is love.", n_best=2, return_scores=True)
        >>> sorted(answer), len(answer["translations"]), answer["scores"][0] >= answer["scores"][1]
        (['scores', 'translations'], 2, True)
        >>> preset = tempfile.mkdtemp()
        >>> task.save_to_preset(preset)
        >>> TransformerSeq2SeqLM.from_preset(preset).count_params() == task.count_params()
        True
    """

    backbone_cls = TransformerBackbone
    preprocessor_cls = TransformerSeq2SeqLMPreprocessor

    def __init__(
        self,
        backbone: TransformerBackbone,
        preprocessor: TransformerSeq2SeqLMPreprocessor | None = None,
        decoding: DecodingSettings | dict | None = None,
        sampling: dict | None = None,
        compile: bool = True,
        **kwargs,
    ):
        if not isinstance(backbone, TransformerBackbone):
            raise ValueError(
                f"backbone must be a TransformerBackbone, got {type(backbone).__name__}"
            )
        _check_arguments(kwargs)
        # === Layers ===
        self.backbone = backbone
        self.preprocessor = preprocessor
        # === Functional model ===
        inputs = backbone.input
        hidden = backbone(inputs)["decoder_sequence_output"]
        logits = backbone.target_embedding(hidden, reverse=True)  # float32 [batch, len, vocab]
        kwargs.setdefault("name", "transformer_seq2seq_lm")
        super().__init__(inputs=inputs, outputs=logits, compile=False, **kwargs)
        # === Config and state ===
        self.token_loss = keras.metrics.Mean(name="loss")
        self._token_normalizer = None  # the training step's, from kt.data.accumulation_groups
        if isinstance(decoding, dict):
            decoding = DecodingSettings.from_dict(decoding, "decoding")
        self.decoding = decoding or DecodingSettings()
        # `kt.decoding.sample`'s settings, when compile chose one of keras-hub's samplers.
        self.sampling = None if sampling is None else dict(sampling)
        self.sampler = None
        self.generate_function = None
        if preprocessor is not None:
            limit = backbone.config.max_length
            for name in ("encoder_sequence_length", "decoder_sequence_length"):
                length = getattr(preprocessor, name)
                if length is None:
                    setattr(preprocessor, name, limit)
                elif length > limit:
                    raise ValueError(
                        f"the preprocessor's {name}={length} exceeds the model's max_length={limit}"
                    )
        if compile:
            self.compile()

    # What the searches and `TokenLossTraining` read of a model: the backbone's.
    @property
    def config(self):
        """The backbone's `TransformerConfig`."""
        return self.backbone.config

    @property
    def source_embedding(self):
        return self.backbone.source_embedding

    @property
    def target_embedding(self):
        return self.backbone.target_embedding

    @property
    def encoder(self):
        return self.backbone.encoder

    @property
    def decoder(self):
        return self.backbone.decoder

    def compile(
        self,
        optimizer="auto",
        loss="auto",
        *,
        metrics="auto",
        weighted_metrics="auto",
        sampler=None,
        **kwargs,
    ):
        """Configures training and `generate`.

        Args:
            optimizer: "auto" or a Keras optimizer. "auto" is the paper's (5.3): Adam with
                beta_1 0.9, beta_2 0.98, epsilon 1e-9 and `kt.WarmupSchedule(d_model,
                warmup_steps=4000)`.
            loss: "auto" or a Keras loss. "auto" is `kt.losses.LabelSmoothedCrossEntropy(0.1)`
                (paper 5.4), whose `loss` `fit` reports as a mean over target tokens.
            metrics: "auto" (`kt.metrics.MaskedAccuracy()`) or Keras metrics.
            weighted_metrics: "auto" (none: the labels' padding is left out by the metrics
                themselves) or Keras metrics.
            sampler: how `generate` decodes. None keeps the task's `decoding` settings (beam
                search, or greedy with `beam_size=1`); a `kt.decoding.DecodingSettings`
                replaces them. keras-hub's samplers, by name or instance: "greedy"
                (`GreedySampler`), "beam" (by name: the task's beam search, or the default
                beam size, 4, where greedy search set it to 1; a `BeamSampler` object: its
                `num_beams`, with the task's length penalty and stopping), "top_k",
                "top_p" and "random" (drawing from the softmax, with their `k`, `p`,
                `temperature` and `seed`).
            **kwargs: other `keras.Model.compile` arguments (`jit_compile`...).
        """
        if optimizer == "auto":
            optimizer = keras.optimizers.Adam(
                WarmupSchedule(self.config.d_model, warmup_steps=4000),
                beta_1=0.9,
                beta_2=0.98,
                epsilon=1e-9,
            )
        if loss == "auto":
            loss = losses.LabelSmoothedCrossEntropy(0.1)
        if metrics == "auto":
            metrics = [kt_metrics.MaskedAccuracy()]
        if weighted_metrics == "auto":
            weighted_metrics = None
        keras.Model.compile(
            self,
            optimizer=optimizer,
            loss=loss,
            metrics=metrics,
            weighted_metrics=weighted_metrics,
            **kwargs,
        )
        if sampler is not None:
            self.decoding, self.sampling = generation.search_settings(sampler, self.decoding)
            self.sampler = sampler
        self.generate_function = None

    def make_generate_function(self):
        """The compiled search over source ids `[batch, src_len]`, made once per settings:
        on TensorFlow a `tf.function` traced once for any batch and length (as
        `kt.evaluation.Translator`'s), on JAX the search itself (its loops compile)."""
        if self.generate_function is None:
            self.generate_function = {}
        return self.generate_function

    def decoding_plan(
        self, settings: DecodingSettings | None = None, max_length: int | None = None
    ) -> DecodingPlan:
        """The `kt.decoding.DecodingPlan` of `settings` (None: the task's) for this task: its
        target prefix tokenized once by the target tokenizer, its sampler's settings, at most
        `max_length` output tokens."""
        settings = self.decoding if settings is None else settings
        if settings.target_prefix is not None and self.preprocessor is None:
            raise ValueError(
                f"target_prefix={settings.target_prefix!r} is text, and this task has "
                "no preprocessor to tokenize it"
            )
        tokenizer = None if self.preprocessor is None else self.preprocessor.tokenizer.target
        return DecodingPlan.make(settings, tokenizer, sampling=self.sampling, max_length=max_length)

    def _search(self, plan: DecodingPlan):
        """The compiled search of `plan` (`backends.traced_search`), made once for each."""
        functions = self.make_generate_function()
        if plan not in functions:
            functions[plan] = backends.traced_search(lambda ids: plan.search(self, ids))
        return functions[plan]

    def generate(
        self,
        inputs,
        max_length: int | None = None,
        stop_token_ids="auto",
        strip_prompt: bool = False,
        batch_size: int = settings_lib.BATCH_SIZE,
        target_prefix: str | None = None,
        source_prefix: str | None = None,
        n_best: int | None = None,
        return_scores: bool = False,
    ):
        """Translates `inputs`.

        Sentences are decoded in batches of similar length, then put back in input order.
        An input with nothing to translate (empty, or spaces) gives "" (score 0).

        Args:
            inputs: a str, a list (or array, or string tensor) of str, a `tf.data.Dataset`
                of strings (batched or not), or keras-hub's `{"encoder_text": ...}`. Without
                a preprocessor: source ids `[batch, src_len]` (EOS-terminated, 0-padded).
            max_length: int or None. At most this many output tokens, EOS included (on top of
                the settings' `max_extra_length` and the model's `max_length`). Defaults to
                None.
            stop_token_ids: "auto" (EOS), the only stop this model's searches know.
            strip_prompt: unused: a translation has no prompt to strip (keras-hub's
                argument, accepted).
            batch_size: int. Sentences decoded at once. Defaults to 64
                (`kt.decoding.settings.BATCH_SIZE`).
            target_prefix: str or None. Text every translation starts with, for this call
                (NLLB-200's target language code, "spa_Latn"); None takes the settings'
                (`decoding.target_prefix`). Defaults to None.
            source_prefix: str or None. Text every source starts with, for this call
                (NLLB-200's source language code, "eng_Latn"; a source that starts with a
                code keeps its own); None takes the settings' (`decoding.source_prefix`).
                Defaults to None.
            n_best: int or None. Translations returned a sentence, best first, for this call
                (at most the beam size); None takes the settings' (`decoding.n_best`).
                Defaults to None.
            return_scores: bool. Also return each translation's score (the search's,
                length-normalised log-probability), as the SavedModel's signatures answer.
                Defaults to False.

        Returns:
            The translation (str) of a str; a list of them for a list or dataset; with
            `n_best` above 1, each translation is a list of the n best, best first. With
            `return_scores`, a dict as the SavedModel's signatures answer:
            `{"translation": ..., "score": ...}` (floats where the translations are str),
            or `{"translations": ..., "scores": ...}` with `n_best` above 1. Without a
            preprocessor, the output ids (numpy int32, `[batch, out_len]` or `[batch, n,
            out_len]`), or `(ids, scores)` with `return_scores`.
        """
        del strip_prompt
        generation.check_arguments(stop_token_ids, max_length, batch_size, return_scores)
        settings = self.decoding.replace(
            target_prefix=target_prefix, source_prefix=source_prefix, n_best=n_best
        )
        if n_best is not None and n_best > 1 and self.sampling is not None:
            raise ValueError(
                f"n_best={n_best}: this task samples (compile(sampler=...)), "
                "which draws one translation a sentence"
            )
        search = self._search(self.decoding_plan(settings, max_length))
        if self.preprocessor is None:
            if settings.source_prefix is not None:
                raise ValueError(
                    f"source_prefix={settings.source_prefix!r} is text, and this task has "
                    "no preprocessor to tokenize it"
                )
            ids, scores = search(np.asarray(inputs, "int32"))
            ids = keras.ops.convert_to_numpy(ids)
            return (ids, keras.ops.convert_to_numpy(scores)) if return_scores else ids
        texts, scalar = generation.texts_of(inputs)
        plural = settings.n_best > 1 and self.sampling is None  # n-best lists
        results, scores = generation.translate_texts(
            self.preprocessor,
            search,
            texts,
            source_prefix=settings.source_prefix,
            batch_size=batch_size,
        )
        if scalar:
            results, scores = results[0], scores[0]
        return generation.answer(results, scores, return_scores=return_scores, plural=plural)

    def quantize(self, mode, **kwargs):
        """Quantizes the backbone's layers (`keras.Model.quantize`, e.g. "int8"): the task's
        other layers (the preprocessor's) have no weights."""
        self.backbone.quantize(mode, **kwargs)
        self.generate_function = None

    @classmethod
    def from_config(cls, config):
        """keras-hub's `Task.from_config`, with a keyword that no saved config holds refused
        by `from_preset`'s name: keras-hub's loader (`keras_hub.models.Seq2SeqLM.
        from_preset(directory, **kwargs)`) merges its keywords into the task's config."""
        _check_arguments(config, "from_preset", LOADER_KEYWORDS)
        return super().from_config(config)

    def get_config(self):
        return {
            **super().get_config(),
            "decoding": self.decoding.to_dict(),
            "sampling": self.sampling,
        }

    def get_compile_config(self):
        """Keras's: the optimizer, loss and metrics `compile` was given (a `.keras` file
        compiles the loaded task with them; the sampler is in `get_config`)."""
        return super().get_compile_config()

    def compile_from_config(self, config):
        """Compiles as `get_compile_config` recorded (the decoding settings and sampler are
        the task's config), and builds the optimizer, as Keras does for its own models."""
        self.compile(**keras.saving.deserialize_keras_object(config))
        if self.built:
            self.optimizer.build(self.trainable_variables)

    def evaluate(self, x=None, y=None, batch_size=None, **kwargs):
        """`keras.Model.evaluate`, with text checked as `fit` checks it (one target a
        source, each a str)."""
        if x is not None and not isinstance(x, tf.data.Dataset) and self.preprocessor is not None:
            checks.check_pairs(x, y)
        return super().evaluate(x, y, batch_size=batch_size, **kwargs)

    def fit(self, x=None, y=None, batch_size=None, shuffle=None, **kwargs):
        """`keras.Model.fit` on text: `fit(sources, targets)`, a `tf.data.Dataset` of
        `(source, target)` text pairs (batched), keras-hub's `{"encoder_text": ...,
        "decoder_text": ...}`, or `kt.data.make_dataset`'s batches of ids. Text given as
        lists or arrays is shuffled every epoch, as Keras shuffles arrays (`shuffle`, True
        unless given); a dataset shuffles itself."""
        if x is None and y is None and self.preprocessor is not None:
            raise ValueError("x=None: fit takes text pairs, fit(sources, targets), or a dataset")
        given_as_arrays = (
            x is not None
            and not isinstance(x, tf.data.Dataset)
            and kwargs.get("validation_split") is None
            and kwargs.get("sample_weight") is None
        )
        if given_as_arrays and self.preprocessor is not None:
            checks.check_pairs(x, y)
            samples = x if y is None else (x, y)
            dataset = tf.data.Dataset.from_tensor_slices(samples)
            if shuffle is None or shuffle:
                count = int(dataset.cardinality())
                dataset = dataset.shuffle(count, reshuffle_each_iteration=True)
            x, y = dataset.batch(batch_size or 32), None
            batch_size, shuffle = None, False
        if shuffle is not None:
            kwargs["shuffle"] = shuffle
        return super().fit(x, y, batch_size=batch_size, **kwargs)

    @classmethod
    def from_preset(cls, preset, load_weights: bool = True, **kwargs):
        """The task of a preset directory (or keras-hub handle), a Hugging Face OPUS-MT
        (Marian) or NLLB-200 (M2M100) checkpoint directory, or a `trainers.train` model
        directory.

        Args:
            preset: str or path. A directory that `save_to_preset` wrote (a keras-hub
                handle works as in keras-hub); an OPUS-MT or NLLB-200 checkpoint (config.json
                with `"model_type": "marian"` or `"m2m_100"`, converted on load by
                `kt.pretrained`); or a model directory of `trainers.train` (experiment.yaml,
                model.keras, vocab/), written before or after this class existed: its
                model.keras, the model as training left it, unless `model_file` says
                otherwise. `"hf://ORG/NAME"` (or `"hf://ORG/NAME@REVISION"`) downloads an
                OPUS-MT or NLLB-200 checkpoint from the Hugging Face Hub into its cache first
                (only the files the import reads); any other hf:// repository is keras-hub's
                to load.
            load_weights: bool. False leaves the weights initialized (presets only).
            **kwargs: `decoding` (settings over the preset's), `model_file` (a model
                directory's `.keras` file other than model.keras, e.g.
                "model.averaged.keras"), and for a keras-hub preset what keras-hub's loader
                takes: `dtype` and the constructor's `preprocessor`, `sampling`, `compile`,
                `name` and `trainable`. Any other keyword is refused by name (ValueError),
                before anything is read. keras-hub's own
                `keras_hub.models.Seq2SeqLM.from_preset` loads a model directory's preset
                (its model.keras) and refuses `model_file`, which only this method reads.
        """
        return presets.load_task(cls, preset, load_weights, **kwargs)

    @classmethod
    def from_transformer(cls, model, vocabularies, decoding=None, share_weights=False, **kwargs):
        """The task of a `kt.Transformer` and its `kt.text.Vocabularies`.

        The weights are copied into a new `TransformerBackbone`; with `share_weights=True`
        the backbone uses the model's own layers instead (no second copy in memory, and
        training the task trains the model). A quantized model, or one with LoRA adapters,
        is refused: merge or dequantize it first."""
        return presets.task_from_transformer(
            cls, model, vocabularies, decoding, share_weights=share_weights, **kwargs
        )

    def save_to_preset(self, preset_dir, max_shard_size=10):
        """Writes keras-hub's preset files into `preset_dir`: config.json (the backbone),
        model.weights.h5, task.json (with the decoding settings), preprocessor.json,
        tokenizer.json, assets/tokenizer/ (the vocabulary files) and metadata.json."""
        if self.preprocessor is None:
            raise ValueError("save_to_preset needs the task's preprocessor (its vocabularies)")
        Path(preset_dir).mkdir(parents=True, exist_ok=True)
        super().save_to_preset(str(preset_dir), max_shard_size=max_shard_size)


def _check_arguments(
    kwargs, where: str = "TransformerSeq2SeqLM", takes: tuple = (*ARGUMENTS, *MODEL_ARGUMENTS)
) -> None:
    """Refuses a keyword that `where` (the constructor, or keras-hub's loader through
    `from_config`) does not take, by name, naming those it `takes`. keras-hub's loader
    (`keras_hub.models.Seq2SeqLM.from_preset(directory, **kwargs)`) passes its keywords on to
    the task, so `model_file` is told where it is taken."""
    if "model_file" in kwargs:
        raise ValueError(
            f"model_file={kwargs['model_file']!r}: keras-hub's loader "
            "(keras_hub.models.Seq2SeqLM.from_preset) loads a preset's own weights and reads "
            "no other model file; load another .keras file of a model directory with "
            "keras_transformer.models.TransformerSeq2SeqLM.from_preset(directory, "
            f"model_file={kwargs['model_file']!r})"
        )
    presets.check_keywords({k: v for k, v in kwargs.items() if k != "backbone"}, takes, where)


__all__ = ["TransformerSeq2SeqLM"]
