"""keras_transformer._ragged: rows joined as tf.concat joins them, without the int64 transpose
that makes TensorFlow log its oneDNN ERROR line."""

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer._ragged import concat_rows
from tests import programs


@pytest.mark.parametrize("dtype", [tf.int32, tf.string])
def test_concat_rows_is_tf_concat(dtype):
    rng = np.random.default_rng(0)

    def ragged(rows):
        lengths = rng.integers(0, 4, rows)
        values = rng.integers(0, 100, lengths.sum()).astype("int32")
        tensor = tf.RaggedTensor.from_row_lengths(values, lengths)
        return tf.strings.as_string(tensor) if dtype == tf.string else tensor

    for rows in (0, 1, 7):
        a, b = ragged(rows), ragged(rows)
        assert concat_rows(a, b).to_list() == tf.concat([a, b], axis=1).to_list()
        in_graph = tf.function(concat_rows)(a, b)
        assert in_graph.to_list() == tf.concat([a, b], axis=1).to_list()


def test_tokenizing_for_translation_logs_no_onednn_error():
    """The library's source batches, the export's request graph and an imported model's
    piece tokenizer, in a fresh process: no "oneDNN supports DT_INT64" line (the first int64
    Transpose in a graph logs it, an ERROR once a process)."""
    code = (
        "from trainers import startup_logs; startup_logs.install()\n"
        "import tensorflow as tf\n"
        "import keras_transformer as kt\n"
        "from keras_transformer.models import (\n"
        "    TransformerSeq2SeqLMPreprocessor, TransformerTokenizer)\n"
        "from keras_transformer.pretrained import marian\n"
        "from tests import bible\n"
        "vocab = bible.vocabularies()\n"
        "for batch in kt.data.source_batches(['Hello world.'], vocab.source, max_length=8):\n"
        "    pass\n"
        "p = TransformerSeq2SeqLMPreprocessor(TransformerTokenizer(vocab), 8, 8)\n"
        "tf.function(lambda t: p.generate_preprocess(t)['source_ids'])(tf.constant(['Hi.']))\n"
        "pieces = marian.load_vocabularies('tests/fixtures/marian/shared')\n"
        "tf.function(pieces.source.tokenize)(tf.constant(['>>es<< Hello </s> world']))\n"
        "print('done')\n"
    )
    result = programs.snippet(code, timeout=300)
    assert result.stdout.strip() == "done", result.stderr[-2000:]
    assert "oneDNN supports DT_INT64" not in result.stderr, result.stderr[-2000:]
