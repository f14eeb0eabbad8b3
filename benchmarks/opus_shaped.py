"""An OPUS-MT-shaped Marian checkpoint with random weights, for speed measurements at the size
people serve (Helsinki-NLP/opus-mt-en-es: d_model 512, 8 heads, d_ff 2048, 6+6 layers,
58,101 vocabulary ids, swish, 512 positions).

    python -m benchmarks.opus_shaped --out /tmp/opus-shaped
    python -m trainers.import_marian /tmp/opus-shaped --model-dir runs/opus-shaped
    python -m benchmarks.serve --model-dir runs/opus-shaped --sentences 128 --single 20

The directory is laid out as a transformers download (config.json, generation_config.json,
model.safetensors, vocab.json, source.spm, target.spm). The SentencePiece models are the test
fixture's small ones (tests/fixtures/marian/shared); vocab.json numbers their pieces first
(but the fixture's >>es<< and >>pt<<), then filler pieces up to the full size, so the
embedding table and the output projection have OPUS-MT's 58,101 rows. The weights are random
(seeded): translations are nonsense and run to the length limit, which is what a per-token
cost needs.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "marian" / "shared"
SIZES = dict(d_model=512, heads=8, ffn=2048, layers=6, vocab=58101, positions=512)


def size_keys(sizes: dict) -> dict:
    """The config.json keys of `sizes` that transformers' BART-family configs share (Marian's,
    M2M100's)."""
    return {
        "d_model": sizes["d_model"],
        "encoder_attention_heads": sizes["heads"],
        "decoder_attention_heads": sizes["heads"],
        "encoder_ffn_dim": sizes["ffn"],
        "decoder_ffn_dim": sizes["ffn"],
        "encoder_layers": sizes["layers"],
        "decoder_layers": sizes["layers"],
        "vocab_size": sizes["vocab"],
        "max_position_embeddings": sizes["positions"],
    }


def config(sizes: dict) -> dict:
    pad = sizes["vocab"] - 1
    return {
        "_name_or_path": "opus-mt-shaped-random",
        "model_type": "marian",
        "architectures": ["MarianMTModel"],
        "activation_function": "swish",
        **size_keys(sizes),
        "decoder_vocab_size": sizes["vocab"],
        "share_encoder_decoder_embeddings": True,
        "scale_embedding": True,
        "normalize_before": False,
        "static_position_embeddings": True,
        "dropout": 0.1,
        "attention_dropout": 0.0,
        "activation_dropout": 0.0,
        "pad_token_id": pad,
        "decoder_start_token_id": pad,
        "eos_token_id": 0,
        "bos_token_id": 0,
        "forced_eos_token_id": 0,
    }


def weights(sizes: dict, seed: int = 0) -> dict:
    """transformers' names and PyTorch layouts, normal(0, 0.02) as MarianMTModel initializes."""
    rng = np.random.default_rng(seed)
    d, ffn = sizes["d_model"], sizes["ffn"]

    def normal(*shape):
        return (0.02 * rng.standard_normal(shape)).astype("float32")

    tensors = {
        "model.shared.weight": normal(sizes["vocab"], d),
        "final_logits_bias": np.zeros((1, sizes["vocab"]), "float32"),
    }

    def attention(prefix):
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            tensors[f"{prefix}.{name}.weight"] = normal(d, d)
            tensors[f"{prefix}.{name}.bias"] = np.zeros(d, "float32")

    def norm(prefix):
        tensors[f"{prefix}.weight"] = np.ones(d, "float32")
        tensors[f"{prefix}.bias"] = np.zeros(d, "float32")

    for stack in ("encoder", "decoder"):
        for i in range(sizes["layers"]):
            layer = f"model.{stack}.layers.{i}"
            attention(f"{layer}.self_attn")
            norm(f"{layer}.self_attn_layer_norm")
            if stack == "decoder":
                attention(f"{layer}.encoder_attn")
                norm(f"{layer}.encoder_attn_layer_norm")
            tensors[f"{layer}.fc1.weight"] = normal(ffn, d)
            tensors[f"{layer}.fc1.bias"] = np.zeros(ffn, "float32")
            tensors[f"{layer}.fc2.weight"] = normal(d, ffn)
            tensors[f"{layer}.fc2.bias"] = np.zeros(d, "float32")
            norm(f"{layer}.final_layer_norm")
    return tensors


def vocabulary(size: int) -> dict:
    """The fixture's pieces (with Marian's specials) first, then fillers, <pad> last. The
    fixture's target language tokens (>>es<<, >>pt<<) are left out: opus-mt-en-es, one
    language into one, has none (and a LiteRT file takes no multilingual vocabulary)."""
    fixture = json.loads((FIXTURE / "vocab.json").read_text(encoding="utf-8"))
    pieces = [
        p
        for p, _ in sorted(fixture.items(), key=lambda item: item[1])
        if p != "<pad>" and not re.fullmatch(r">>.+<<", p)
    ]
    pieces += [f"\u2581filler{i}" for i in range(size - 1 - len(pieces))]
    return {piece: i for i, piece in enumerate([*pieces, "<pad>"])}


def write(out: Path, sizes: dict = SIZES) -> Path:
    from safetensors.numpy import save_file

    out.mkdir(parents=True, exist_ok=False)
    (out / "config.json").write_text(json.dumps(config(sizes), indent=2))
    pad = sizes["vocab"] - 1
    generation = {"num_beams": 4, "max_length": 512, "bad_words_ids": [[pad]]}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2))
    vocab = vocabulary(sizes["vocab"])
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    for name in ("source.spm", "target.spm", "tokenizer_config.json"):
        shutil.copyfile(FIXTURE / name, out / name)
    save_file(weights(sizes), str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.opus_shaped", description=__doc__)
    parser.add_argument("--out", required=True, type=Path, help="a new directory")
    args = parser.parse_args(argv)
    print(f"wrote {write(args.out)}")


if __name__ == "__main__":
    main()
