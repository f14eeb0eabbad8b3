"""NLLB-200 (and other M2M100) checkpoints in Hugging Face transformers' format, read into this
library's `Transformer` and an in-graph `NllbTokenizer` (STYLE 20: the foreign names and
layouts live here alone).

A checkpoint is a directory as `huggingface-cli download facebook/nllb-200-distilled-600M
--local-dir PATH` leaves it: `config.json` (`model_type: m2m_100`), `generation_config.json`,
`sentencepiece.bpe.model` (the SentencePiece model that cuts the text), `tokenizer.json` and
`tokenizer_config.json` (the ids of the special tokens and language codes) and the weights,
`model.safetensors` (or shards listed in `model.safetensors.index.json`), read without torch.

The architecture is the paper's with general options of `TransformerConfig`: pre-norm with a
final LayerNorm on each stack (`norm_first`), LayerNorm's epsilon 1e-5, relu, embeddings
scaled by sqrt(d_model) and shared by both stacks and the output projection, and fairseq's
sinusoid: sines then cosines (`sinusoid_layout="concatenated"`), the frequencies
1 / 10000^(i / (d_model / 2 - 1)) (`sinusoid_frequencies="fairseq"`), positions counted from
the padding id + 1 (`position_offset`, 2 for NLLB).

Ids. fairseq numbers a vocabulary <s> 0, <pad> 1, </s> 2, <unk> 3, then the SentencePiece
model's pieces (its id + 1: "fairseq's offset"), then the language codes and <mask> (ids from
the tokenizer files), then rows no token reaches (nllb-200 has 256206 rows, 256204 ids). The
decoder starts with </s> (`decoder_start_token_id`). This library uses pad 0, unk 1, bos 2,
eos 3 everywhere, so the import permutes the vocabulary once, as the Marian import does: our id
i is the checkpoint's `order[i]`, with our <s> (bos, the decoder start) a second copy of the
decoder start's row and the other rows in the checkpoint's order. The copy takes an output
bias of `EXCLUDED`, which leaves it out of the softmax, so the distribution over the other ids
is transformers' own. The checkpoint's own "<s>" keeps its row under the name "<s>@0" (our
"<s>" is the decoder start); the text "<s>" is still that token.

Text. The source text starts with its language code, as transformers' `src_lang` puts it:
`"eng_Latn Hello"` has the ids of `NllbTokenizer(src_lang="eng_Latn")("Hello")` (less the EOS
the searches add). The target language is a target prefix: `kt.decoding.greedy_search(...,
target_prefix=[vocabularies.target.language_id("spa_Latn")])`, as transformers'
`forced_bos_token_id`; both exports take it per request.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from keras_transformer.config import TransformerConfig
from keras_transformer.model import zeros_initialized
from keras_transformer.pretrained.checkpoint import bart_sizes
from keras_transformer.pretrained.checkpoint import number as checkpoint_number
from keras_transformer.text import BOS_ID
from keras_transformer.tokenizers.nllb import NllbTokenizer
from keras_transformer.tokenizers.pieces import SPECIAL_PIECES

MODEL_TYPE = "m2m_100"
SENTENCEPIECE = "sentencepiece.bpe.model"
WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
# fairseq's first four ids, before the SentencePiece model's pieces (its id + FAIRSEQ_OFFSET).
FAIRSEQ_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")
FAIRSEQ_OFFSET = 1
# An output bias that no logit of a trained model comes near (the Marian import's): our extra
# copy of the decoder start's row gets probability 0 in float32 and float16.
EXCLUDED = -1e4
TOKENIZER_CLASSES = ("NllbTokenizer", "NllbTokenizerFast")
# Config values our model computes as transformers' M2M100 does; any other value is refused.
_EXPECTED = {"model_type": MODEL_TYPE, "scale_embedding": True, "tie_word_embeddings": True}
# transformers' `M2M100Config` defaults: what a key config.json leaves out means there.
_DEFAULTS = {
    "vocab_size": 128112,
    "max_position_embeddings": 1024,
    "encoder_layers": 12,
    "encoder_ffn_dim": 4096,
    "encoder_attention_heads": 16,
    "decoder_layers": 12,
    "decoder_ffn_dim": 4096,
    "decoder_attention_heads": 16,
    "activation_function": "relu",
    "d_model": 1024,
    "dropout": 0.1,
    "attention_dropout": 0.1,
    "activation_dropout": 0.0,
    "pad_token_id": 1,
    "eos_token_id": 2,
    "decoder_start_token_id": 2,
}
# transformers' activation names -> Keras's (the same functions).
_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "silu", "silu": "silu"}


class M2M100Error(ValueError):
    """A directory that is not an importable NLLB/M2M100 checkpoint; the message says why."""


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """An NLLB/M2M100 checkpoint directory, read and checked before anything is built.

    Attributes:
        path: the directory.
        config: config.json.
        generation: generation_config.json ({} when absent).
        weights: name -> array, in transformers' PyTorch names and layouts.
        vocabulary: the checkpoint's vocabulary (`Vocabulary`).
    """

    path: Path
    config: dict
    generation: dict
    weights: dict
    vocabulary: Vocabulary


@dataclasses.dataclass(frozen=True)
class Vocabulary:
    """A checkpoint's tokens in its own ids.

    Attributes:
        proto: the SentencePiece model's bytes.
        names: the token of each embedding row (`names[i]` is row i).
        added: the special tokens found in the text (language codes, <mask>...): name -> id.
        language_codes: the language codes, in the tokenizer's order.
        lstrip: the added tokens that take the whitespace before them.
        rstrip: those that take the whitespace after them.
    """

    proto: bytes
    names: list
    added: dict
    language_codes: list
    lstrip: list
    rstrip: list


def number(settings: dict, key: str, kind=int, where: str = "config.json", default=None):
    """`checkpoint.number`, refusing with `M2M100Error`."""
    return checkpoint_number(settings, key, kind, where, default, error=M2M100Error)


def special_ids(config: dict, where: str = "config.json") -> dict:
    """The checkpoint's pad, eos and decoder start ids (config.json, or M2M100Config's)."""
    ids = {key: number(config, key, int, where, _DEFAULTS[key]) for key in _SPECIAL_KEYS}
    if ids["pad_token_id"] == ids["eos_token_id"]:
        raise M2M100Error(f"{where}: pad_token_id and eos_token_id are both {ids['pad_token_id']}")
    return ids


_SPECIAL_KEYS = ("pad_token_id", "eos_token_id", "decoder_start_token_id")


def transformer_config(config: dict, where: str = "config.json") -> TransformerConfig:
    """The `TransformerConfig` of an M2M100 config.json (the vocabulary in our ids: one more
    row than the checkpoint's, our decoder start's). A key it leaves out takes transformers'
    `M2M100Config` default."""
    for key, expected in _EXPECTED.items():
        if key in config and config[key] != expected:
            raise M2M100Error(
                f"{where}: {key}={config[key]!r} is not supported (expected {expected!r}): "
                "the weights would be laid out for another architecture"
            )

    def get(key, kind=int):
        return number(config, key, kind, where, _DEFAULTS[key])

    for stack_key in ("attention_heads", "ffn_dim"):
        encoder, decoder = get(f"encoder_{stack_key}"), get(f"decoder_{stack_key}")
        if encoder != decoder:
            raise M2M100Error(
                f"{where}: encoder_{stack_key}={encoder} differs from decoder_{stack_key}="
                f"{decoder}; one value for both stacks is supported"
            )
    activation = config.get("activation_function", _DEFAULTS["activation_function"])
    if activation not in _ACTIVATIONS:
        raise M2M100Error(
            f"{where}: activation_function={activation!r} is not supported "
            f"(supported: {', '.join(sorted(_ACTIVATIONS))})"
        )
    pad = special_ids(config, where)["pad_token_id"]
    try:
        return TransformerConfig(
            vocab_size=get("vocab_size") + 1,
            **bart_sizes(get),
            norm_first=True,
            activation=_ACTIVATIONS[activation],
            positional="sinusoidal",
            sinusoid_layout="concatenated",
            sinusoid_frequencies="fairseq",
            position_offset=pad + 1,
            output_bias=True,
            layer_norm_epsilon=1e-5,
        )
    except ValueError as error:
        raise M2M100Error(f"{where}: {error}") from None


def read_json(path: Path) -> dict:
    """A JSON object from `path`; `M2M100Error` when it is missing or not one."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise M2M100Error(f"{path}: missing") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise M2M100Error(f"{path}: not valid JSON ({error})") from None
    if not isinstance(value, dict):
        raise M2M100Error(f"{path}: expected a JSON object")
    return value


