"""Text -> pieces and pieces -> text for a CTranslate2 directory, in plain Python: what the
export's in-graph tokenizer does (plain SentencePiece, an imported OPUS-MT model's piece
vocabulary, NLLB-200's and M2M100's rules), by the rules its manifest records
(`kt.export.ctranslate2`'s `vocabulary.pieces`).
"""

from __future__ import annotations

import re

WORD_BOUNDARY = "\u2581"  # SentencePiece's mark of a word's start
# What NLLB's tokenizer reads as whitespace (kt.tokenizers.nllb's WHITESPACE: RE2's \s,
# vertical tab, and Unicode's separators, category Z).
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
    `keras_transformer.tokenizers.PieceVocabularyTokenizer`'s, which its SavedModel runs in
    the graph: special tokens split out wherever they are, a leading prefix token (`>>xx<<`)
    kept whole, SentencePiece on the rest; pieces back to text by joining them, the special
    ones left out, word marks read as spaces. NLLB-200's and M2M100's add their rules about
    whitespace (`keras_transformer.tokenizers.NllbTokenizer`).

    Args:
        source: `sentencepiece.SentencePieceProcessor` of the source text.
        target: `sentencepiece.SentencePieceProcessor` of the target text.
        rules: dict or None. The manifest's `vocabulary.pieces`; None for a plain
            SentencePiece vocabulary.
        target_vocabulary: sequence of str. The target pieces by id (CTranslate2's list),
            for their ids under `rules`. Defaults to ().
    """

    def __init__(self, source, target, rules: dict | None, target_vocabulary=()):
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
            # NLLB's (kt.tokenizers.nllb): whitespace taken by special tokens, a "▁" for a
            # segment's trailing whitespace, special tokens left out when decoding.
            space = f"[{WHITESPACE}]"
            self.strip_res = [
                re.compile(f"{space}+({re.escape(t)})") for t in rules.get("lstrip_tokens", ())
            ] + [re.compile(f"({re.escape(t)}){space}+") for t in rules.get("rstrip_tokens", ())]
            self.trailing_piece = rules.get("trailing_whitespace_piece", False)
            skipped = rules.get("decode_skips_special_tokens", False)
            self.skipped = set(SPECIAL_PIECES) | (set(self.special.values()) if skipped else set())

    def split(self, text: str) -> list[str]:
        """The pieces of `text`, as the export's in-graph tokenizer cuts it."""
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
        """The text of target pieces, as the export's in-graph tokenizer decodes them."""
        if not self.rules:
            return self.target.decode([self.target.piece_to_id(p) for p in pieces])
        kept = "".join(p for p in pieces if p not in self.skipped).replace(WORD_BOUNDARY, " ")
        # NLLB's decoding drops the first word's boundary only; OPUS-MT's strips the text.
        return kept.removeprefix(" ") if self.trailing_piece else kept.strip()


__all__ = ["PieceRules", "SPECIAL_PIECES", "WHITESPACE", "WHITESPACE_CHARACTERS", "WORD_BOUNDARY"]
