"""Translate lines with an exported model:
`python -m trainers.translate --model saved_models/NAME [--input FILE] [--n-best K]`.

Reads sentences one a line (stdin by default; lines end at "\\n" only, a CRLF's "\\r" is
dropped), writes one translation a line (stdout by default), in batches. The decoding
settings are the export's (`trainers.export`). --model (or its older name --saved-model) is either

- a TF Serving SavedModel (`trainers.export`): a version folder, or the model folder whose
  highest version is used. It needs nothing but tensorflow and tensorflow_text, like TF
  Serving: the tokenizer and the beam search are inside the SavedModel; or
- a CTranslate2 directory (`trainers.export --format ctranslate2`). It needs nothing but
  ctranslate2 and sentencepiece, and decodes as the SavedModel does (`CTranslate2Translator`).

With --n-best K, each sentence gets its K best hypotheses, best first, as
`INDEX ||| TRANSLATION ||| SCORE` lines (the n-best format of Moses and Marian; INDEX counts
input lines from 0).

Input must be UTF-8: a line that is not is refused (exit status 2), naming the file (or
stdin) and the line, and nothing is written to --output; a file is checked whole before the
model loads. `--errors replace` translates such lines instead, their bad bytes read as U+FFFD,
with a warning that names the first one. With --output, a SIGTERM (or Ctrl-C) removes the
partial output and leaves an existing file as it was; the process then ends as SIGTERM ends
it (exit status 143 in a shell).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import NamedTuple

from trainers import flags, startup_logs

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

CTRANSLATE2_FORMAT = "keras-transformer/ctranslate2"  # keras_transformer.export.ctranslate2


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=flags.prog("trainers.translate"),
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--model",
        "--saved-model",
        dest="model",
        required=True,
        type=Path,
        help="a SavedModel (version or model folder) or a CTranslate2 directory",
    )
    parser.add_argument("--input", type=Path, help="one sentence a line (default: stdin)")
    parser.add_argument(
        "--output",
        type=Path,
        help="default: stdout (a file is written whole or not at all: an existing one is "
        "replaced once every line is translated; missing folders are made)",
    )
    parser.add_argument(
        "--batch-size",
        type=flags.positive_int,
        default=32,
        help="lines translated at once (default: 32)",
    )
    parser.add_argument(
        "--with-scores", action="store_true", help="write SCORE<TAB>TRANSLATION lines"
    )
    parser.add_argument(
        "--n-best",
        type=flags.positive_int,
        default=1,
        help="write the K best hypotheses of each sentence (at most the beam size; default: 1)",
    )
    parser.add_argument(
        "--errors",
        choices=("strict", "replace"),
        default="strict",
        help="input lines that are not UTF-8: strict refuses them, naming the first, before "
        "anything is written (the default); replace translates them, their bad bytes read as "
        "U+FFFD, with a warning",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="CTranslate2 only: threads of its one translator (0: its default)",
    )
    return parser.parse_args(argv)


def is_ctranslate2(path: Path) -> bool:
    """Whether `path` is a CTranslate2 directory written by `trainers.export`."""
    manifest = path / "manifest.json"
    if not (path / "model.bin").exists() or not manifest.exists():
        return False
    return json.loads(manifest.read_text()).get("format") == CTRANSLATE2_FORMAT


def resolve_version(path: Path) -> Path:
    """A version folder: `path` itself if it holds saved_model.pb, else its highest version."""
    if (path / "saved_model.pb").exists():
        return path
    versions = sorted((p for p in path.glob("*") if p.name.isdigit()), key=lambda p: int(p.name))
    if not versions:
        raise FileNotFoundError(
            f"{path}: no saved_model.pb, no version folder and no CTranslate2 model in it"
        )
    return versions[-1]


class Hypothesis(NamedTuple):
    """One translation: target ids (EOS excluded), its text and its score."""

    ids: list[int]
    text: str
    score: float


WORD_BOUNDARY = "\u2581"  # SentencePiece's mark of a word's start
# What NLLB's tokenizer reads as whitespace (kt.pretrained.nllb_tokenizer's WHITESPACE: RE2's
# \s, vertical tab, and Unicode's separators, category Z).
WHITESPACE_CHARACTERS = frozenset(
    "\t\n\x0b\x0c\r \xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029"
    "\u202f\u205f\u3000"
)
WHITESPACE = "".join(sorted(WHITESPACE_CHARACTERS))  # a character class's body (none is special)
SPECIAL_PIECES = ("<pad>", "<unk>", "<s>", "</s>")


class PieceRules:
    """Text -> pieces and pieces -> text for a CTranslate2 directory, in plain Python.

    A plain SentencePiece vocabulary (a model trained here) is SentencePiece's own encoding
    and decoding. An imported OPUS-MT model's (the manifest's `vocabulary.pieces`) is
    `keras_transformer.pretrained.tokenizer.PieceVocabularyTokenizer`'s, which its SavedModel
    runs in the graph: special tokens split out wherever they are, a leading prefix token
    (`>>xx<<`) kept whole, SentencePiece on the rest; pieces back to text by joining them,
    the special ones left out, word marks read as spaces.
    """

    def __init__(self, source, target, rules: dict | None, target_vocabulary=()):
        import re

        self.source, self.target, self.rules = source, target, rules
        self.target_ids = {piece: i for i, piece in enumerate(target_vocabulary)}
        if rules:
            self.special = rules["special_tokens"]  # text -> piece
            # One group: re.split keeps each special token, at the odd places. Longest first:
            # of two tokens starting at one place, the longer is the token.
            tokens = sorted(self.special, key=lambda t: (-len(t), t))
            self.special_re = re.compile("(" + "|".join(map(re.escape, tokens)) + ")")
            pattern = rules["prefix_pattern"]
            self.prefix_re = re.compile(pattern, re.DOTALL) if pattern else None
            # NLLB's (kt.pretrained.nllb_tokenizer): whitespace taken by special tokens, a
            # "▁" for a segment's trailing whitespace, special tokens left out when decoding.
            space = f"[{WHITESPACE}]"
            self.strip_res = [
                re.compile(f"{space}+({re.escape(t)})") for t in rules.get("lstrip_tokens", ())
            ] + [re.compile(f"({re.escape(t)}){space}+") for t in rules.get("rstrip_tokens", ())]
            self.trailing_piece = rules.get("trailing_whitespace_piece", False)
            skipped = rules.get("decode_skips_special_tokens", False)
            self.skipped = set(SPECIAL_PIECES) | (set(self.special.values()) if skipped else set())

    def split(self, text: str) -> list[str]:
        if not self.rules:
            return self.source.encode(text, out_type=str)
        for strip in self.strip_res:
            text = strip.sub(r"\1", text)
        parts = self.special_re.split(text) if self.special else [text]
        pieces = []
        for index, part in enumerate(parts):
            pieces += [self.special[part]] if index % 2 else self._split_segment(part)
        return pieces

    def _split_segment(self, segment: str) -> list[str]:
        prefix = self.prefix_re.match(segment) if self.prefix_re and segment else None
        if prefix is not None and prefix.end() > 0:
            return [prefix.group()] + self.source.encode(segment[prefix.end() :], out_type=str)
        pieces = self.source.encode(segment, out_type=str) if segment else []
        if self.trailing_piece and segment and segment[-1] in WHITESPACE_CHARACTERS:
            pieces.append(WORD_BOUNDARY)  # SentencePiece drops it; NLLB's tokenizer keeps it
        return pieces

    def ids(self, pieces: list[str]) -> list[int]:
        """The model's ids of target pieces."""
        if not self.rules:
            return [self.target.piece_to_id(p) for p in pieces]
        return [self.target_ids.get(p, SPECIAL_PIECES.index("<unk>")) for p in pieces]

    def join(self, pieces: list[str]) -> str:
        if not self.rules:
            return self.target.decode([self.target.piece_to_id(p) for p in pieces])
        kept = "".join(p for p in pieces if p not in self.skipped).replace(WORD_BOUNDARY, " ")
        # NLLB's decoding drops the first word's boundary only; OPUS-MT's strips the text.
        return kept.removeprefix(" ") if self.trailing_piece else kept.strip()