def read_checkpoint(path) -> Checkpoint:
    """Reads and checks a checkpoint directory: config, tokenizer files and weights, before
    any model is built; `M2M100Error` names what is missing or wrong."""
    path = Path(path)
    if not path.is_dir():
        raise M2M100Error(f"{path}: not a directory (expected an NLLB/M2M100 checkpoint)")
    config = read_json(path / "config.json")
    if config.get("model_type") != MODEL_TYPE:
        raise M2M100Error(
            f"{path / 'config.json'}: model_type={config.get('model_type')!r}; this reader "
            f"imports {MODEL_TYPE!r} checkpoints (NLLB-200)"
        )
    transformer_config(config, str(path / "config.json"))  # every key checked first
    vocabulary = read_vocabulary(path, config)
    weights = _read_weights(path)
    generation = {}
    if (path / "generation_config.json").exists():
        generation = read_json(path / "generation_config.json")
    vocabulary_order(config, len(vocabulary.names), str(path / "config.json"))
    checkpoint = Checkpoint(path, config, generation, weights, vocabulary)
    _check_weights(checkpoint)
    return checkpoint


def read_vocabulary(path: Path, config: dict) -> Vocabulary:
    """The tokens of the checkpoint's rows, from its SentencePiece model (with fairseq's
    offset) and its added tokens (tokenizer.json, else tokenizer_config.json's
    `added_tokens_decoder`)."""
    import sentencepiece

    tokenizer_config = {}
    if (path / "tokenizer_config.json").exists():
        tokenizer_config = read_json(path / "tokenizer_config.json")
    tokenizer_class = tokenizer_config.get("tokenizer_class", config.get("tokenizer_class"))
    if tokenizer_class is not None and tokenizer_class not in TOKENIZER_CLASSES:
        raise M2M100Error(
            f"{path}: tokenizer_class={tokenizer_class!r} is not supported; the importer reads "
            f"NLLB-200's tokenizer ({', '.join(TOKENIZER_CLASSES)})"
        )
    if not (path / SENTENCEPIECE).exists():
        raise M2M100Error(f"{path}: missing {SENTENCEPIECE} (NLLB's SentencePiece model)")
    proto = (path / SENTENCEPIECE).read_bytes()
    try:
        processor = sentencepiece.SentencePieceProcessor(model_proto=proto)
    except (RuntimeError, OSError) as error:
        raise M2M100Error(f"{path / SENTENCEPIECE}: not a SentencePiece model ({error})") from None
    size = processor.get_piece_size()
    if not (
        size > 3 and processor.is_unknown(0) and processor.is_control(1) and processor.is_control(2)
    ):
        raise M2M100Error(
            f"{path / SENTENCEPIECE}: ids 0, 1, 2 must be <unk>, <s>, </s>, as fairseq's "
            "offset assumes"
        )
    added = _added_tokens(path, tokenizer_config)
    rows = number(config, "vocab_size", int, "config.json", _DEFAULTS["vocab_size"])
    names = [*FAIRSEQ_SPECIALS]
    names += [processor.id_to_piece(i) for i in range(3, size)]  # ids 4 .. size
    for token, (i, _, _) in added.items():
        if i < len(FAIRSEQ_SPECIALS):
            if names[i] != token:
                raise M2M100Error(
                    f"{path}: the tokenizer gives {token!r} the id {i}, fairseq's {names[i]!r}"
                )
        elif i < len(names):
            raise M2M100Error(
                f"{path}: the tokenizer gives {token!r} the id {i}, which is the SentencePiece "
                f"piece {names[i]!r} (fairseq's offset: piece j is id j + {FAIRSEQ_OFFSET})"
            )
    ids = [i for i, _, _ in added.values()]
    top = max([len(names) - 1, *ids])
    if top >= rows:
        raise M2M100Error(
            f"{path}: the tokenizer has ids up to {top}, but config.json's vocab_size={rows} rows"
        )
    by_id = {i: token for token, (i, _, _) in added.items()}
    names += [by_id.get(i, f"<extra_row_{i}>") for i in range(len(names), rows)]
    _check_tokenizer_vocab(path, names)
    codes = tokenizer_config.get("extra_special_tokens") or tokenizer_config.get(
        "additional_special_tokens"
    )
    if not isinstance(codes, list) or not all(isinstance(code, str) for code in codes):
        mask = tokenizer_config.get("mask_token", "<mask>")
        codes = [t for t in added if t not in FAIRSEQ_SPECIALS and t != mask]
    missing = [code for code in codes if code not in added]
    if missing:
        raise M2M100Error(f"{path}: the language code {missing[0]!r} has no id in the tokenizer")
    return Vocabulary(
        proto=proto,
        names=names,
        added={token: i for token, (i, _, _) in added.items()},
        language_codes=list(codes),
        lstrip=[token for token, (_, lstrip, _) in added.items() if lstrip],
        rstrip=[token for token, (_, _, rstrip) in added.items() if rstrip],
    )


