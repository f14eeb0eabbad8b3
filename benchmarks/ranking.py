"""How often the CTranslate2 export translates as the SavedModel does, for each ranking of
finished hypotheses (`kt.decoding.DecodingSettings.ranking`).

    python -m benchmarks.ranking --model-dir runs/demo --model model.averaged.keras

For each length penalty alpha (`--alphas`, default 0.6 and 1.0) the model is exported as a
SavedModel and as a CTranslate2 directory with the run's beam size and each of:

- gnmt: ((5 + |Y|) / 6) ** alpha with the run's finish and stopping rules (the defaults:
  tensor2tensor, early), which CTranslate2's translators get by ranking its hypotheses anew;
- length: |Y| ** alpha with fairseq's finish rule and "k_finished" stopping, CTranslate2's
  own beam search;
- length, run's rules: |Y| ** alpha with the run's finish and stopping rules, which
  CTranslate2 does not follow (to show what the rules change).

Both translate the first `--sentences` test verses of the run's corpus (the SavedModel's
`serving_default`, `kt.serving.CTranslate2Translator`); one JSON line a setting
counts the equal translations.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = {  # name -> (ranking, the SavedModel's finish and stopping rules or None: the run's)
    "gnmt": ("gnmt", None),
    "length": ("length", {"finish_rule": "fairseq", "stopping": "k_finished"}),
    "length, run's rules": ("length", None),
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", type=Path, default=ROOT / "runs" / "demo")
    parser.add_argument("--model", default="model.averaged.keras")
    parser.add_argument("--sentences", type=int, default=100)
    parser.add_argument("--alphas", type=float, nargs="+", default=[0.6, 1.0])
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    from keras_transformer import export
    from keras_transformer.serving import CTranslate2Translator
    from trainers.experiment import read_split
    from trainers.run_dir import RunDirectory

    experiment, vocabularies, model = RunDirectory(args.model_dir).load_trained(args.model)
    sentences = list(read_split(experiment.data, "test").sources[: args.sentences])
    with tempfile.TemporaryDirectory() as folder:
        for alpha in args.alphas:
            for name, (ranking, rules) in SETTINGS.items():
                settings = experiment.decoding.replace(
                    length_penalty=alpha, ranking=ranking, **(rules or {})
                )
                where = Path(folder) / f"{alpha}-{ranking}-{rules is None}"
                version = export.export(
                    model, where / "saved", vocabularies=vocabularies, decoding=settings
                )
                served = tf.saved_model.load(str(version)).signatures["serving_default"]
                result = served(text=tf.constant(sentences))["translation"].numpy()
                saved = [t.decode() for t in result]
                directory = export.export(
                    model,
                    where / "ctranslate2",
                    format="ctranslate2",
                    vocabularies=vocabularies,
                    decoding=settings,
                )
                translated = CTranslate2Translator(directory).translate(sentences)
                equal = sum(h[0].text == s for h, s in zip(translated, saved, strict=True))
                record = {
                    "model": str(args.model_dir / args.model),
                    "setting": name,
                    "beam_size": settings.beam_size,
                    "length_penalty": alpha,
                    "ranking": ranking,
                    "finish_rule": settings.finish_rule,
                    "stopping": settings.stopping,
                    "sentences": len(sentences),
                    "equal": equal,
                }
                print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