class CTranslate2Translator:
    """Translates with a CTranslate2 directory as the SavedModel does, with CTranslate2 and
    SentencePiece alone.

    What the SavedModel's graph does is done here around `ctranslate2.Translator`: inputs cut
    to `max_length - 1` pieces (then EOS, which CTranslate2 adds), an empty input answered
    with an empty translation, each sentence's output limited to its source length (EOS
    included) + `max_extra_length` tokens within `max_length`, a hypothesis that runs past its
    limit cut there and ended by EOS, scored as ours (`score_batch`), padding and the start
    token never generated. Beam search ranks as the manifest's `decoding.ranking` says
    (`DecodingSettings.ranking`; "gnmt" in a manifest written before it). With "length" it
    is CTranslate2's own, logP / |Y| ** alpha (its `length_penalty`), and its beam search is
    ours with `finish_rule="fairseq"` and `stopping="k_finished"`: the same ids as a
    SavedModel exported with those settings, but at near ties of the two engines' logits.
    With "gnmt", which CTranslate2 lacks, it returns its `beam_size` finished hypotheses with
    their summed log-probabilities (length penalty 0), ranked here by logP / ((5 + |Y|) / 6)
    ** alpha (Wu et al., 2016); |Y| counts EOS in both. CTranslate2's own stopping rule then
    decides which hypotheses finish, so the best may differ from our beam search's on some
    sentences (docs/guides/serving.md measures how often). The other arguments it gets are
    the manifest's `decoding.ctranslate2_options`.

    Args:
        directory: the CTranslate2 directory.
        threads: int. `intra_threads` of the translator; 0 lets CTranslate2 choose.
        compute_type: str. CTranslate2's compute type ("default": as saved).
        inter_threads: int. Batches translated at once, each by `threads` threads: a
            translator shared by N serving threads wants N here, else their requests queue
            behind one another (CTranslate2's `inter_threads`). Defaults to 1.
    """

    def __init__(
        self,
        directory,
        *,
        threads: int = 0,
        compute_type: str = "default",
        inter_threads: int = 1,
    ):
        import ctranslate2
        import sentencepiece

        directory = Path(directory)
        self.manifest = json.loads((directory / "manifest.json").read_text())
        vocabulary, decoding = self.manifest["vocabulary"], self.manifest["decoding"]
        self.source = sentencepiece.SentencePieceProcessor(
            model_file=str(directory / vocabulary["source"])
        )
        self.target = sentencepiece.SentencePieceProcessor(
            model_file=str(directory / vocabulary["target"])
        )
        rules, target_vocabulary = vocabulary.get("pieces"), []
        if rules:  # CTranslate2's own list of the target pieces, for their ids
            files = [directory / f"{n}_vocabulary.json" for n in ("target", "shared")]
            target_vocabulary = next(json.loads(p.read_text()) for p in files if p.exists())
        self.rules = PieceRules(self.source, self.target, rules, target_vocabulary)
        self.beam_size = decoding["beam_size"]
        self.length_penalty = decoding["length_penalty"]
        self.max_extra_length = decoding["max_extra_length"]
        self.max_length = decoding["max_length"]
        self.ranking = decoding.get("ranking", "gnmt")
        if self.ranking not in ("gnmt", "length"):
            raise ValueError(
                f"{directory / 'manifest.json'}: decoding.ranking={self.ranking!r} is not "
                "'gnmt' or 'length'"
            )
        # translate_batch's arguments: a manifest written before they were recorded, today's.
        self.options = decoding.get("ctranslate2_options") or {
            "length_penalty": 0.0,
            "suppress_sequences": [["<pad>"], ["<s>"]],
        }
        # NLLB's target language: its pieces forced first, as the SavedModel forces them.
        prefix = decoding.get("target_prefix")
        self.target_prefix = self.rules.split(prefix) if prefix is not None else None
        self.translator = ctranslate2.Translator(
            str(directory),
            device="cpu",
            compute_type=compute_type,
            intra_threads=threads,
            inter_threads=inter_threads,
        )

    def translate(
        self, sentences: list[str], *, beam_size: int | None = None, n_best: int = 1
    ) -> list[list[Hypothesis]]:
        """The `n_best` best hypotheses of each sentence, best first (greedy search with
        `beam_size` 1; default: the beam size of the export). Fewer when hypotheses cut at
        the sentence's length limit become the same."""
        beam_size = self.beam_size if beam_size is None else beam_size
        if not 1 <= n_best <= beam_size:
            raise ValueError(f"n_best={n_best} must be between 1 and the beam size {beam_size}")
        pieces = [self.rules.split(s)[: self.max_length - 1] for s in sentences]
        # Our limits count the source's EOS and the output's.
        limits = [min(len(p) + 1 + self.max_extra_length, self.max_length) for p in pieces]
        todo = [i for i, p in enumerate(pieces) if p]
        results = [[Hypothesis([], "", 0.0)] * n_best for _ in sentences]
        if not todo:
            return results
        options = {**self.options, "num_hypotheses": beam_size}
        if beam_size == 1:  # greedy scores are summed log-probabilities, as ours
            options["length_penalty"] = 0.0
        # CTranslate2 ranks by its own length penalty ("length"), or we rank ("gnmt").
        native = options.get("length_penalty", 0.0) != 0.0
        found = self.translator.translate_batch(
            [pieces[i] for i in todo],
            beam_size=beam_size,
            return_scores=True,
            max_decoding_length=max(limits[i] for i in todo),
            **options,
            **({"target_prefix": [self.target_prefix] * len(todo)} if self.target_prefix else {}),
        )
        found = [list(zip(result.hypotheses, result.scores, strict=True)) for result in found]
        cut = self._cut_at_limits(found, [pieces[i] for i in todo], [limits[i] for i in todo])
        for j, (i, hypotheses) in enumerate(zip(todo, found, strict=True)):
            ranked = {}  # tokens -> score; cut hypotheses may coincide
            for h, (tokens, score) in enumerate(hypotheses):
                if beam_size > 1 and (not native or (j, h) in cut):  # a summed logP
                    score /= self._length_penalty(len(tokens) + 1)  # |Y| counts EOS
                ranked[tuple(tokens)] = score
            best = sorted(ranked.items(), key=lambda h: -h[1])[:n_best]
            results[i] = [
                Hypothesis(self.rules.ids(list(tokens)), self.rules.join(list(tokens)), score)
                for tokens, score in best
            ]
        return results

    def _length_penalty(self, length: int) -> float:
        """lp(Y) of a hypothesis of `length` tokens, EOS included, by the ranking."""
        if self.ranking == "length":
            return float(length) ** self.length_penalty
        return ((5.0 + length) / 6.0) ** self.length_penalty

    def _cut_at_limits(self, found, pieces, limits) -> set:
        """Ends each hypothesis that ran past its sentence's limit as our search does: cut to
        `limit - 1` tokens, then EOS, scored by the model (`score_batch`: the cut tokens'
        log-probabilities and EOS's). A batch decodes to its longest sentence's limit, so a
        shorter sentence's hypotheses may run past their own; one that reached the limit
        without EOS is cut there too. In place: `found[j]` lists `(tokens, score)`; returns
        the `(j, h)` of the hypotheses cut (`found[j][h]`), whose scores are then summed
        log-probabilities."""
        cut = [
            (j, h, tokens[: limits[j] - 1])
            for j, hypotheses in enumerate(found)
            for h, (tokens, _) in enumerate(hypotheses)
            if len(tokens) >= limits[j]
        ]
        if not cut:
            return set()
        scored = self.translator.score_batch(
            [pieces[j] for j, _, _ in cut], [tokens for _, _, tokens in cut]
        )
        for (j, h, tokens), result in zip(cut, scored, strict=True):
            found[j][h] = (tokens, sum(result.log_probs))
        return {(j, h) for j, h, _ in cut}