def _added_tokens(path: Path, tokenizer_config: dict) -> dict:
    """token -> (id, lstrip, rstrip) of the tokenizer's added tokens."""
    entries = []
    if (path / "tokenizer.json").exists():
        entries = read_json(path / "tokenizer.json").get("added_tokens") or []
        where = path / "tokenizer.json"
    if not entries:
        decoder = tokenizer_config.get("added_tokens_decoder") or {}
        entries = [{**value, "id": key} for key, value in decoder.items()]
        where = path / "tokenizer_config.json"
    if not entries:
        raise M2M100Error(
            f"{path}: no added tokens (the language codes' ids): tokenizer.json or "
            "tokenizer_config.json with added_tokens_decoder is needed"
        )
    added = {}
    for entry in entries:
        try:
            token, i = str(entry["content"]), int(entry["id"])
        except (KeyError, TypeError, ValueError):
            raise M2M100Error(f"{where}: an added token without content and id: {entry}") from None
        added[token] = (i, bool(entry.get("lstrip")), bool(entry.get("rstrip")))
    return added


def _check_tokenizer_vocab(path: Path, names: list) -> None:
    """tokenizer.json's own numbering of the pieces, where it has one, must be fairseq's
    offset over the SentencePiece model: another numbering would garble every id."""
    if not (path / "tokenizer.json").exists():
        return
    vocab = (read_json(path / "tokenizer.json").get("model") or {}).get("vocab")
    if not isinstance(vocab, dict):
        return
    for token, i in vocab.items():
        if not isinstance(i, int) or not 0 <= i < len(names) or names[i] != token:
            found = names[i] if isinstance(i, int) and 0 <= i < len(names) else None
            raise M2M100Error(
                f"{path / 'tokenizer.json'}: {token!r} has the id {i}, but {SENTENCEPIECE} with "
                f"fairseq's offset gives that id to {found!r}"
            )


