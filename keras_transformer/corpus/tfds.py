"""A prepared TensorFlow Datasets translation split as a parallel corpus (`tensorflow-datasets`
is an optional dependency, imported only when a split is read).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import tensorflow as tf

from keras_transformer.corpus.pairs import (
    _READ_BATCH,
    CorpusError,
    ParallelCorpus,
    _both_non_empty,
    _Streamed,
    _strip_batch,
    _utf8,
    plain,
)


def read_tfds(
    name: str,
    split: str,
    source_language: str,
    target_language: str,
    data_dir: str | None = None,
) -> ParallelCorpus:
    """Reads a prepared TensorFlow Datasets translation dataset, without downloading anything.

    The translation datasets yield dicts keyed by language code: `wmt14_translate/de-en` has
    "de" and "en", `ted_hrlr_translate/pt_to_en` has "pt" and "en". Needs the optional
    dependency `tensorflow-datasets`, and the dataset prepared in `data_dir` beforehand
    (`tfds build NAME --data_dir DIR` on a machine with internet).

    Args:
        name: str. The TFDS name with its config, e.g. "ted_hrlr_translate/pt_to_en".
        split: str. A TFDS split, e.g. "train", "validation" or "train[:10%]".
        source_language: str. Key of the source sentences, e.g. "pt".
        target_language: str. Key of the target sentences, e.g. "en".
        data_dir: str or None. Where the dataset was prepared. Defaults to None (TFDS's
            default, `$TFDS_DATA_DIR` or `~/tensorflow_datasets`).

    Returns:
        A `ParallelCorpus` with origin "tfds:NAME:SPLIT (SOURCE -> TARGET)".

    Raises:
        CorpusError: tensorflow-datasets is missing, the dataset is unknown or not prepared,
            a language is not a key of its examples, or no non-empty pair is left.

    Examples:
        Skipped by the doctests: it needs the dataset prepared beforehand (`tfds build`), which
        needs the internet.

        >>> from keras_transformer.corpus import read_tfds
        >>> pairs = read_tfds("ted_hrlr_translate/pt_to_en", "train", "pt", "en")  # doctest: +SKIP
    """
    return TfdsSplit(name, split, source_language, target_language, data_dir).read()


@dataclasses.dataclass(frozen=True)
class TfdsSplit(_Streamed):
    """A prepared TFDS translation split to stream (arguments and rules as `read_tfds`):
    `scan()` iterates it once in Python, `to_dataset()` is TFDS's own `tf.data` reader."""

    name: str
    split: str
    source_language: str
    target_language: str
    data_dir: str | None = None
    count_label = "examples"
    checks_past_limit = False  # TFDS's reader takes the first examples alone

    @property
    def where(self) -> str:
        return f"tfds:{self.name}:{self.split}"

    @property
    def origin(self) -> str:
        return f"{self.where} ({self.source_language} -> {self.target_language})"

    def raw_pairs(self) -> Iterator[tuple[str, str]]:
        """Every (source, target) example, decoded (a CorpusError names a bad one)."""
        pairs = self._pairs().batch(1024)  # first: it explains a missing tensorflow-datasets
        import tensorflow_datasets as tfds

        number = 0
        for sources, targets in tfds.as_numpy(pairs):
            for source, target in zip(sources, targets, strict=True):
                number += 1
                example = f"{self.where}: example {number}"
                yield (
                    _utf8(source, f"{example} {self.source_language!r}"),
                    _utf8(target, f"{example} {self.target_language!r}"),
                )
        if not number:
            raise CorpusError(f"{self.where}: the split has no examples")

    def to_dataset(self, *, shard=None, limit=None) -> tf.data.Dataset:
        """As `CorpusFiles.to_dataset`; a shard is every num_shards-th example."""
        pairs = self._pairs().batch(_READ_BATCH).map(_strip_batch).unbatch()
        pairs = pairs.filter(_both_non_empty)
        if limit is not None:
            pairs = pairs.take(limit)
        return pairs if shard is None else pairs.shard(*shard)

    def _pairs(self) -> tf.data.Dataset:
        """TFDS's dataset of (source, target) strings, checked."""
        where = self.where
        try:
            import tensorflow_datasets as tfds
        except ImportError:
            raise CorpusError(
                f"{where}: reading TFDS datasets needs tensorflow-datasets; "
                "pip install tensorflow-datasets"
            ) from None
        try:
            dataset = tfds.load(self.name, split=self.split, data_dir=self.data_dir, download=False)
        except tfds.core.DatasetNotFoundError:
            raise CorpusError(f"{where}: TFDS has no dataset named {self.name!r}") from None
        except AssertionError:
            directory = self.data_dir or tfds.core.constants.DATA_DIR
            raise CorpusError(
                f"{where}: the dataset is not prepared in {directory}; on a machine with "
                f"internet run `tfds build {self.name} --data_dir DIR`, then copy DIR here and "
                "pass it as data_dir"
            ) from None
        except ValueError as error:  # An unknown split or config.
            raise CorpusError(f"{where}: {error}") from None
        spec = dataset.element_spec
        keys = sorted(spec) if isinstance(spec, dict) else []
        source, target = self.source_language, self.target_language
        for language in (source, target):
            if language not in keys:
                raise CorpusError(
                    f"{where}: examples have no key {language!r}; "
                    f"the dataset has: {', '.join(keys) or 'no named features'}"
                )
            if spec[language].dtype != tf.string or spec[language].shape.rank != 0:
                raise CorpusError(f"{where}: {language!r} is {spec[language]}, not a sentence")
        return dataset.map(plain(lambda example: (example[source], example[target])))


__all__ = ["TfdsSplit", "read_tfds"]