class SavedModelTranslator:
    """Translates with a SavedModel's signatures (`serving_default`, or `n_best`)."""

    def __init__(self, version: Path):
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

        self._tf = tf
        with startup_logs.native_logs():  # its SentencePiece ops load their models
            self.loaded = tf.saved_model.load(str(version))
        serving = self.loaded.signatures.get("serving_default")
        inputs = serving.structured_input_signature[1] if serving is not None else {}
        if "text" not in inputs:
            raise ValueError(
                f"{version} is not a translation SavedModel of trainers.export: its "
                f"serving_default signature takes {sorted(inputs) or 'nothing'}, not `text`"
            )

    def translate(self, lines: list[bytes], *, n_best: int = 1) -> list[list[Hypothesis]]:
        tf = self._tf
        text = tf.constant(lines)
        if n_best == 1:
            result = self.loaded.signatures["serving_default"](text=text)
            return [
                [Hypothesis([], translation.decode("utf-8"), float(score))]
                for translation, score in zip(
                    result["translation"].numpy(), result["score"].numpy(), strict=True
                )
            ]
        if "n_best" not in self.loaded.signatures:
            raise ValueError("this SavedModel has no n_best signature; export it again")
        result = self.loaded.signatures["n_best"](text=text)
        translations, scores = result["translations"].numpy(), result["scores"].numpy()
        if n_best > translations.shape[1]:
            raise ValueError(
                f"--n-best {n_best}: the SavedModel keeps {translations.shape[1]} hypotheses "
                "(its beam size)"
            )
        return [
            [
                Hypothesis([], t.decode("utf-8"), float(s))
                for t, s in zip(row[:n_best], row_scores[:n_best], strict=True)
            ]
            for row, row_scores in zip(translations, scores, strict=True)
        ]