def vocabulary_order(config: dict, rows: int, where: str = "config.json") -> list[int]:
    """`order[i]` is the checkpoint id of our id i: pad, unk, the decoder start (bos), eos,
    then the other rows in the checkpoint's order (the decoder start's row twice)."""
    ids = special_ids(config, where)
    pad, eos, start = ids["pad_token_id"], ids["eos_token_id"], ids["decoder_start_token_id"]
    unk = FAIRSEQ_SPECIALS.index("<unk>")
    for key, value in (("pad_token_id", pad), ("eos_token_id", eos)):
        if value == unk:
            raise M2M100Error(f"{where}: {key}={value} is <unk>'s id")
    for key, value in zip(_SPECIAL_KEYS, (pad, eos, start), strict=True):
        if not 0 <= value < rows:
            raise M2M100Error(f"{where}: {key}={value} is outside the {rows} rows")
    return [pad, unk, start, eos] + [i for i in range(rows) if i not in (pad, unk, eos)]


def tokenizer(vocabulary: Vocabulary, order: list[int]):
    """The `NllbTokenizer` of a checkpoint's vocabulary, in our ids."""
    ours = {}  # checkpoint id -> our id; our <s> is a copy, never the one a token maps to
    for i, theirs in enumerate(order):
        if i != BOS_ID:
            ours.setdefault(theirs, i)
    names = list(SPECIAL_PIECES)
    for i in order[len(SPECIAL_PIECES) :]:
        name = vocabulary.names[i]
        names.append(f"{name}@{i}" if name in SPECIAL_PIECES else name)
    special = {token: ours[i] for token, i in vocabulary.added.items()}
    for i, name in enumerate(vocabulary.names):
        if name.startswith("<extra_row_"):
            special[name] = ours[i]
    return NllbTokenizer(
        vocabulary.proto,
        names,
        special_tokens=special,
        language_codes=vocabulary.language_codes,
        lstrip_tokens=vocabulary.lstrip,
        rstrip_tokens=vocabulary.rstrip,
    )


