"""M2M100's own tokenizer files (`facebook/m2m100_418M`, `facebook/m2m100_1.2B`: transformers'
`M2M100Tokenizer`), read into the `Vocabulary` of an M2M100 checkpoint. The weights are
NLLB-200's architecture (`kt.pretrained.m2m100` reads them); only the tokenizer differs.

- `vocab.json` numbers the pieces (fairseq's dictionary: <s> 0, <pad> 1, </s> 2, <unk> 3, then
  the pieces in the dictionary's order, not SentencePiece's); `sentencepiece.bpe.model` cuts
  the text, and a piece that vocab.json lacks is <unk>.
- The language codes are `__xx__` tokens with the ids after vocab.json's, in transformers'
  order (`LANGUAGE_CODES`, as `tokenizer_config.json`'s `language_codes` names the list):
  `__en__` is `len(vocab) + 18` for m2m100's 100 languages. The 8 rows after them (the
  "made-up words") no token reaches.
- The published checkpoints' `special_tokens_map.json` lists the codes as special tokens, so
  transformers splits a code out of the text wherever it is, and decoding leaves the codes out;
  so does `kt.tokenizers.M2M100Tokenizer`. Unlike NLLB's tokenizer, trailing whitespace adds
  no piece (each segment is SentencePiece's alone), and decoding strips the text.
"""

from __future__ import annotations

from pathlib import Path

from keras_transformer.pretrained import bart_checkpoint
from keras_transformer.pretrained.nllb_vocab import (
    FAIRSEQ_SPECIALS,
    SENTENCEPIECE,
    Vocabulary,
    added_tokens,
    sentencepiece_model,
)
from keras_transformer.tokenizers.m2m100 import M2M100Tokenizer

VOCAB = "vocab.json"
TOKENIZER_CLASSES = ("M2M100Tokenizer",)
# transformers' FAIRSEQ_LANGUAGE_CODES: the codes of each list, in the order of their ids.
LANGUAGE_CODES = {
    "m2m100": (
        "af am ar ast az ba be bg bn br bs ca ceb cs cy da de el en es et fa ff fi fr fy ga gd "
        "gl gu ha he hi hr ht hu hy id ig ilo is it ja jv ka kk km kn ko lb lg ln lo lt lv mg "
        "mk ml mn mr ms my ne nl no ns oc or pa pl ps pt ro ru sd si sk sl so sq sr ss su sv sw "
        "ta th tl tn tr uk ur uz vi wo xh yi yo zh zu"
    ).split(),
    "wmt21": "en ha is ja cs ru zh de".split(),
}


def read_vocabulary(path: Path, tokenizer_config: dict, rows: int, error) -> Vocabulary:
    """The tokens of the checkpoint's `rows` embedding rows: vocab.json's, the language codes
    after them, then rows no token reaches; `error` names what does not fit."""
    proto, _ = sentencepiece_model(path / SENTENCEPIECE, error)
    if not (path / VOCAB).exists():
        raise error(f"{path}: missing {VOCAB} (M2M100Tokenizer's numbering of the pieces)")
    vocab = bart_checkpoint.read_json(path / VOCAB, error)
    names = _names(vocab, path / VOCAB, error)
    kind = tokenizer_config.get("language_codes", "m2m100")
    if kind not in LANGUAGE_CODES:
        raise error(
            f"{path / 'tokenizer_config.json'}: language_codes={kind!r} is not one of "
            f"M2M100Tokenizer's lists ({', '.join(LANGUAGE_CODES)})"
        )
    codes = [f"__{code}__" for code in LANGUAGE_CODES[kind]]
    added = {token: (i, False, False) for i, token in enumerate(FAIRSEQ_SPECIALS)}
    added.update({code: (len(names) + i, False, False) for i, code in enumerate(codes)})
    _check_saved_ids(path, tokenizer_config, added, error)
    if len(names) + len(codes) > rows:
        raise error(
            f"{path}: the tokenizer has ids up to {len(names) + len(codes) - 1} ({VOCAB}'s "
            f"{len(names)} and {len(codes)} language codes), but config.json's "
            f"vocab_size={rows} rows"
        )
    names += codes
    names += [f"<extra_row_{i}>" for i in range(len(names), rows)]
    return Vocabulary(
        proto=proto,
        names=names,
        added={token: i for token, (i, _, _) in added.items()},
        language_codes=codes,
        lstrip=[token for token, (_, lstrip, _) in added.items() if lstrip],
        rstrip=[token for token, (_, _, rstrip) in added.items() if rstrip],
        tokenizer_class=M2M100Tokenizer,
    )


def _names(vocab: dict, where: Path, error) -> list[str]:
    """vocab.json's tokens by id: its ids must be 0..n-1, fairseq's four special tokens
    first."""
    by_id = {}
    for token, i in vocab.items():
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(vocab):
            raise error(f"{where}: {token!r} has the id {i!r}; the ids must be 0..{len(vocab) - 1}")
        if i in by_id:
            raise error(f"{where}: {by_id[i]!r} and {token!r} have the same id {i}")
        by_id[i] = token
    for i, token in enumerate(FAIRSEQ_SPECIALS):
        if by_id.get(i) != token:
            raise error(
                f"{where}: id {i} is {by_id.get(i)!r}, not {token!r} (fairseq's dictionary "
                f"starts with {', '.join(FAIRSEQ_SPECIALS)})"
            )
    return [by_id[i] for i in range(len(vocab))]


def _check_saved_ids(path: Path, tokenizer_config: dict, added: dict, error) -> None:
    """Where tokenizer_config.json lists the added tokens (`added_tokens_decoder`, as
    transformers 4.34 and later save them), they must have the ids of transformers' rule,
    and their lstrip/rstrip apply."""
    decoder = tokenizer_config.get("added_tokens_decoder") or {}
    entries = [{**value, "id": key} for key, value in decoder.items()]
    saved = added_tokens(entries, path / "tokenizer_config.json", error)
    for token, (i, lstrip, rstrip) in saved.items():
        if token in added and added[token][0] != i:
            raise error(
                f"{path / 'tokenizer_config.json'}: {token!r} has the id {i}, but "
                f"M2M100Tokenizer gives it {added[token][0]} ({VOCAB}'s size + its place)"
            )
        if token in added:
            added[token] = (i, lstrip, rstrip)


__all__ = ["LANGUAGE_CODES", "read_vocabulary"]