def batches(lines, size: int):
    """Lists of `size` lines (the last one shorter), each without its line end: lines end at
    "\\n" only (as the corpus readers'), a CRLF's "\\r" is dropped, a lone "\\r" stays in its
    line; a UTF-8 byte order mark before the first line is dropped (as the corpus readers
    drop it)."""
    batch = []
    for number, line in enumerate(lines):
        if number == 0:
            line = line.removeprefix("\ufeff")
        batch.append(line.removesuffix("\n").removesuffix("\r"))
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def not_utf8(name: str, number: int, line: bytes) -> str | None:
    """Why line `number` (1-based) of the input `name` is refused: the first byte that is
    not UTF-8, and the two ways on; None for a UTF-8 line."""
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as error:
        return (
            f"{name}: line {number} is not UTF-8 (byte 0x{line[error.start]:02x} at byte "
            f"{error.start + 1} of the line); convert the input to UTF-8 (e.g. iconv -f "
            "latin1 -t utf-8), or translate it with --errors replace (U+FFFD for bad bytes)"
        )
    return None


def first_bad_line(path: Path) -> str | None:
    """`not_utf8`'s reason for the first line of the file `path` that is not UTF-8, or None:
    read whole before the model loads. Lines end at "\\n", as `batches` cuts them."""
    with open(path, "rb") as file:
        for number, line in enumerate(file, start=1):
            if (problem := not_utf8(f"--input {path}", number, line)) is not None:
                return problem
    return None