def load_vocabularies(path):
    """The tokenizer of a checkpoint directory (or `Checkpoint`), in our ids, as
    `keras_transformer.text.Vocabularies` (one tokenizer for both sides)."""
    from keras_transformer.text import Vocabularies

    if isinstance(path, Checkpoint):
        vocabulary, config = path.vocabulary, path.config
    else:
        config = read_json(Path(path) / "config.json")
        vocabulary = read_vocabulary(Path(path), config)
    order = vocabulary_order(config, len(vocabulary.names))
    shared = tokenizer(vocabulary, order)
    return Vocabularies(shared, shared)


def decoding_defaults(generation: dict, where: str = "generation_config.json") -> dict:
    """Decoding settings that generation_config.json sets, with transformers' defaults
    where it sets none (greedy search, length penalty 1): `beam_size` (num_beams),
    `length_penalty`, and `max_length` (the longest output in tokens with EOS:
    transformers' max_length counts the decoder start too) when set; and
    `target_prefix`, the forced first token (forced_bos_token_id), in the checkpoint's ids,
    or None."""
    beams = number(generation, "num_beams", int, where, 1)
    penalty = number(generation, "length_penalty", float, where, 1.0)
    if beams < 1:
        raise M2M100Error(f"{where}: num_beams={beams} must be >= 1")
    if penalty < 0:
        raise M2M100Error(
            f"{where}: length_penalty={penalty} is not supported (this library's length "
            "penalty takes exponents >= 0)"
        )
    defaults = {"beam_size": beams, "length_penalty": penalty, "target_prefix": None}
    if generation.get("max_length") is not None:
        longest = number(generation, "max_length", int, where)
        if longest < 2:
            raise M2M100Error(f"{where}: max_length={longest} must be >= 2")
        defaults["max_length"] = longest - 1
    if generation.get("forced_bos_token_id") is not None:
        defaults["target_prefix"] = number(generation, "forced_bos_token_id", int, where)
    return defaults


def decoding_settings(checkpoint: Checkpoint):
    """The `DecodingSettings` of a checkpoint: generation_config.json's beam size and length
    penalty (`decoding_defaults`), and its `forced_bos_token_id`, if set, as the target
    prefix (the token's text: a language code such as "spa_Latn")."""
    from keras_transformer.decoding.settings import DecodingSettings

    where = str(checkpoint.path / "generation_config.json")
    defaults = decoding_defaults(checkpoint.generation, where)
    prefix = defaults["target_prefix"]
    if prefix is not None:
        codes = {i: code for code, i in checkpoint.vocabulary.added.items()}
        if prefix not in codes:
            raise M2M100Error(
                f"{where}: forced_bos_token_id={prefix} is not the id of a language code or "
                "other special token"
            )
        prefix = codes[prefix]
    return DecodingSettings(
        beam_size=defaults["beam_size"],
        length_penalty=defaults["length_penalty"],
        target_prefix=prefix,
    )


