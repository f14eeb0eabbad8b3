"""A trained model on Keras's TensorFlow and JAX backends, on the same weights: its logits and
its greedy and beam ids on the first test verses, compared.

    python -m benchmarks.agreement --model-dir runs/demo --model model.averaged.keras

TensorFlow's side (this process) tokenizes the first `--sentences` test verses of the run's
corpus with the run's vocabulary (`kt.data.source_batches`: truncated to max_length - 1
tokens, EOS, 0-padded), decodes them greedily and by beam search (the run's `decoding`
section: beam size, length penalty, stopping), and takes the teacher-forced logits of the
greedy output. JAX's side, a process of its own on the same `.keras` file, does the same from
those ids. The last line: the largest logit difference, the rows with equal greedy and beam
ids, and whether every one is equal.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

JAX_SIDE = """
import json, sys
import keras
import numpy as np
import keras_transformer as kt

model = keras.saving.load_model(sys.argv[1])
arrays = dict(np.load(sys.argv[2]))
settings = json.loads(sys.argv[4])
source = arrays["source"]
greedy = np.asarray(kt.decoding.greedy_search(model, source)[0])
beam = np.asarray(kt.decoding.beam_search(model, source, **settings)[0])
target = np.concatenate([np.full((len(source), 1), 2), arrays["greedy"][:, :-1]], 1)
logits = model({"source_ids": source, "target_ids": target}, training=False)
np.savez(sys.argv[3], greedy=greedy, beam=beam, logits=np.asarray(logits))
assert "tensorflow" not in sys.modules
"""


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", type=Path, default=ROOT / "runs" / "demo")
    parser.add_argument("--model", default="model.averaged.keras")
    parser.add_argument("--sentences", type=int, default=100)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras_transformer as kt
    from trainers.experiment import read_split
    from trainers.run_dir import RunDirectory

    experiment, vocabularies, model = RunDirectory(args.model_dir).load_trained(args.model)
    sentences = list(read_split(experiment.data, "test").sources[: args.sentences])
    source = next(
        iter(
            kt.data.source_batches(
                sentences,
                vocabularies.source,
                max_length=model.config.max_length,
                batch_size=len(sentences),
            )
        )
    ).numpy()
    decoding = experiment.decoding
    settings = {
        "beam_size": decoding.beam_size,
        "length_penalty": decoding.length_penalty,
        "stopping": decoding.stopping,
    }
    greedy = np.asarray(kt.decoding.greedy_search(model, source)[0])
    beam = np.asarray(kt.decoding.beam_search(model, source, **settings)[0])
    target = np.concatenate([np.full((len(source), 1), 2), greedy[:, :-1]], 1)
    logits = np.asarray(model({"source_ids": source, "target_ids": target}, training=False))
    with tempfile.TemporaryDirectory() as folder:
        inputs, outputs = Path(folder) / "tensorflow.npz", Path(folder) / "jax.npz"
        np.savez(inputs, source=source, greedy=greedy)
        subprocess.run(
            [sys.executable, "-c", JAX_SIDE, args.model_dir / args.model, inputs, outputs]
            + [json.dumps(settings)],
            cwd=ROOT,
            env={**os.environ, "KERAS_BACKEND": "jax"},
            check=True,
        )
        jax = dict(np.load(outputs))
    real = target != 0
    print(
        json.dumps(
            {
                "model": str(args.model_dir / args.model),
                "sentences": len(source),
                "decoding": settings,
                "max_abs_logit_diff": float(np.abs(jax["logits"] - logits)[real].max()),
                "logit_scale": float(np.abs(logits[real]).max()),
                "greedy_rows_equal": int((jax["greedy"] == greedy).all(axis=1).sum()),
                "beam_rows_equal": int((jax["beam"] == beam).all(axis=1).sum()),
                "all_equal": bool(
                    np.array_equal(jax["greedy"], greedy) and np.array_equal(jax["beam"], beam)
                ),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
