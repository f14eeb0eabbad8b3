"""`keras_transformer.core.rules`: each decoding rule written once, and the tensor forms the
graphs use (`output_limit` with a tensor library's `minimum`, `nothing_to_translate` and
`length_penalty` on tensors) answering as the plain rule does."""

import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from keras_transformer.core import rules

LENGTHS = [0, 1, 2, 7, 50, 254, 255, 256, 300]


@pytest.mark.parametrize("extra", [0, 3, 50])
def test_the_output_limit_on_tensors_is_the_rule(extra):
    expected = [rules.output_limit(n, extra, 256) for n in LENGTHS]
    assert expected == [min(n + extra, 256) for n in LENGTHS]
    lengths = np.asarray(LENGTHS, "int32")
    for minimum in (tf.minimum, ops.minimum):
        got = rules.output_limit(lengths, extra, 256, minimum)
        assert ops.convert_to_numpy(got).tolist() == expected


def test_source_cutting_keeps_room_for_eos():
    assert rules.kept_source_tokens(256) == 255
    pieces = list(range(300))
    assert len(pieces[: rules.kept_source_tokens(256)]) + 1 == 256  # with EOS


def test_nothing_to_translate_on_numbers_numpy_and_tensors():
    counts = [0, 1, 2, 5]
    expected = [True, True, False, False]
    assert [rules.nothing_to_translate(n) for n in counts] == expected
    assert rules.nothing_to_translate(np.asarray(counts)).tolist() == expected
    tensor = tf.math.count_nonzero(tf.constant([[0, 0], [3, 0], [5, 3], [4, 3]]), axis=1)
    assert rules.nothing_to_translate(tensor).numpy().tolist() == expected
    assert rules.is_blank(" \t\u3000") and not rules.is_blank(" a ")


@pytest.mark.parametrize("ranking", ["gnmt", "length"])
def test_the_length_penalty_on_tensors_is_the_rule(ranking):
    lengths = [1, 2, 7, 30]
    expected = [rules.length_penalty(float(n), 0.6, ranking) for n in lengths]
    got = rules.length_penalty(ops.cast(np.asarray(lengths), "float32"), 0.6, ranking)
    np.testing.assert_allclose(ops.convert_to_numpy(got), expected, rtol=1e-6)
    gnmt = [((5.0 + n) / 6.0) ** 0.6 for n in lengths]
    assert expected == (gnmt if ranking == "gnmt" else [float(n) ** 0.6 for n in lengths])


def test_a_target_prefix_without_tokens_is_refused():
    assert rules.target_prefix_ids("spa_Latn", str.split) == ["spa_Latn"]
    with pytest.raises(ValueError, match=r"target_prefix='  ' has no tokens"):
        rules.target_prefix_ids("  ", str.split)
