"""Checkpoints on the Hugging Face Hub, named `hf://ORG/NAME` or `hf://ORG/NAME@REVISION`.

`TransformerSeq2SeqLM.from_preset` and `trainers.import_pretrained` take such an id where
they take a checkpoint directory: `fetch` downloads the files the importer of its
`model_type` reads (keras_transformer.pretrained.checkpoint for OPUS-MT / Marian,
.m2m100 for NLLB-200) with `huggingface_hub.snapshot_download` into the Hugging Face cache,
and the import then reads that snapshot as it reads a local directory.

The id is huggingface_hub's own URI syntax (`parse_hf_uri`: `hf://[models/]ORG/NAME` and
an optional `@REVISION`, a branch, tag, commit or `refs/pr/N`), which is what keras-hub's
`from_preset("hf://ORG/NAME")` takes too, without the revision. A model repository with
no path inside it: anything else is refused by name before anything is downloaded.

Only config.json comes first: a repository this library does not read (a keras-hub preset,
with `registered_name` in config.json, or a transformers model keras-hub converts) stops
there, and `Snapshot.model_type` is None. Otherwise the tokenizer files and the preferred
weights follow, at the same commit, and a second choice only when the first is absent
(Marian's tf_model.h5 without model.safetensors; NLLB's shards when there is only an index).
The cache is huggingface_hub's (`HF_HUB_CACHE`, default `~/.cache/huggingface/hub`), and
with `HF_HUB_OFFLINE=1` nothing is asked of the network.

This module imports no TensorFlow and no huggingface_hub until a download: the programs
test an argument with `is_hub_id` before they load anything, and a keras-hub preset on the
Hub still loads on JAX.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

PREFIX = "hf://"
CONFIG = "config.json"

# Per config.json's model_type: the files downloaded after config.json (what the importer
# reads, with the preferred weights), and what must be there once the downloads are done
# (each entry: one of these names). Nothing else of the repository is fetched: OPUS-MT
# repositories also hold pytorch_model.bin, tf_model.h5, rust_model.ot and flax weights.
FILES = {
    "marian": (
        "generation_config.json",
        "tokenizer_config.json",
        "source.spm",
        "target.spm",
        "vocab.json",
        "target_vocab.json",
        "model.safetensors",
    ),
    "m2m_100": (
        "generation_config.json",
        "tokenizer_config.json",
        "tokenizer.json",
        "sentencepiece.bpe.model",
        "model.safetensors",
        "model.safetensors.index.json",
    ),
}
REQUIRED = {
    "marian": (
        ("source.spm",),
        ("target.spm",),
        ("vocab.json",),
        ("model.safetensors", "tf_model.h5"),
    ),
    "m2m_100": (
        ("sentencepiece.bpe.model",),
        ("tokenizer.json", "tokenizer_config.json"),
        ("model.safetensors", "model.safetensors.index.json"),
    ),
}


class HubError(ValueError):
    """A hub id that is malformed, or whose files cannot be had; the message names the id."""


class HubId(NamedTuple):
    """A parsed `hf://ORG/NAME[@REVISION]`."""

    uri: str  # as given
    repo_id: str  # ORG/NAME
    revision: str | None  # None: the default branch


class Snapshot(NamedTuple):
    """A repository's files downloaded at one commit.

    uri: the id as given. repo_id: ORG/NAME. revision: the one asked for, or None.
    commit: the commit the files are from. path: the snapshot directory in the cache.
    model_type: config.json's, when it is one this library imports (a key of `FILES`), and
        then every file of `FILES` the repository has is in `path`; None otherwise (only
        config.json was downloaded).
    """

    uri: str
    repo_id: str
    revision: str | None
    commit: str
    path: Path
    model_type: str | None

    @property
    def pinned(self) -> str:
        """The id at the commit the files came from: where an import records its source."""
        return f"{PREFIX}{self.repo_id}@{self.commit}"


def is_hub_id(value) -> bool:
    """Whether `value` names a Hugging Face Hub repository (`hf://...`), rather than a path."""
    return isinstance(value, str) and value.startswith(PREFIX)


def parse(uri: str) -> HubId:
    """`hf://ORG/NAME[@REVISION]` as a `HubId`; HubError naming `uri` when it is not one.

    Examples:
        >>> from keras_transformer._hub import parse
        >>> parse("hf://Helsinki-NLP/opus-mt-en-es@main").revision
        'main'
        >>> parse("hf://opus-mt-en-es")
        Traceback (most recent call last):
        keras_transformer._hub.HubError: hf://opus-mt-en-es: not a Hugging Face model id ...
    """
    from huggingface_hub import parse_hf_uri
    from huggingface_hub.errors import HfUriError

    expected = "expected hf://ORG/NAME or hf://ORG/NAME@REVISION"
    if not is_hub_id(uri):
        raise HubError(f"{uri!r}: not a Hugging Face model id ({expected})")
    try:
        parsed = parse_hf_uri(uri)
    except HfUriError as error:
        raise HubError(
            f"{uri}: not a Hugging Face model id ({expected}; {error.msg.strip()})"
        ) from None
    if parsed.type != "model":
        raise HubError(f"{uri}: a {parsed.type} repository; only model repositories are read")
    if parsed.path_in_repo:
        raise HubError(
            f"{uri}: names {parsed.path_in_repo!r} inside the repository; {expected} (a "
            "revision with '/' in it is written with %2F)"
        )
    return HubId(uri, parsed.id, parsed.revision)


def fetch(uri: str) -> Snapshot:
    """Downloads config.json of the repository `uri` names and, when its model_type is one
    this library imports, every file its importer reads (`FILES`), all at one commit.

    Raises HubError naming `uri` for a malformed id (before any download), a repository or
    revision the Hub does not have, and a file that is neither in the cache nor to be had
    (`HF_HUB_OFFLINE`, no network).
    """
    hub_id = parse(uri)
    path = _download(hub_id, hub_id.revision, [CONFIG])
    commit = path.name  # snapshots/<commit>
    try:
        config = json.loads((path / CONFIG).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise HubError(_absent(hub_id, [CONFIG], path)) from None
    except (ValueError, UnicodeDecodeError) as error:
        raise HubError(f"{uri}: {path / CONFIG} is not valid JSON ({error})") from None
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if model_type not in FILES or "registered_name" in config:
        return Snapshot(uri, hub_id.repo_id, hub_id.revision, commit, path, None)
    _download(hub_id, commit, list(FILES[model_type]))
    second = _second_choice(path, model_type)
    if second:
        _download(hub_id, commit, second)
    missing = _missing(path, model_type, config)
    if missing and _offline():
        raise HubError(_absent(hub_id, missing, path))
    # Online, a file still missing is one the repository lacks: the importer names it.
    return Snapshot(uri, hub_id.repo_id, hub_id.revision, commit, path, model_type)


def _download(hub_id: HubId, revision: str | None, patterns: list[str]) -> Path:
    """`snapshot_download` of `patterns`, its errors as one-line HubErrors naming the id."""
    import huggingface_hub
    from huggingface_hub.errors import (
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        folder = huggingface_hub.snapshot_download(
            hub_id.repo_id, revision=revision, allow_patterns=patterns
        )
    except RevisionNotFoundError:
        raise HubError(f"{hub_id.uri}: the repository has no revision {revision!r}") from None
    except RepositoryNotFoundError:  # gated ones too
        raise HubError(
            f"{hub_id.uri}: no such model repository on the Hugging Face Hub, or one you may "
            "not read (private or gated: log in with `hf auth login` or set HF_TOKEN)"
        ) from None
    except LocalEntryNotFoundError as error:
        # Not cached, and the Hub not asked (HF_HUB_OFFLINE) or not reached. A snapshot known
        # to be incomplete (huggingface_hub's cached file list says so) comes with its path.
        folder = getattr(error, "snapshot_path", None)
        if folder is None:
            raise HubError(_absent(hub_id, None, None)) from None
        names = [name for name in patterns if not (Path(folder) / name).exists()]
        raise HubError(_absent(hub_id, names or patterns, Path(folder))) from None
    except (HfHubHTTPError, OSError) as error:
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise HubError(f"{hub_id.uri}: the download failed ({reason})") from None
    return Path(folder)


def _absent(hub_id: HubId, names: list[str] | None, path: Path | None) -> str:
    """The one line for a repository (`names` None) or files neither in the cache nor
    downloaded."""
    from huggingface_hub import constants

    network = (
        "the network is off (HF_HUB_OFFLINE is set)"
        if _offline()
        else "the Hugging Face Hub cannot be reached"
    )
    if names is None:
        return (
            f"{hub_id.uri}: not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and "
            f"{network}, or no such repository or revision"
        )
    return (
        f"{hub_id.uri}: {', '.join(names)} not in the Hugging Face cache ({path}) and "
        f"{network}, or the repository has no such file"
    )


def _offline() -> bool:
    import huggingface_hub

    return huggingface_hub.is_offline_mode()


def _second_choice(path: Path, model_type: str) -> list[str]:
    """The weights to download when the preferred ones are not in the snapshot: Marian's
    tf_model.h5, or the shards an NLLB index lists."""
    if (path / "model.safetensors").exists():
        return []
    if model_type == "marian":
        return ["tf_model.h5"]
    try:
        index = json.loads((path / "model.safetensors.index.json").read_text(encoding="utf-8"))
        return sorted(set(index["weight_map"].values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []  # no index or a bad one: the importer says which


def _missing(path: Path, model_type: str, config: dict) -> list[str]:
    """The files of `REQUIRED` (and those config.json and the index call for) not in `path`."""
    required = list(REQUIRED[model_type])
    if model_type == "marian" and not config.get("share_encoder_decoder_embeddings", True):
        required.append(("target_vocab.json",))
    if model_type == "m2m_100":
        required += [(name,) for name in _second_choice(path, model_type)]
    return [
        " or ".join(names)
        for names in required
        if not any((path / name).exists() for name in names)
    ]


__all__ = ["PREFIX", "HubError", "HubId", "Snapshot", "fetch", "is_hub_id", "parse"]
