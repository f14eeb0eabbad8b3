"""What `TransformerSeq2SeqLM.fit` and `evaluate` check of the text they are given, before
TensorFlow traces the preprocessor (whose own refusal would come wrapped in Keras's
traceback of the traced function)."""

from __future__ import annotations

from keras_transformer.models.preprocessor import NEEDS_TARGETS


def check_pairs(x, y) -> None:
    """`fit`'s text given as lists or arrays (or keras-hub's dict of them): targets given,
    one a source, and at least one pair. ValueError naming the arguments, before TensorFlow
    traces the preprocessor (whose own refusal would come wrapped in Keras's traceback of
    the traced function); other inputs (a tuple of sources and targets) are left to Keras."""
    if isinstance(x, dict):
        if y is not None or "encoder_text" not in x:
            return
        sides = [("x['encoder_text']", x["encoder_text"])]
        sides.append(("x['decoder_text']", x.get("decoder_text")))
    elif y is None and isinstance(x, tuple):
        return
    elif y is None:
        raise ValueError(f"y=None: {NEEDS_TARGETS}")
    else:
        sides = [("x", x), ("y", y)]
    # Here, not at the top: `import keras_transformer` leaves kt.serving to its first use.
    from keras_transformer.serving.common import text_of

    counts = []
    for name, side in sides:
        if side is None:
            raise ValueError(f"{name}=None: fit on text takes the targets too")
        if isinstance(side, (str, bytes)):
            raise ValueError(f"{name}: give a list of sentences, not one str")
        try:
            counts.append(len(side))
        except TypeError:
            raise ValueError(
                f"{name}: expected a list or array of sentences, got {type(side).__name__}"
            ) from None
    for name, side in sides:
        for index, sentence in enumerate(side):
            text_of(sentence.item() if hasattr(sentence, "item") else sentence, f"{name}[{index}]")
    (x_name, x_count), (y_name, y_count) = zip((n for n, _ in sides), counts, strict=True)
    if x_count != y_count:
        raise ValueError(
            f"{x_name} has {x_count} sentences and {y_name} {y_count}: give one target a source"
        )
    if not x_count:
        raise ValueError(f"{x_name} and {y_name} are empty: nothing to train on")


__all__ = ["check_pairs"]
