"""The Keras backends this package runs on, and the few operations that differ between them.

Everything else in `keras_transformer`'s layers, model, losses, metrics, schedule and
decoding is written with `keras.ops` and runs on any backend. What needs a backend's own API
is here, chosen once from Keras's backend, so that no other module tests the backend:

- **distribution**: the replica's id and sums over replicas. Under `tf.distribute` each
  replica runs the step on its share of the batch, so a dropout mask or a token count is a
  replica's own; under JAX, `keras.distribution.DataParallel` runs one program over the
  global batch, sharded over the devices (GSPMD): a random draw over the batch already
  differs from shard to shard, and a sum is already global.
- **decoding's few ops**: gathering rows per sentence, the argmax of a step and seeded
  categorical draws, each in TensorFlow's own op there (the speed the decoding benchmarks
  measured) and in `keras.ops` or `jax.random` elsewhere.
- **the optimizer's variables**: on TensorFlow they are created before `fit` traces its
  first step, which would otherwise be traced twice (`build_optimizer`).
- **what needs TensorFlow**: `kt.data`, `kt.corpus`, `kt.evaluation`, `kt.export`,
  `kt.pretrained`, `parallel_search`, the `kt.fast` switch and `trainers/` use tf.data,
  tensorflow-text, tf.distribute or SavedModel; `require_tensorflow` gives their error on
  another backend. `kt.text`'s tokenizers and `kt.models` (the keras-hub task) need only the
  tensorflow and tensorflow-text packages, as keras-hub's preprocessing does, and run on
  either backend (`require_tensorflow_package`).
"""

from __future__ import annotations

import functools
import inspect
import weakref

import keras
from keras import ops

SUPPORTED_BACKENDS = ("tensorflow", "jax")
BACKEND = keras.config.backend()


def check_backend(backend: str | None = None) -> None:
    """Raises ImportError unless Keras's backend is one this package runs on.

    `import keras_transformer` sets `KERAS_BACKEND=tensorflow` when it is unset, but Keras
    picks its backend once, when it is first imported: `import keras` before this package (or
    `KERAS_BACKEND` or `~/.keras/keras.json` naming another) leaves it on that backend.

    Args:
        backend: str or None. The backend's name. Defaults to None, Keras's own
            (`keras.config.backend()`).

    Examples:
        >>> from keras_transformer._backends import check_backend
        >>> check_backend("jax")
        >>> check_backend("torch")
        Traceback (most recent call last):
        ImportError: keras_transformer runs on Keras's tensorflow and jax backends, ...
    """
    backend = keras.config.backend() if backend is None else backend
    if backend not in SUPPORTED_BACKENDS:
        raise ImportError(
            f"keras_transformer runs on Keras's {' and '.join(SUPPORTED_BACKENDS)} backends, "
            f"but Keras was imported with backend {backend!r}: set KERAS_BACKEND to one of "
            "them before importing keras (or import keras_transformer first, which sets "
            "tensorflow when it is unset)"
        )


def require_tensorflow(feature: str) -> None:
    """Raises ImportError naming `feature` unless Keras runs on TensorFlow.

    Examples:
        >>> import keras
        >>> from keras_transformer._backends import require_tensorflow
        >>> if keras.config.backend() == "tensorflow":
        ...     require_tensorflow("kt.data")  # on JAX: ImportError, "kt.data needs Keras's ..."
    """
    if BACKEND != "tensorflow":
        raise ImportError(
            f"{feature} needs Keras's TensorFlow backend (tf.data, tensorflow-text, "
            f"tf.distribute or SavedModel), and Keras runs on {BACKEND!r}: set "
            "KERAS_BACKEND=tensorflow before importing keras. The layers, the model, the "
            "losses, metrics, schedule and kt.decoding's searches run on either backend."
        )


