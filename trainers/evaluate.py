"""Score a trained model: `python -m trainers.evaluate --model-dir DIR --split test`.

    python -m trainers.evaluate --model-dir runs/demo --split test
    python -m trainers.evaluate --model-dir runs/demo --source new.en --reference new.es

Loads the model as `kt.models.TransformerSeq2SeqLM.from_preset(DIR)` does (the keras-hub
preset that trainers.train writes, or model.keras and vocab/ of a directory written before
it; --model another .keras file there). Translates with beam search as the model
directory's experiment.yaml says (its `decoding` section: beam size, length penalty,
stopping and finish rules, extra length: the ones `trainers.export` serves; the paper's beam
4 and length penalty 0.6, and early stopping, where it says nothing; the flags override
them), detokenizes, and scores with sacrebleu against the untouched
references: BLEU, chrF and their signatures, printed as JSON (on stdout, alone: the progress
bar, drawn on a terminal only, and the files written go to stderr). Hypotheses go to
DIR/eval/MODEL/SPLIT.hyp, a folder for each model file (MODEL: its name without .keras:
eval/model/test.hyp for model.keras, eval/model.averaged/test.hyp for model.averaged.keras;
for --source FILE: FILE.hyp there, source-FILE.hyp for a file named dev or test), or
--output, one a line, and the scores beside them (SPLIT.json, or NAME.json beside --output
NAME). An evaluation never replaces another
model's: each model file keeps its own results, which evaluating the same file again
replaces, and an --output whose NAME.json holds another model's scores is refused.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import warnings
from pathlib import Path

from trainers import errors, flags
from trainers.errors import ConfigError
from trainers.provenance import provenance
from trainers.run_dir import MODEL, RunDirectory, write_json


def parse_args(argv=None) -> argparse.Namespace:
    parser = flags.ArgumentParser(
        prog=flags.prog("trainers.evaluate"),
        description=__doc__.split("\n\n")[0] + "\n\n" + __doc__.split("\n\n")[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--model-dir", required=True, type=Path, help="a model directory (trainers.train's)"
    )
    parser.add_argument(
        "--model",
        default=MODEL,
        help="model file in the model directory (e.g. model.averaged.keras)",
    )
    parser.add_argument("--split", choices=("dev", "test"), help="a split of the experiment")
    parser.add_argument("--source", type=Path, help="source sentences, one a line")
    parser.add_argument("--reference", type=Path, help="reference translations, one a line")
    parser.add_argument(
        "--output", type=Path, help="hypotheses file (default DIR/eval/MODEL/NAME.hyp)"
    )
    parser.add_argument(
        "--beam-size",
        type=flags.positive_int,
        help="hypotheses kept per sentence, 1 for greedy search (default: the directory's "
        "decoding.beam_size, else 4)",
    )
    flags.add_length_penalty(parser)
    parser.add_argument(
        "--finish-rule",
        choices=("tensor2tensor", "fairseq"),
        help="beam search: which EOS extensions finish a hypothesis (default: the directory's "
        "decoding.finish_rule, else the paper's code, tensor2tensor)",
    )
    parser.add_argument(
        "--stopping",
        choices=("exact", "early", "k_finished"),
        help="beam search: when a sentence stops (default: the directory's decoding.stopping, "
        "else early, the rule trainers.export serves: once no alive hypothesis could win by "
        "ending at the next step; exact: tensor2tensor's rule, the paper's code; k_finished: "
        "once beam-size hypotheses have finished, fairseq's and CTranslate2's rule)",
    )
    flags.add_prefixes(parser)
    parser.add_argument(
        "--quantize",
        choices=("int8", "bfloat16"),
        help="translate with the weights trainers.export --quantize writes: int8 (Keras's "
        "model.quantize) or bfloat16 (where this CPU computes it natively, else float32)",
    )
    parser.add_argument("--limit", type=flags.positive_int, help="score only the first N sentences")
    args = parser.parse_args(argv)
    if (args.split is None) == (args.source is None):
        parser.error("give either --split, or --source and --reference")
    if (args.source is None) != (args.reference is None):
        parser.error("--source and --reference go together")
    if args.output and args.output.suffix == ".json":
        parser.error(f"--output {args.output}: the scores go to NAME.json beside the hypotheses")
    if args.output and args.output.is_dir():
        parser.error(f"--output {args.output} is a directory; name a file")
    return args


@errors.program
def main(argv=None) -> int:
    args = parse_args(argv)
    try:  # the paths first: a mistyped one costs no TensorFlow start-up
        RunDirectory(args.model_dir).check_trained(args.model)
    except ConfigError as error:
        return errors.fail(error)
    if problem := flags.first_missing(("--source", args.source), ("--reference", args.reference)):
        return errors.fail(problem)
    if args.output and (problem := _scores_of_another_model(args)):
        return errors.fail(f"--output {args.output}: {problem}")
    from keras_transformer import evaluation, export, fast
    from keras_transformer._files import atomic_write
    from keras_transformer.corpus import read_text_pair
    from trainers.experiment import read_split

    if args.output and (problem := flags.creatable(args.output)):  # before any work
        return errors.fail(f"--output {args.output}: {problem}")
    run = RunDirectory(args.model_dir)
    try:
        experiment, task = run.load_task(
            args.model,  # the flags over the directory's decoding settings
            beam_size=args.beam_size,
            length_penalty=args.length_penalty,
            ranking=args.ranking,
            finish_rule=args.finish_rule,
            stopping=args.stopping,
            target_prefix=args.target_prefix,
            source_prefix=args.source_prefix,
        )
        if args.split:
            pairs = read_split(experiment.data, args.split)
            if pairs is None:
                raise ConfigError(f"the experiment has no data.{args.split} split")
            name = args.split
        else:
            pairs = read_text_pair(args.source, args.reference)
            name = args.source.name
            if name in ("dev", "test"):  # the splits' own results keep their names
                name = f"source-{name}"
    except errors.USER_ERRORS as error:
        return errors.fail(error)
    output = args.output or run.hypotheses(name, args.model)  # the model file's own
    try:  # before any work: where the results go
        output.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        return errors.fail(f"--output {output}: {error}")
    if args.limit is not None:
        pairs = pairs.take(args.limit)
    # The copy that trainers.export --quantize writes (the task itself when not quantized).
    with warnings.catch_warnings(record=True) as caught:  # bfloat16's fallback to float32
        try:
            precision = export.precision.reduced_precision(task, args.quantize)
        except ValueError as error:  # a model already quantized...
            return errors.fail(error)
    for warning in caught:
        print(f"warning: {warning.message}", file=sys.stderr)
    task = precision.model
    # Its vocabularies and decoding settings; the best translation of each sentence is
    # scored, as serving_default serves it, whatever n-best the settings keep for export.
    translator = evaluation.Translator(task, decoding=task.decoding.replace(n_best=1))
    settings = translator.decoding
    # The search as the trainer's dev BLEU runs it; its progress bar on stderr, so that
    # stdout holds the scores' JSON alone, and only on a terminal: Keras's bar redraws
    # itself with carriage returns and colours, which a log or a pipe would keep.
    with fast.switched(experiment.training.fast), contextlib.redirect_stdout(sys.stderr):
        hypotheses = translator.translate(pairs.sources, progress=sys.stderr.isatty())
    result = {
        "model_dir": str(args.model_dir),
        "model": args.model,
        "data": name,
        "beam_size": settings.beam_size,
        "length_penalty": settings.length_penalty,
        "ranking": settings.ranking,
        "finish_rule": settings.finish_rule,
        "stopping": settings.stopping,
        "target_prefix": settings.target_prefix,
        "source_prefix": settings.source_prefix,
        "quantize": args.quantize and precision.weights,  # what was run: None, "int8"...
        **({"quantize_fallback": precision.fallback} if precision.fallback else {}),
        **evaluation.score(hypotheses, pairs.targets),
        "code": provenance(),
    }
    atomic_write(output, "".join(h + "\n" for h in hypotheses))
    write_json(output.with_suffix(".json"), result)
    print(f"wrote {output} and {output.with_suffix('.json')}", file=sys.stderr)  # stdout: JSON
    print(json.dumps(result, indent=2))
    return errors.EXIT_OK


def _scores_of_another_model(args) -> str | None:
    """What keeps `--output NAME` from being written: a NAME.json there that is not the
    scores of the same model file (`--model`) of the same model directory, or None."""
    scores = args.output.with_suffix(".json")
    if not scores.exists():
        return None
    try:
        record = json.loads(scores.read_text(encoding="utf-8"))
        model, model_dir = record["model"], Path(record["model_dir"])
    except (OSError, ValueError, KeyError, TypeError):
        return f"{scores} is there and is not trainers.evaluate's scores; name another --output"
    if model == args.model and model_dir.resolve() == args.model_dir.resolve():
        return None  # the same model scored again
    return (
        f"{scores} holds the scores of {model} in {model_dir}; name another --output (an "
        "evaluation never replaces another model's)"
    )


if __name__ == "__main__":
    sys.exit(main())
