"""The runtime of a CTranslate2 directory (`kt.export.export(..., format="ctranslate2")`): text
in, translations out, as the SavedModel gives them, with `ctranslate2` and `sentencepiece`
alone (no TensorFlow, no Keras).

`CTranslate2Translator` reads the directory's `manifest.json` (its vocabulary rules and
decoding settings) and does around `ctranslate2.Translator` what the SavedModel's graph does:
the source prefix put in front of each sentence, text cut into pieces (`PieceRules`: plain
SentencePiece, or an imported OPUS-MT or NLLB-200 model's rules), the length limits, the
target prefix forced, the hypotheses ranked and turned back into text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from keras_transformer.core import rules
from keras_transformer.serving.common import (
    LANGUAGE_CODE,
    ExportedVocabulary,
    Hypothesis,
    check_prefixes,
    lines_of,
    prefixed,
    read_manifest,
)
from keras_transformer.serving.pieces import PieceRules

MANIFEST = "manifest.json"
MODEL_FILE = "model.bin"  # CTranslate2's weights, beside the manifest
FORMAT = "keras-transformer/ctranslate2"  # manifest.json's "format"


def is_ctranslate2(path) -> bool:
    """Whether `path` is a CTranslate2 directory written by `kt.export.export`: CTranslate2's
    model.bin beside a manifest.json of this format, or without one (which
    `CTranslate2Translator` refuses, naming it). ValueError naming the manifest where that
    is damaged or says no format (`read_manifest`)."""
    path = Path(path)
    manifest = path / MANIFEST
    if not (path / MODEL_FILE).exists():
        return False
    return not manifest.exists() or read_manifest(manifest, "format")["format"] == FORMAT


def vocabularies(directory) -> tuple[ExportedVocabulary, ExportedVocabulary]:
    """The source and target vocabularies of a CTranslate2 directory, from CTranslate2's
    lists of its pieces (`source_vocabulary.json` and `target_vocabulary.json`, or
    `shared_vocabulary.json`) and the manifest's special tokens (NLLB-200's language codes),
    for the prefix checks (`check_prefixes`)."""
    directory = Path(directory)
    manifest = read_manifest(directory / MANIFEST, "vocabulary")
    special = (manifest["vocabulary"].get("pieces") or {}).get("special_tokens", {})
    codes = [token for token in special if re.fullmatch(LANGUAGE_CODE, token)]
    found = []
    for side in ("source", "target"):
        files = [directory / f"{name}_vocabulary.json" for name in (side, "shared")]
        path = next((p for p in files if p.exists()), None)
        if path is None:
            raise FileNotFoundError(
                f"{directory}: no {side}_vocabulary.json nor shared_vocabulary.json"
            )
        found.append(ExportedVocabulary(json.loads(path.read_text(encoding="utf-8")), codes))
    return found[0], found[1]


class CTranslate2Translator:
    """Translates with a CTranslate2 directory as the SavedModel does, with CTranslate2 and
    SentencePiece alone.

    What the SavedModel's graph does is done here around `ctranslate2.Translator`: the
    source prefix put in front of each sentence that does not start with a language code
    (`DecodingSettings.source_prefix`, by `with_source_prefix`), inputs cut to
    `max_length - 1` pieces (then EOS, which CTranslate2 adds), an empty input answered
    with an empty translation, each sentence's output limited to its source length (EOS
    included) + `max_extra_length` tokens within `max_length`, a hypothesis that runs past
    its limit cut there and ended by EOS, scored as ours (`score_batch`), padding and the
    start token never generated, the target prefix forced. Beam search ranks as the
    manifest's `decoding.ranking` says (`DecodingSettings.ranking`; "gnmt" in a manifest
    written before it). With "length" it is CTranslate2's own, logP / |Y| ** alpha (its
    `length_penalty`), and its beam search is ours with `finish_rule="fairseq"` and
    `stopping="k_finished"`: the same ids as a SavedModel exported with those settings, but
    at near ties of the two engines' logits. With "gnmt", which CTranslate2 lacks, it
    returns its `beam_size` finished hypotheses with their summed log-probabilities (length
    penalty 0), ranked here by logP / ((5 + |Y|) / 6) ** alpha (Wu et al., 2016); |Y|
    counts EOS in both. CTranslate2's own stopping rule then decides which hypotheses
    finish, so the best may differ from our beam search's on some sentences
    (docs/guides/serving.md measures how often). The other arguments it gets are the
    manifest's `decoding.ctranslate2_options`.

    Args:
        directory: str or path. The CTranslate2 directory.
        threads: int. `intra_threads` of the translator; 0 lets CTranslate2 choose.
            Defaults to 0.
        compute_type: str. CTranslate2's compute type ("default": as saved).
        inter_threads: int. Batches translated at once, each by `threads` threads: a
            translator shared by N serving threads wants N here, else their requests queue
            behind one another (CTranslate2's `inter_threads`). Defaults to 1.
        source_prefix: str or None. Text put in front of each source (NLLB-200's source
            language code, "eng_Latn"; a multilingual OPUS-MT model's ">>spa<<"), over the
            manifest's `decoding.source_prefix`. None keeps the manifest's (none in a
            manifest written before the setting). Defaults to None.
        target_prefix: str or None. Text every translation starts with (NLLB-200's target
            language code), over the manifest's `decoding.target_prefix`. None keeps the
            manifest's. Defaults to None.
        prefix_names: tuple of two str. What a refusal of the two prefixes above calls
            them (a program's flags). Defaults to ("source_prefix", "target_prefix").

    Raises:
        FileNotFoundError: no CTranslate2 model in `directory`, or no `manifest.json`
            beside its model.bin (naming it).
        ValueError: a manifest without its `vocabulary` or `decoding` entry (or damaged),
            naming it; a prefix names a language the vocabulary lacks, or the manifest's
            ranking is unknown.
    """

    def __init__(
        self,
        directory,
        *,
        threads: int = 0,
        compute_type: str = "default",
        inter_threads: int = 1,
        source_prefix: str | None = None,
        target_prefix: str | None = None,
        prefix_names: tuple[str, str] = ("source_prefix", "target_prefix"),
    ):
        import sentencepiece

        directory = Path(directory)
        if (directory / MODEL_FILE).exists() and not (directory / MANIFEST).exists():
            raise FileNotFoundError(
                f"{directory}: no {MANIFEST} beside {MODEL_FILE} (the export's vocabulary and "
                f"decoding settings): keep the {MANIFEST} that trainers.export wrote in it"
            )
        if not is_ctranslate2(directory):
            problem = "no such folder" if not directory.is_dir() else "no CTranslate2 model in it"
            raise FileNotFoundError(
                f"{directory}: {problem}; CTranslate2Translator takes the directory that "
                "trainers.export --format ctranslate2 wrote (model.bin and manifest.json)"
            )
        self.threads, self.compute_type, self.inter_threads = threads, compute_type, inter_threads
        self.prefix_names = prefix_names
        self.manifest = read_manifest(directory / MANIFEST, "vocabulary", "decoding")
        vocabulary, decoding = self.manifest["vocabulary"], self.manifest["decoding"]
        if "max_length" not in decoding:  # the output cap every CTranslate2 export records
            raise ValueError(f"{directory / MANIFEST}: no decoding.max_length in it")
        self.source_vocabulary, self.target_vocabulary = vocabularies(directory)
        self.languages = {
            "source": list(self.source_vocabulary.language_codes),
            "target": list(self.target_vocabulary.language_codes),
        }
        check_prefixes(
            self.source_vocabulary,
            self.target_vocabulary,
            source_prefix,
            target_prefix,
            names=prefix_names,
        )
        self.source = sentencepiece.SentencePieceProcessor(
            model_file=str(directory / vocabulary["source"])
        )
        self.target = sentencepiece.SentencePieceProcessor(
            model_file=str(directory / vocabulary["target"])
        )
        rules = vocabulary.get("pieces")
        target_vocabulary = self.target_vocabulary.pieces if rules else ()
        self.rules = PieceRules(self.source, self.target, rules, target_vocabulary)
        self.beam_size = decoding["beam_size"]
        self.length_penalty = decoding["length_penalty"]
        self.max_extra_length = decoding["max_extra_length"]
        self.max_length = decoding["max_length"]
        self.ranking = decoding.get("ranking", "gnmt")
        if self.ranking not in ("gnmt", "length"):
            raise ValueError(
                f"{directory / MANIFEST}: decoding.ranking={self.ranking!r} is not "
                "'gnmt' or 'length'"
            )
        # translate_batch's arguments: a manifest written before they were recorded, today's.
        self.options = decoding.get("ctranslate2_options") or {
            "length_penalty": 0.0,
            "suppress_sequences": [["<pad>"], ["<s>"]],
        }
        self.source_prefix = _given(source_prefix, decoding.get("source_prefix"))
        # NLLB's target language: its pieces forced first, as the SavedModel forces them.
        self.target_prefix = _given(target_prefix, decoding.get("target_prefix"))
        self._target_pieces = self._prefix_pieces(self.target_prefix)

        import ctranslate2

        self.translator = ctranslate2.Translator(
            str(directory),
            device="cpu",
            compute_type=compute_type,
            intra_threads=threads,
            inter_threads=inter_threads,
        )

    def translate(
        self,
        sentences: Sequence[str | bytes],
        *,
        beam_size: int | None = None,
        n_best: int = 1,
        source_prefix: str | None = None,
        target_prefix: str | None = None,
    ) -> list[list[Hypothesis]]:
        """The `n_best` best hypotheses of each sentence, best first. Fewer when hypotheses
        cut at the sentence's length limit become the same.

        Args:
            sentences: sequence of str or bytes. Bytes are read as UTF-8, a byte that is
                not as U+FFFD (as the SavedModel reads them).
            beam_size: int or None. 1 is greedy search; None takes the export's.
            n_best: int. Hypotheses returned per sentence, from 1 to the beam size.
                Defaults to 1.
            source_prefix: str or None. This call's source prefix, over the translator's
                (`with_source_prefix`: a sentence that starts with a language code keeps
                its own). None keeps the translator's. Defaults to None.
            target_prefix: str or None. This call's target prefix, over the translator's.
                Defaults to None.

        Returns:
            A list of `Hypothesis` lists, one a sentence.
        """
        sentences = lines_of(sentences)
        beam_size = self.beam_size if beam_size is None else beam_size
        if isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 1:
            raise ValueError(f"beam_size={beam_size!r} must be an integer >= 1")
        if problem := self.n_best_problem(n_best, beam_size=beam_size):
            raise ValueError(f"n_best={n_best}: {problem}")
        check_prefixes(self.source_vocabulary, self.target_vocabulary, source_prefix, target_prefix)
        source_prefix = _given(source_prefix, self.source_prefix)
        forced = (
            self._target_pieces if target_prefix is None else self._prefix_pieces(target_prefix)
        )
        texts = [s.decode("utf-8", "replace") if isinstance(s, bytes) else s for s in sentences]
        pieces, limits, todo = self._sources(texts, source_prefix)
        results = [[Hypothesis([], "", 0.0)] * n_best for _ in texts]
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
            **({"target_prefix": [forced] * len(todo)} if forced else {}),
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

    def _sources(self, texts: list[str], source_prefix: str | None) -> tuple:
        """`(pieces, limits, todo)`: each text's pieces (the source prefix first, cut to
        `core.rules.kept_source_tokens`, before the EOS that CTranslate2 adds), its output
        limit (`core.rules.output_limit`, counting the source's EOS and the output's), and
        the indices of those with something to translate (`core.rules.nothing_to_translate`;
        a blank text has nothing, whatever its pieces: NLLB's tokenizer keeps trailing
        whitespace as a "▁")."""
        kept = rules.kept_source_tokens(self.max_length)
        pieces = [self.rules.split(prefixed(s, source_prefix))[:kept] for s in texts]
        limits = [
            rules.output_limit(len(p) + 1, self.max_extra_length, self.max_length) for p in pieces
        ]
        todo = [
            i
            for i, (t, p) in enumerate(zip(texts, pieces, strict=True))
            if not rules.nothing_to_translate(len(p) + 1) and not rules.is_blank(t)
        ]
        return pieces, limits, todo

    def n_best_problem(self, n_best: int, *, beam_size: int | None = None) -> str | None:
        """Why `translate` cannot give `n_best` hypotheses a sentence with `beam_size`
        (None: the export's), or None when it can."""
        beam_size = self.beam_size if beam_size is None else beam_size
        if not 1 <= n_best <= beam_size:
            return f"must be between 1 and the beam size {beam_size}"
        return None

    def _prefix_pieces(self, prefix: str | None) -> list[str] | None:
        """The target prefix's pieces, which CTranslate2 forces; None for no prefix."""
        if prefix is None:
            return None
        return rules.target_prefix_ids(prefix, self.rules.split)

    def _length_penalty(self, length: int) -> float:
        """lp(Y) of a hypothesis of `length` tokens, EOS included, by the ranking."""
        return rules.length_penalty(float(length), self.length_penalty, self.ranking)

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


def _given(value, default):
    """`value`, or `default` where it is None (an override left unset)."""
    return default if value is None else value


__all__ = [
    "FORMAT",
    "MANIFEST",
    "MODEL_FILE",
    "CTranslate2Translator",
    "is_ctranslate2",
    "vocabularies",
]