def require_tensorflow_package(feature: str) -> None:
    """Raises ImportError naming `feature` unless the `tensorflow` and `tensorflow-text`
    packages import: text preprocessing (tokenizers, `tf.data`) runs on them whatever Keras's
    backend, as keras-hub's does.

    Examples:
        >>> from keras_transformer._backends import require_tensorflow_package
        >>> require_tensorflow_package("kt.models")  # nothing: tensorflow-text is installed
    """
    try:
        import tensorflow  # noqa: F401
        import tensorflow_text  # noqa: F401
    except ImportError as error:
        raise ImportError(
            f"{feature} needs the tensorflow and tensorflow-text packages for its text "
            f"preprocessing, on any Keras backend ({error})"
        ) from None


def text_stack_installed() -> bool:
    """Whether the packages of the text preprocessing (tensorflow, tensorflow-text, keras-hub)
    are installed, without importing them."""
    import importlib.util

    for name in ("tensorflow", "tensorflow_text", "keras_hub"):
        try:
            if importlib.util.find_spec(name) is None:
                return False
        except ImportError:  # a finder that refuses it (keras-hub's "NoTensorflow" test's)
            return False
    return True


if BACKEND == "tensorflow":
    import tensorflow as tf

    def replica_id():
        """The replica's id in its sync group when several replicas run, else None."""
        context = tf.distribute.get_replica_context()
        if context is None or context.num_replicas_in_sync == 1:
            return None
        return tf.cast(context.replica_id_in_sync_group, tf.int32)

    def global_sum(value):
        """`value` summed over the replicas in sync (itself with one replica)."""
        context = tf.distribute.get_replica_context()
        if context is None or context.num_replicas_in_sync == 1:
            return value
        return context.all_reduce(tf.distribute.ReduceOp.SUM, value)

    def batch_gather(x, indices):
        """`x[b, indices[b, i], ...]`: `x` `[batch, n, ...]`, `indices` int `[batch, m]`."""
        return tf.gather(x, indices, batch_dims=1)

    def argmax(x):
        """The index of the largest entry of the last axis, int32."""
        return tf.argmax(x, axis=-1, output_type=tf.int32)

    def random_seed():
        """A fresh int32 seed scalar, for a sampling call given none."""
        return tf.random.uniform([], maxval=2**31 - 1, dtype=tf.int32)

    def stateless_categorical(logits, seed):
        """One draw per row from softmax(`logits` `[batch, vocab]`), int32 `[batch]`, given
        by the int32 `seed` `[2]` alone."""
        return tf.random.stateless_categorical(logits, 1, seed, tf.int32)[:, 0]

    def build_optimizer(model):
        """Creates the optimizer's variables now, eagerly, under the model's distribution
        strategy, if `fit` would create them in its first step.

        Without a `tf.distribute` strategy Keras builds the optimizer while it traces the
        training step, and a `tf.function` whose first trace creates variables is traced a
        second time (TensorFlow issue 48851): the whole step, forward, gradients and every
        variable's update, twice. Built beforehand, as Keras itself does under a strategy,
        the step is traced once, with the same variables.
        """
        if model.optimizer is not None and not model.optimizer.built:
            with model.distribute_strategy.scope():
                model.optimizer.build(model.trainable_variables)

    def compiled_search(search):
        """`search`, marked for AutoGraph to leave as it is: on TensorFlow a search runs
        eagerly, or compiled where the caller wraps it (`tf.function`, `jit_compile=True`,
        `parallel_search`).

        A search's loops and branches are explicit (`keras.ops.while_loop`, Python `if`s on
        settings), so AutoGraph's conversion of its source, and of every function it calls,
        would change nothing but the time a `tf.function` takes to trace it. Keras marks its
        own training step the same way.
        """
        return tf.autograph.experimental.do_not_convert(search)

    def traced_search(search):
        """`search(source_ids)` as a `tf.function` traced once for any batch and length
        (int32 `[None, None]`), without AutoGraph (see `compiled_search`)."""
        return tf.function(
            search, input_signature=[tf.TensorSpec([None, None], tf.int32)], autograph=False
        )

    def step_result(model, logs):
        """What `Transformer.train_step`/`test_step` return: Keras's logs, in a form Keras
        can reduce across workers."""
        from keras_transformer import _workarounds as workarounds

        return workarounds.reducible_logs(model.distribute_strategy, logs)