def load_m2m100(path):
    """An NLLB-200/M2M100 checkpoint directory (or the `Checkpoint` that `read_checkpoint`
    made of it) as `(model, vocabularies)`: a `keras_transformer.Transformer` holding its
    weights (in our ids, see the module doc) and its `NllbTokenizer`. Everything is read and
    checked before the model is built.

    Examples:
        Skipped by the doctests: it needs an NLLB-200 checkpoint downloaded beforehand (the
        Hugging Face model directory of `facebook/nllb-200-distilled-600M`, here).

        >>> import keras_transformer as kt
        >>> from keras_transformer.pretrained import load_m2m100
        >>> model, vocabularies = load_m2m100("nllb-200-distilled-600M")  # doctest: +SKIP
        >>> spanish = vocabularies.target.language_id("spa_Latn")  # doctest: +SKIP
        >>> ids, scores = kt.decoding.greedy_search(  # doctest: +SKIP
        ...     model, source_ids, target_prefix=[spanish])

        `source_ids` are the source text's ids, int `[batch, src_len]`.
    """
    from keras_transformer.model import build_transformer

    checkpoint = path if isinstance(path, Checkpoint) else read_checkpoint(path)
    config = transformer_config(checkpoint.config, str(checkpoint.path / "config.json"))
    vocabularies = load_vocabularies(checkpoint)
    with zeros_initialized():  # every weight is the checkpoint's
        model = build_transformer(config)
    assign_weights(model, checkpoint)
    return model, vocabularies


def _read_weights(path: Path) -> SafetensorsWeights:
    """model.safetensors, or the shards model.safetensors.index.json lists, as a mapping
    that reads each weight when asked (`SafetensorsWeights`)."""
    if (path / WEIGHTS).exists():
        files = [path / WEIGHTS]
    elif (path / WEIGHTS_INDEX).exists():
        weight_map = read_json(path / WEIGHTS_INDEX).get("weight_map")
        if not isinstance(weight_map, dict):
            raise M2M100Error(f"{path / WEIGHTS_INDEX}: no weight_map")
        files = [path / name for name in sorted(set(weight_map.values()))]
    else:
        found = sorted(p.name for p in path.iterdir() if p.suffix in (".bin", ".pt", ".h5"))
        raise M2M100Error(
            f"{path}: no weights this importer reads; it needs {WEIGHTS} (found "
            f"{', '.join(found) or 'no weight file'}; PyTorch's pytorch_model.bin is not read, "
            "to keep torch out: download or convert to model.safetensors)"
        )
    return SafetensorsWeights(files)


class SafetensorsWeights(Mapping):
    """Weights in safetensors files, name -> numpy array, each read from its file when asked
    (safetensors' numpy reader: no torch).

    Only the names and shapes are read up front. A weight's bytes are read when it is looked
    up, with its file mapped only while it is read, so an import holds the model and one
    weight at a time, not the checkpoint too (NLLB-200-600M: 2.3 GB of weights; see
    `benchmarks.import_memory`); `rows` reads a slice of a large table.
    """

    def __init__(self, files):
        from safetensors import safe_open

        self._file, self._shapes = {}, {}
        for file in files:
            try:
                with safe_open(str(file), framework="numpy") as handle:
                    for name in handle.keys():  # noqa: SIM118 (not a dict)
                        self._file[name] = file
                        self._shapes[name] = tuple(handle.get_slice(name).get_shape())
            except Exception as error:  # safetensors raises its own SafetensorError, or OSError
                raise M2M100Error(f"{file}: cannot be read as safetensors ({error})") from None

    def shape(self, name: str) -> tuple:
        return self._shapes[name]

    def rows(self, name: str, start: int, stop: int) -> np.ndarray:
        """Rows `start:stop` of a weight, read alone."""
        return self._read(name, lambda handle: handle.get_slice(name)[start:stop])

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._file:
            raise KeyError(name)
        return self._read(name, lambda handle: handle.get_tensor(name))

    def _read(self, name, read):
        from safetensors import safe_open

        file = self._file[name]
        try:
            with safe_open(str(file), framework="numpy") as handle:
                return np.array(read(handle))  # a copy: nothing left mapped
        except Exception as error:
            raise M2M100Error(f"{file}: cannot read {name} ({error})") from None

    def __contains__(self, name) -> bool:  # Mapping's own would read the weight
        return name in self._file

    def __iter__(self):
        return iter(self._file)

    def __len__(self) -> int:
        return len(self._file)


