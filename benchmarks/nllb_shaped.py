"""An NLLB-200-shaped M2M100 checkpoint with random weights, for memory and speed measurements
at the size people download (facebook/nllb-200-distilled-600M: d_model 1024, 16 heads, d_ff
4096, 12+12 layers, 256,206 embedding rows, relu, 1,024 positions; 615M parameters, 2.46 GB
in float32).

    python -m benchmarks.nllb_shaped --out /tmp/nllb-shaped
    python -m benchmarks.import_memory /tmp/nllb-shaped

Its int8 LiteRT file's conversion, the peak RSS of the program's processes together
(`benchmarks.program_memory`; issue 68's bound is 12 GiB):

    python -m trainers.import_pretrained /tmp/nllb-shaped --model-dir /tmp/nllb-import \
        --target-language spa_Latn
    python -m benchmarks.program_memory --limit-gib 13 -- python -m trainers.export \
        --model-dir /tmp/nllb-import --out /tmp/nllb-int8 --format litert --quantize int8 \
        --beam-size 1

`trainers.export` loads the model and traces the file's signatures in a process of its own,
which saves them and ends; LiteRT's converter reads them in another (`kt.export.litert`).
Measured at bbb8c14 on EPYC-2, 2026-12-06 (BENCHMARKS.md, "Importing NLLB-200"): a peak of
11,376 MiB (the tracing process's about 7.0 GiB; then the converter's 10,713 MiB beside the
program's 0.7 GiB), 440 s on a machine shared with other work (load 7-8), a 909,945,376-byte
file.

The directory is laid out as a transformers download (config.json, generation_config.json,
model.safetensors, sentencepiece.bpe.model, tokenizer.json, tokenizer_config.json). The
tokenizer files are the test fixture's small ones (tests/fixtures/m2m100/nllb-tiny); the rows
past its ids are rows no token reaches, as nllb-200's last two are, so the embedding table and
the output projection have NLLB-200's 256,206 rows. The weights are random (seeded, in
`--shards` files as large checkpoints come): translations are nonsense.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np

from benchmarks.opus_shaped import size_keys

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "m2m100" / "nllb-tiny"
SIZES = dict(d_model=1024, heads=16, ffn=4096, layers=12, vocab=256206, positions=1024)


def config(sizes: dict) -> dict:
    fixture = json.loads((FIXTURE / "config.json").read_text())
    return {
        **fixture,
        "_name_or_path": "nllb-200-shaped-random",
        **size_keys(sizes),
    }


def weights(sizes: dict, seed: int = 0):
    """(name, array) in transformers' names and PyTorch layouts, normal(0, 0.02) as
    M2M100 initializes, one at a time."""
    rng = np.random.default_rng(seed)
    d, ffn = sizes["d_model"], sizes["ffn"]

    def normal(*shape):
        return (0.02 * rng.standard_normal(shape, dtype="float32")).astype("float32")

    yield "model.shared.weight", normal(sizes["vocab"], d)

    def linear(name, d_in, d_out):
        yield f"{name}.weight", normal(d_out, d_in)
        yield f"{name}.bias", np.zeros(d_out, "float32")

    def norm(name):
        yield f"{name}.weight", np.ones(d, "float32")
        yield f"{name}.bias", np.zeros(d, "float32")

    for stack in ("encoder", "decoder"):
        for i in range(sizes["layers"]):
            layer = f"model.{stack}.layers.{i}"
            for attention in ["self_attn"] + (["encoder_attn"] if stack == "decoder" else []):
                for projection in ("q_proj", "k_proj", "v_proj", "out_proj"):
                    yield from linear(f"{layer}.{attention}.{projection}", d, d)
                yield from norm(f"{layer}.{attention}_layer_norm")
            yield from linear(f"{layer}.fc1", d, ffn)
            yield from linear(f"{layer}.fc2", ffn, d)
            yield from norm(f"{layer}.final_layer_norm")
        yield from norm(f"model.{stack}.layer_norm")


def write(out: Path, sizes: dict = SIZES, shards: int = 3) -> Path:
    """Writes the checkpoint, its weights in `shards` files (model.safetensors alone for
    1) with model.safetensors.index.json, holding one shard in memory at a time."""
    from safetensors.numpy import save_file

    out.mkdir(parents=True, exist_ok=False)
    (out / "config.json").write_text(json.dumps(config(sizes), indent=2))
    for name in ("generation_config.json", "sentencepiece.bpe.model", "tokenizer.json"):
        shutil.copyfile(FIXTURE / name, out / name)
    shutil.copyfile(FIXTURE / "tokenizer_config.json", out / "tokenizer_config.json")
    names = [name for name, _ in weights({**sizes, "vocab": 1, "d_model": 1, "ffn": 1})]
    per_shard = -(-len(names) // shards)
    tensors, weight_map, total = {}, {}, 0
    for index, (name, value) in enumerate(weights(sizes)):
        tensors[name] = value
        total += value.nbytes
        if len(tensors) == per_shard or index == len(names) - 1:
            shard = index // per_shard
            file = (
                "model.safetensors"
                if shards == 1
                else f"model-{shard + 1:05d}-of-{shards:05d}.safetensors"
            )
            save_file(tensors, str(out / file), metadata={"format": "pt"})
            weight_map.update({key: file for key in tensors})
            tensors = {}
    if shards > 1:
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.nllb_shaped", description=__doc__)
    parser.add_argument("--out", required=True, type=Path, help="a new directory")
    parser.add_argument("--shards", type=int, default=3, help="weight files (default 3)")
    args = parser.parse_args(argv)
    print(f"wrote {write(args.out, shards=args.shards)}")


if __name__ == "__main__":
    main()