elif BACKEND == "jax":
    import jax

    def replica_id():
        """None: one program runs over the global batch (see the module's docstring)."""
        return None

    def global_sum(value):
        """`value` itself: under `keras.distribution` sums are over the global batch."""
        return value

    def batch_gather(x, indices):
        """`x[b, indices[b, i], ...]`: `x` `[batch, n, ...]`, `indices` int `[batch, m]`."""
        indices = ops.reshape(indices, (*indices.shape, *[1] * (len(x.shape) - 2)))
        return ops.take_along_axis(x, indices, axis=1)

    def argmax(x):
        """The index of the largest entry of the last axis, int32."""
        return ops.cast(jax.numpy.argmax(x, axis=-1), "int32")

    def random_seed():
        """A fresh int32 seed scalar, for a sampling call given none."""
        return keras.random.randint((), 0, 2**31 - 1, dtype="int32")

    def stateless_categorical(logits, seed):
        """One draw per row from softmax(`logits` `[batch, vocab]`), int32 `[batch]`, given
        by the int32 `seed` `[2]` alone."""
        key = jax.random.fold_in(jax.random.fold_in(jax.random.key(0), seed[0]), seed[1])
        return jax.random.categorical(key, logits, axis=-1).astype("int32")

    def traced_search(search):
        """`search` itself: on JAX its loops (`keras.ops.while_loop`) compile as they run."""
        return search

    def step_result(model, result):
        """What `Transformer.train_step`/`test_step` return: Keras's `(logs, state)`."""
        return result

    def build_optimizer(model):
        """Nothing: on JAX, Keras's `fit` builds the optimizer before it traces a step."""

    _COMPILED = weakref.WeakKeyDictionary()  # model -> {(search, settings): jitted}

    def compiled_search(search):
        """`search(model, source_ids, **settings)` as a `jax.jit` program when called
        outside a trace, compiled once per model and settings (and shapes: XLA's rule).

        A loop traced anew at every call would be compiled anew too (seconds per call). The
        model's variables are arguments of the program, read through a
        `keras.StatelessScope`, so the program always uses their current values: training
        between two calls is seen. `seed` (sampling's) is an argument too, drawn here when
        None, and so is `target_prefix` (ids, not a setting: a program serves every prefix
        of a shape). Inside a trace (`jax.jit` around a search) the search runs as it is.
        """

        uses_seed = "seed" in inspect.signature(search).parameters

        @functools.wraps(search)
        def run(model, source_ids, **settings):
            if isinstance(source_ids, jax.core.Tracer):
                return search(model, source_ids, **settings)
            settings_given = set(settings)
            # Drawn only for a call that samples (one that passes `seed`): a greedy or beam
            # call leaves Keras's global random state as it was.
            seed = settings.pop("seed", None)
            if uses_seed and "seed" in settings_given and seed is None:
                seed = random_seed()
            prefix = settings.pop("target_prefix", None)
            if prefix is not None:
                prefix = ops.convert_to_tensor(prefix)
            key = (search, tuple(sorted(settings.items())))
            programs = _COMPILED.setdefault(model, {})
            if key not in programs:
                variables = list(model.variables)

                def program(values, source_ids, seed, prefix):
                    mapping = list(zip(variables, values, strict=True))
                    given = {} if prefix is None else {"target_prefix": prefix}
                    with keras.StatelessScope(state_mapping=mapping):
                        if uses_seed:
                            return search(model, source_ids, seed=seed, **settings, **given)
                        return search(model, source_ids, **settings, **given)

                programs[key] = (variables, jax.jit(program))
            variables, program = programs[key]
            values = [variable.value for variable in variables]
            return program(values, ops.convert_to_tensor(source_ids), seed, prefix)

        return run