class _Terminated(BaseException):
    """A SIGTERM, raised in the main thread so that the partial output is removed."""


def _raise_terminated(signum, frame):
    raise _Terminated


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.input and args.output and _same_file(args.input, args.output):
        print(f"error: --output {args.output} is the --input file", file=sys.stderr)
        return 2
    problem = args.output and _output_problem(args.output)  # before any work
    if problem:
        print(f"error: --output {args.output}: {problem}", file=sys.stderr)
        return 2
    # The paths, before the model loads: a mistyped one costs no TensorFlow start-up.
    if problem := flags.first_missing(("--model", args.model), ("--input", args.input)):
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        problem = args.input and args.errors == "strict" and first_bad_line(args.input)
    except OSError as error:  # a folder, an unreadable file
        problem = f"--input {args.input}: {error.strerror or error}"
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        if is_ctranslate2(args.model):
            translator = CTranslate2Translator(args.model, threads=args.threads)
        else:
            translator = SavedModelTranslator(resolve_version(args.model))
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.output:  # its missing folders, as trainers.evaluate makes them
        try:
            args.output.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            print(f"error: --output {args.output}: {error.strerror or error}", file=sys.stderr)
            return 2
    sentences, started = 0, time.perf_counter()
    name = f"--input {args.input}" if args.input else "stdin"
    replaced = []  # the numbers of the lines read with U+FFFD (--errors replace)
    # The output goes to a temporary file beside --output, renamed when every line is done:
    # a failure, a SIGTERM or Ctrl-C leaves an existing file as it was, and no partial one.
    partial = args.output and args.output.with_name(f".partial-{os.getpid()}-{args.output.name}")
    previous_handler = None
    if partial and threading.current_thread() is threading.main_thread():
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:  # not a caller's own handler
            previous_handler = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        with contextlib.ExitStack() as files:  # closes the files it opened, not stdin/stdout
            if args.input:
                source = files.enter_context(
                    open(args.input, encoding="utf-8", errors="surrogateescape", newline="\n")
                )
            else:
                source = sys.stdin
                source.reconfigure(encoding="utf-8", errors="surrogateescape", newline="\n")
            sink = (
                files.enter_context(open(partial, "w", encoding="utf-8"))
                if args.output
                else sys.stdout
            )
            for batch in batches(source, args.batch_size):
                # Bytes as read: undecodable input becomes U+FFFD (in the SavedModel's graph,
                # or here for CTranslate2).
                raw = [line.encode("utf-8", "surrogateescape") for line in batch]
                for number, line in enumerate(raw, start=sentences + 1):
                    if (problem := not_utf8(name, number, line)) is not None:
                        if args.errors == "strict":
                            raise ValueError(problem)
                        replaced.append(number)
                if isinstance(translator, CTranslate2Translator):
                    text = [line.decode("utf-8", "replace") for line in raw]
                    results = translator.translate(text, n_best=args.n_best)
                else:
                    results = translator.translate(raw, n_best=args.n_best)
                for index, hypotheses in enumerate(results, start=sentences):
                    sink.write(_format(index, hypotheses, args))
                sink.flush()
                sentences += len(batch)
        if partial:
            os.replace(partial, args.output)
    except _Terminated:
        partial.unlink(missing_ok=True)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)  # ends as an unhandled SIGTERM would
        return 128 + signal.SIGTERM
    except (OSError, ValueError) as error:
        if partial:
            partial.unlink(missing_ok=True)
        if isinstance(error, BrokenPipeError):  # the reader went away (`| head`)
            sys.stdout = None
            return 1
        written = getattr(error, "filename", None)
        if partial and written is not None and os.fspath(written) == os.fspath(partial):
            error = f"--output {args.output}: {error.strerror}"  # the user's name, not ours
        print(f"error: {error}", file=sys.stderr)
        return 2
    except BaseException:  # Ctrl-C...: no partial output left behind
        if partial:
            partial.unlink(missing_ok=True)
        raise
    finally:
        if previous_handler is not None:
            signal.signal(signal.SIGTERM, previous_handler)
    if replaced:
        print(
            f"warning: {name}: {len(replaced)} line{'s' * (len(replaced) != 1)} not UTF-8 "
            f"(the first: line {replaced[0]}), translated with U+FFFD for their bad bytes "
            "(--errors replace)",
            file=sys.stderr,
        )
    seconds = time.perf_counter() - started
    print(
        f"translated {sentences} sentence{'' if sentences == 1 else 's'} in {seconds:.1f} s "
        f"({sentences / max(seconds, 1e-9):.1f} sentences/s, after loading the model)",
        file=sys.stderr,
    )
    return 0


def _output_problem(output: Path) -> str | None:
    """Why --output cannot be written (a file in the way of its folders, a folder by its
    name), or None."""
    if output.is_dir():
        return "is a folder; name a file"
    return flags.creatable(output)


def _same_file(a: Path, b: Path) -> bool:
    """Whether paths `a` and `b` name one file (`b` need not exist)."""
    try:
        return a.resolve() == b.resolve() or (b.exists() and os.path.samefile(a, b))
    except OSError:
        return False


def _format(index: int, hypotheses: list[Hypothesis], args) -> str:
    if args.n_best > 1:
        return "".join(f"{index} ||| {h.text} ||| {h.score:.4f}\n" for h in hypotheses)
    best = hypotheses[0]
    return f"{best.score:.4f}\t{best.text}\n" if args.with_scores else best.text + "\n"


if __name__ == "__main__":
    sys.exit(main())