def _expected_shapes(config: TransformerConfig, rows: int) -> dict:
    """Every weight name transformers' M2M100ForConditionalGeneration stores -> its shape."""
    d, ff = config.d_model, config.d_ff
    shapes = {"model.shared.weight": (rows, d)}

    def linear(name, d_in, d_out):
        shapes[f"{name}.weight"] = (d_out, d_in)
        shapes[f"{name}.bias"] = (d_out,)

    def norm(name):
        shapes[f"{name}.weight"] = shapes[f"{name}.bias"] = (d,)

    for stack, layers in (
        ("encoder", config.num_encoder_layers),
        ("decoder", config.num_decoder_layers),
    ):
        for i in range(layers):
            name = f"model.{stack}.layers.{i}"
            attentions = ["self_attn"] + (["encoder_attn"] if stack == "decoder" else [])
            for attention in attentions:
                for projection in ("q_proj", "k_proj", "v_proj", "out_proj"):
                    linear(f"{name}.{attention}.{projection}", d, d)
                norm(f"{name}.{attention}_layer_norm")
            linear(f"{name}.fc1", d, ff)
            linear(f"{name}.fc2", ff, d)
            norm(f"{name}.final_layer_norm")
        norm(f"model.{stack}.layer_norm")
    return shapes


# Copies of the shared table that transformers ties to it (some checkpoints store them).
_TIED_COPIES = (
    "model.encoder.embed_tokens.weight",
    "model.decoder.embed_tokens.weight",
    "lm_head.weight",
)


def _check_weights(checkpoint: Checkpoint) -> None:
    """Every weight present with its shape, tied copies equal to the table, nothing left
    over: `M2M100Error` names the first weight that is not so."""
    config = transformer_config(checkpoint.config)
    weights, path = checkpoint.weights, checkpoint.path
    shapes = _expected_shapes(config, len(checkpoint.vocabulary.names))
    for name, shape in shapes.items():
        if name not in weights:
            raise M2M100Error(f"{path}: no weight {name!r}")
        if tuple(weights.shape(name)) != shape:
            raise M2M100Error(
                f"{path}: {name} has shape {list(weights.shape(name))}, config.json implies "
                f"{list(shape)}"
            )
    table = "model.shared.weight"
    for copy in _TIED_COPIES:
        if copy in weights and not _equal_tables(weights, copy, table):
            raise M2M100Error(
                f"{path}: {copy} differs from model.shared.weight, to which transformers ties "
                "it; untied embeddings are not supported"
            )
    unused = sorted(set(weights) - set(shapes) - set(_TIED_COPIES))
    unused = [name for name in unused if not name.endswith("embed_positions.weights")]
    if unused:
        raise M2M100Error(
            f"{path}: {len(unused)} weights that config.json has no place for, such as "
            f"{', '.join(unused[:3])} (it says {config.num_encoder_layers} encoder and "
            f"{config.num_decoder_layers} decoder layers); importing without them would lose "
            "part of the model"
        )


# Rows of the embedding table read at a time (64 MB of NLLB-200's at d_model 1024).
ROWS_AT_ONCE = 16384


def _equal_tables(weights: SafetensorsWeights, name: str, other: str) -> bool:
    """Whether two weights of the same shape are equal, compared a block of rows at a time."""
    if weights.shape(name) != weights.shape(other):
        return False
    rows = weights.shape(name)[0]
    blocks = [(i, min(i + ROWS_AT_ONCE, rows)) for i in range(0, rows, ROWS_AT_ONCE)]
    return all(
        np.array_equal(weights.rows(name, *block), weights.rows(other, *block)) for block in blocks
    )


def assign_weights(model, checkpoint: Checkpoint) -> None:
    """Sets every weight of `model` (built from `transformer_config`) from the checkpoint
    (checked whole by `read_checkpoint`), one weight at a time, and the embedding table a
    block of rows at a time: the import holds the model and one weight (or block), never a
    second copy of the model (`benchmarks.import_memory`)."""
    weights = checkpoint.weights
    order = vocabulary_order(checkpoint.config, len(checkpoint.vocabulary.names))

    def take(name):
        return np.asarray(weights[name], "float32")

    def linear(dense, name):
        """transformers' `[out, in]` weight into our kernel, laid out as the layer's own
        (`[in, out]`, `[in, heads, depth]` or `[heads, depth, out]`: heads major)."""
        kernel = take(f"{name}.weight").T  # (in, out)
        dense.kernel.assign(kernel.reshape(tuple(dense.kernel.shape)))
        dense.bias.assign(take(f"{name}.bias").reshape(tuple(dense.bias.shape)))

    def attention(layer, name):
        for ours, theirs in (("query", "q"), ("key", "k"), ("value", "v"), ("output", "out")):
            linear(getattr(layer, f"{ours}_dense"), f"{name}.{theirs}_proj")

    def norm(layer_norm, name):
        layer_norm.gamma.assign(take(f"{name}.weight"))
        layer_norm.beta.assign(take(f"{name}.bias"))

    def feed_forward(layer, name):
        linear(layer.feed_forward.inner_dense, f"{name}.fc1")
        linear(layer.feed_forward.output_dense, f"{name}.fc2")
        norm(layer.feed_forward_residual.layer_norm, f"{name}.final_layer_norm")

    for i, layer in enumerate(model.encoder.encoder_layers):
        name = f"model.encoder.layers.{i}"
        attention(layer.self_attention, f"{name}.self_attn")
        norm(layer.self_attention_residual.layer_norm, f"{name}.self_attn_layer_norm")
        feed_forward(layer, name)
    for i, layer in enumerate(model.decoder.decoder_layers):
        name = f"model.decoder.layers.{i}"
        attention(layer.self_attention, f"{name}.self_attn")
        norm(layer.self_attention_residual.layer_norm, f"{name}.self_attn_layer_norm")
        attention(layer.cross_attention, f"{name}.encoder_attn")
        norm(layer.cross_attention_residual.layer_norm, f"{name}.encoder_attn_layer_norm")
        feed_forward(layer, name)
    norm(model.encoder.final_norm, "model.encoder.layer_norm")
    norm(model.decoder.final_norm, "model.decoder.layer_norm")

    embedding = model.target_embedding
    _assign_rows(embedding.token_embedding.embeddings, weights, "model.shared.weight", order)
    bias = np.zeros(len(order), "float32")
    bias[BOS_ID] = EXCLUDED  # the decoder start's second row: out of the softmax
    embedding.logits_bias.assign(bias)


def _assign_rows(variable, weights: SafetensorsWeights, name: str, order: list[int]) -> None:
    """`variable[i] = weights[name][order[i]]`, a block of `ROWS_AT_ONCE` rows at a time
    (`order` is nearly ascending: a block reads about as many rows as it writes)."""
    import tensorflow as tf

    # TensorFlow's variable (kt.pretrained needs TensorFlow), updated by scatter: a sliced
    # assign copied the whole 1 GB table first (copy-on-write), a scatter writes in place.
    table = variable.value
    for start in range(0, len(order), ROWS_AT_ONCE):
        ids = np.asarray(order[start : start + ROWS_AT_ONCE])
        low, high = int(ids.min()), int(ids.max()) + 1  # within the table
        block = weights.rows(name, low, high)[ids - low].astype("float32", copy=False)
        rows = tf.range(start, start + len(ids))
        table.scatter_update(tf.IndexedSlices(tf.constant(block), rows))
    # A scatter leaves the variable in TensorFlow's copy-on-read mode, where every dense
    # read (the logits' projection, each decoding step) copies the whole table; no other
    # op writes to it here, so the mode goes.
    tf.raw_ops.DisableCopyOnRead(resource=table.handle)


__all__ = [
    "Checkpoint",
    "M2M100Error",
    "SafetensorsWeights",
    "decoding_defaults",
    "decoding_settings",
    "load_m2m100",
    "load_vocabularies",
    "read_checkpoint",
    "transformer_config",
    "vocabulary_order",
]
