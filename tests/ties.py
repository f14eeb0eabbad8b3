"""Where two engines may part: the tie rule of the tests that compare CTranslate2's searches
with ours (tests/test_ctranslate2.py, tests/test_every_door.py; tests/README.md lists every
exact-output test and its rule).

Two things move CTranslate2's choices away from ours. Its logits are the model's in other
products, so they differ in their last bits (about 2e-5 here); and its softmax leaves out
the tokens its search never generates (padding, the start token), a sliver of
mass that raises a hypothesis's summed log-probability by up to about 1e-3 over a sentence,
unevenly between hypotheses. Where a choice of the search is that close, the engines may
choose differently, and from there their translations differ. Which choices are that close
depends on the trained weights, which depend on the CPU that trained them: the failure a
user met was a beam whose 4th and 5th candidates were 3e-4 apart on his CPU's weights, a
tie at the beam's cut that no rule about two tokens of one prefix could see.

So the rule replays each engine's search here in NumPy, from the model's own logits, with
each engine's softmax (`replay_beam`): where two engines' n-best differ, each must be its
own softmax's replay, but where that replay meets a choice closer than LAST_BITS, or runs
into the length limit (where each engine returns unfinished hypotheses of its own:
docs/guides/serving.md). Anything else (another search, another ranking, another finish
rule) fails. Greedy search's rule stays the simpler one: where two greedy searches first
take different tokens, their logits are within TIE.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

TIE = 1e-3  # greedy search: two tokens' logits this close may be ordered either way
# One engine, ours, in two graphs (or a graph and this module's NumPy): float32 sums of a
# few dozen log-probabilities differ in their last bits, about 1e-5.
SCORE_TOLERANCE = 1e-4
# Two engines' logits of one model differ by about 2e-5; this module's float64 sums and an
# engine's float32 ones by a few times that over a sentence: a choice closer than LAST_BITS
# may go either way between an engine and its replay.
LAST_BITS = 2e-4
BOS_ID, EOS_ID, PAD_ID = 2, 3, 0  # keras_transformer.text's


class Replay(NamedTuple):
    """What `replay_beam` found: the finished hypotheses, best first (`(score, ids)`, ids
    without BOS and EOS), the smallest margin of any choice the search made, and whether it
    ran into the length limit before `beam_size` hypotheses had finished."""

    finished: list[tuple[float, tuple[int, ...]]]
    smallest_margin: float
    at_limit: bool


def log_softmax(logits: np.ndarray, left_out: Sequence[int] = ()) -> np.ndarray:
    """Log-probabilities over the last axis in float64, the tokens of `left_out` left out of
    the normalisation (CTranslate2's way) or not (ours); padding and BOS are never chosen."""
    logits = np.array(logits, "float64")
    if left_out:
        logits[..., list(left_out)] = -np.inf
    shifted = logits - logits.max(axis=-1, keepdims=True)
    result = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    result[..., [PAD_ID, BOS_ID]] = -np.inf
    return result


def replay_beam(
    next_logits: Callable[[list[list[int]]], np.ndarray],
    *,
    beam_size: int,
    length_penalty: float,
    limit: int,
    n_best: int,
    ctranslate2_softmax: bool = False,
    finish_rule: str = "fairseq",
    stopping: str = "k_finished",
    ranking: str = "length",
    prefix: Sequence[int] = (),
) -> Replay:
    """Our beam search (keras_transformer.decoding.search's `_beam`) written plainly, with
    its three rules: `finish_rule` "fairseq" (a candidate ending in EOS joins the finished
    where it ranks among the k best of the step's 2k) or "tensor2tensor" (among the 2k);
    `stopping` "k_finished" (once k have finished), "early" (once the n-th best finished
    score is >= the best alive logP / lp(t + 2), t the step from 0) or "exact" (... / lp at
    the length limit); `ranking` "length" (logP / |Y| ** alpha, EOS counted) or "gnmt"
    (logP / ((5 + |Y|) / 6) ** alpha). The defaults are the SavedModel's search that
    CTranslate2's own beam search is (kt.decoding.beam_search); our default search is
    `finish_rule="tensor2tensor", stopping="early", ranking="gnmt"`. `prefix`: ids forced
    first (a target language), not scored.

    `next_logits(prefixes)` gives the model's logits `[rows, vocab]` of the next token after
    each prefix (BOS first). At each step the 2k best candidates are ranked; those that end
    (EOS, or any token at the length limit) among the first k (fairseq) or 2k
    (tensor2tensor) join the finished, the first k that do not stay alive. A choice is close
    where swapping two neighbours in that ranking changes who joins or stays (their margin
    counts), where the stopping rule's two sides are close (early, exact), and where two
    finished hypotheses at the n-best's cut are close."""
    k = beam_size
    joining = k if finish_rule == "fairseq" else 2 * k
    assert finish_rule in ("fairseq", "tensor2tensor"), finish_rule
    assert stopping in ("k_finished", "early", "exact"), stopping
    assert ranking in ("length", "gnmt"), ranking

    def lp(length: int) -> float:
        if ranking == "length":
            return length**length_penalty
        return ((5 + length) / 6) ** length_penalty

    alive: list[tuple[tuple[int, ...], float]] = [((), 0.0)]
    finished: list[tuple[float, tuple[int, ...]]] = []
    smallest, reached = math.inf, False
    for t in range(limit):
        logits = np.asarray(next_logits([[BOS_ID, *ids] for ids, _ in alive]))
        # CTranslate2 suppresses padding and BOS (`suppress_sequences`) before its softmax;
        # the "length" exports keep EOS at the first step (`min_decoding_length` 0).
        log_probs = log_softmax(logits, (PAD_ID, BOS_ID) if ctranslate2_softmax else ())
        at_limit = t + 1 >= limit
        if t < len(prefix):  # a forced token: the only choice, and not the model's
            forced = np.full_like(log_probs, -np.inf)
            forced[:, prefix[t]] = 0.0
            log_probs = forced
        elif at_limit:  # the last token a hypothesis may take is EOS (`force_stop`)
            log_probs[:, [i for i in range(log_probs.shape[-1]) if i != EOS_ID]] = -np.inf
        reached = reached or at_limit
        candidates = []
        for (ids, logp), row in zip(alive, log_probs, strict=True):
            for token in np.argsort(-row, kind="stable")[: 2 * k + 1]:
                if np.isfinite(row[token]):
                    candidates.append((logp + float(row[token]), (*ids, int(token))))
        candidates.sort(key=lambda candidate: -candidate[0])
        ranked = candidates[: 2 * k + 1]

        def ends(candidate, at_limit=at_limit):
            return candidate[1][-1] == EOS_ID or at_limit

        def outcome(order):
            top = order[: 2 * k]
            joins = {c[1] for i, c in enumerate(top) if ends(c) and i < joining}
            stays = [c[1] for c in top if not ends(c)][:k]
            return joins, set(stays)

        chosen = outcome(ranked)
        for i in range(len(ranked) - 1):
            swapped = [*ranked[:i], ranked[i + 1], ranked[i], *ranked[i + 2 :]]
            if outcome(swapped) != chosen:
                smallest = min(smallest, ranked[i][0] - ranked[i + 1][0])
        for logp, ids in ranked[:joining]:
            if ends((logp, ids)):
                finished.append((logp / lp(len(ids)), ids))
        keep = [c for c in ranked[: 2 * k] if not ends(c)][:k]
        alive = [(ids, logp) for logp, ids in keep]
        if at_limit or not alive:
            break
        if stopping == "k_finished":
            if len(finished) >= k:
                break
        elif len(finished) >= n_best:
            nth = sorted((score for score, _ in finished), reverse=True)[n_best - 1]
            bound = alive[0][1] / lp(limit if stopping == "exact" else t + 2)
            smallest = min(smallest, abs(nth - bound))  # stopping here or not
            if nth >= bound:
                break
    finished.sort(key=lambda f: -f[0])
    finished = finished[:k]
    for a, b in zip(finished[: n_best + 1], finished[1 : n_best + 1], strict=False):
        smallest = min(smallest, a[0] - b[0])  # the n-best's order and its cut
    trimmed = [(score, ids[:-1] if ids[-1] == EOS_ID else ids) for score, ids in finished]
    return Replay(trimmed, smallest, reached)


def beam_parts_at_a_tie(next_logits, ours: list, theirs: list, *, key=list, **search) -> str | None:
    """Why our beam search's n-best `ours` and CTranslate2's `theirs` (best first, each as
    `key(ids)` gives it: ids by default, or texts) of one sentence may differ, as text, or
    None where nothing allows it. Each engine's n-best must be its own softmax's replay
    (`replay_beam`), but where that replay meets a choice within LAST_BITS or runs into the
    length limit: then the difference comes from the two softmaxes (CTranslate2's sliver),
    from last bits at a choice that close, or from the limit, where each engine returns
    unfinished hypotheses of its own. `search`: `replay_beam`'s settings."""
    reasons = []
    for name, given, softmax in (("ours", ours, False), ("CTranslate2's", theirs, True)):
        replay = replay_beam(next_logits, ctranslate2_softmax=softmax, **search)
        if replay.at_limit:
            return "the search runs into the length limit"
        replayed = [key(list(ids)) for _, ids in replay.finished[: search["n_best"]]]
        if replayed == list(given):
            reasons.append(f"{name} is its softmax's search")
        elif replay.smallest_margin < LAST_BITS:
            reasons.append(f"{name} parts at a choice {replay.smallest_margin:.1e} apart")
        else:
            return None
    return "; ".join(reasons)


def tokens_part_at_a_tie(
    logits_at_step: np.ndarray, mine: int, other: int, *, tie: float = TIE
) -> bool:
    """Greedy search's rule: where two greedy searches first take different tokens after the
    same prefix, the model's logits of the two are within `tie` (TIE between two engines,
    SCORE_TOLERANCE within ours)."""
    return abs(float(logits_at_step[mine]) - float(logits_at_step[other])) < tie


def greedy_parts_at_a_tie(
    next_logits: Callable[[list[list[int]]], np.ndarray],
    mine: Sequence[int],
    other: Sequence[int],
    *,
    tie: float = TIE,
) -> bool:
    """Greedy search's rule on two whole outputs (ids without BOS, EOS included or not, 0s
    after it dropped): equal, or where they first differ, the model's logits after their
    common prefix (`next_logits`, as `replay_beam` takes it) give the two tokens within
    `tie`. An output that is a prefix of the other parts at its EOS."""
    mine, other = (ends_with_eos(ids) for ids in (mine, other))
    if mine == other:
        return True
    step = next(t for t, (a, b) in enumerate(zip(mine, other, strict=False)) if a != b)
    logits = np.asarray(next_logits([[BOS_ID, *mine[:step]]]))[0]
    return tokens_part_at_a_tie(logits, mine[step], other[step], tie=tie)


def ends_with_eos(ids: Sequence[int]) -> list[int]:
    """`ids` (a search's row: EOS, then padding; or a text's ids) up to its first EOS, which
    it ends with."""
    ids = [int(i) for i in ids]
    return ids[: ids.index(EOS_ID) + 1] if EOS_ID in ids else [*ids, EOS_ID]


def teacher_forced(model, source_ids: Sequence[int]) -> Callable[[list[list[int]]], np.ndarray]:
    """`replay_beam`'s `next_logits` for one sentence (`source_ids`, 0-padded or not) of a
    Keras `model` (any backend; nothing of TensorFlow imported here): the logits after each
    prefix by teacher forcing the whole prefix, memoised (the replays share most prefixes)."""
    source = np.asarray(source_ids)[None]
    memo: dict[tuple[int, ...], np.ndarray] = {}

    def call(prefixes: list[list[int]]) -> np.ndarray:
        missing = list(dict.fromkeys(tuple(p) for p in prefixes if tuple(p) not in memo))
        for length in sorted({len(p) for p in missing}):
            same = [p for p in missing if len(p) == length]
            inputs = {"source_ids": np.repeat(source, len(same), 0), "target_ids": np.array(same)}
            logits = np.asarray(model(inputs, training=False))[:, -1]
            memo.update(zip(same, logits, strict=True))
        return np.stack([memo[tuple(p)] for p in prefixes])

    return call


def length_limit(source_ids: Sequence[int], max_extra_length: int, max_length: int) -> int:
    """The searches' length limit for one sentence: its tokens (padding not counted) plus
    `max_extra_length`, at most the model's `max_length`."""
    return min(int((np.asarray(source_ids) != PAD_ID).sum()) + max_extra_length, max_length)


def search_parts_at_a_tie(
    next_logits: Callable[[list[list[int]]], np.ndarray],
    mine: Sequence[int],
    other: Sequence[int],
    *,
    tolerance: float,
    beam_size: int,
    **search,
) -> bool:
    """Whether two outputs (ids as `greedy_parts_at_a_tie` takes them) of one search of one
    sentence by two computations may differ: equal, or greedy search (`beam_size` 1) parts
    at two tokens whose logits are within `tolerance`, or beam search, replayed
    (`replay_beam`, `search`: its settings but `beam_size`), meets a choice within
    `tolerance` (LAST_BITS between two engines, SCORE_TOLERANCE within ours)."""
    if ends_with_eos(mine) == ends_with_eos(other):
        return True
    if beam_size == 1:
        return greedy_parts_at_a_tie(next_logits, mine, other, tie=tolerance)
    search = {"n_best": 1, **search}
    return replay_beam(next_logits, beam_size=beam_size, **search).smallest_margin < tolerance


def translations_part_at_a_tie(
    model, vocabularies, settings, sentence: str, ours: str, theirs: str, *, tolerance: float
) -> bool:
    """Whether two translations `ours` and `theirs` of `sentence` by one search (the
    DecodingSettings `settings`: its source prefix, target prefix, length limit and rules) of
    `model` may differ (`search_parts_at_a_tie`): greedy, where the texts, tokenized back
    with `vocabularies.target`, first part, the two tokens' logits within `tolerance`; beam,
    where the replay meets a choice within `tolerance`. `tolerance`: TIE (greedy) or
    LAST_BITS (beam) between two engines, SCORE_TOLERANCE within ours. Imports the library
    (and so TensorFlow's tokenizers) only when called."""
    import keras_transformer as kt
    from keras_transformer.decoding.settings import prefix_ids

    translator = kt.evaluation.Translator(model, vocabularies, decoding=settings)
    inputs = translator.preprocessor.generate_preprocess(
        [sentence], source_prefix=settings.source_prefix
    )
    source = np.asarray(inputs["source_ids"])[0]
    prefix = prefix_ids(settings, vocabularies.target)
    prefix = [] if prefix is None else np.asarray(prefix[0]).tolist()
    mine, other = (
        prefix + np.asarray(vocabularies.target.tokenize(text)).tolist() for text in (ours, theirs)
    )
    return search_parts_at_a_tie(
        teacher_forced(model, source),
        mine,
        other,
        tolerance=tolerance,
        beam_size=settings.beam_size,
        length_penalty=settings.length_penalty,
        limit=length_limit(source, settings.max_extra_length, model.config.max_length),
        n_best=1,
        finish_rule=settings.finish_rule,
        stopping=settings.stopping,
        ranking=settings.ranking,
        prefix=prefix,
    )


def output_ids(ids) -> list[list[int]]:
    """Each hypothesis of one sentence (a row, or an n-best of rows) as a list of ids up to
    its EOS, EOS kept, padding left out."""
    rows = []
    for row in np.atleast_2d(np.asarray(ids)):
        row = [int(i) for i in row]
        rows.append(row[: row.index(EOS_ID) + 1] if EOS_ID in row else [i for i in row if i])
    return rows


def ours_part_at_a_tie(
    next_logits: Callable[[list[list[int]]], np.ndarray], ids_a, ids_b, settings=None
) -> bool:
    """The rule of the tests that compare two computations of our own search on one sentence
    (cache or none, another batch, graph or XLA, parallel slices, one loop; tests/README.md's
    "ties.py (one engine)"): whether outputs `ids_a` and `ids_b` (ids without BOS, up to EOS
    or padded after it; a row, or an n-best of rows) may differ because the two computations
    met a choice within SCORE_TOLERANCE, where their last bits may order it either way.
    Equal outputs part nowhere: False.

    `settings` None: greedy search, whose first differing tokens (after their common
    prefix) have logits within SCORE_TOLERANCE. Otherwise `replay_beam`'s settings (the
    test's beam search: `beam_size`, `length_penalty`, `limit`, `n_best`, its rules): the
    replay meets a choice within SCORE_TOLERANCE. `next_logits`: as `replay_beam` takes it
    (`teacher_forced`)."""
    a, b = output_ids(ids_a), output_ids(ids_b)
    if a == b:
        return False
    if settings is not None:
        return replay_beam(next_logits, **settings).smallest_margin < SCORE_TOLERANCE
    (a,), (b,) = a, b
    step = next((t for t, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
    if step is None:  # one is the other cut short: no choice tells them apart
        return False
    logits = np.asarray(next_logits([[BOS_ID, *a[:step]]]))[0]
    return abs(float(logits[a[step]]) - float(logits[b[step]])) < SCORE_TOLERANCE


def search_settings(
    settings, source_ids: Sequence[int], max_length: int, prefix: Sequence[int] = ()
) -> dict | None:
    """`ours_part_at_a_tie`'s `settings` for the search that a `DecodingSettings` (or
    anything with its fields) `settings` runs on one sentence `source_ids` (0-padded or not)
    of a model of `max_length`: None for greedy search (beam size 1); else `replay_beam`'s
    beam size, length penalty, rules, n-best, the sentence's length limit and the forced
    `prefix` ids."""
    if settings.beam_size == 1:
        return None
    return {
        "beam_size": settings.beam_size,
        "length_penalty": settings.length_penalty,
        "limit": length_limit(source_ids, settings.max_extra_length, max_length),
        "n_best": settings.n_best,
        "finish_rule": settings.finish_rule,
        "stopping": settings.stopping,
        "ranking": settings.ranking,
        "prefix": [int(i) for i in prefix],
    }


def tokenized_back(tokenizer, texts: str | Sequence[str], prefix: Sequence[int] = ()) -> np.ndarray:
    """A translation (a text, or an n-best of texts) as the ids a search gave for it: the
    forced `prefix` ids that the text leaves out, the text's ids by the target `tokenizer`
    (a list, or a ragged tensor), EOS; `[len]`, or `[n, len]` 0-padded to one width."""
    rows = []
    for text in [texts] if isinstance(texts, str) else texts:
        ids = tokenizer.tokenize([text])
        ids = ids.to_list()[0] if hasattr(ids, "to_list") else ids[0]
        rows.append([*map(int, prefix), *map(int, ids), EOS_ID])
    width = max(map(len, rows))
    padded = np.array([row + [PAD_ID] * (width - len(row)) for row in rows], "int64")
    return padded[0] if isinstance(texts, str) else padded


def rows_parted_at_ties(
    model, source_ids, outputs_a, outputs_b, settings=None, *, prefix: Sequence[int] = ()
) -> list[int]:
    """The rows of the batch `source_ids` (`[batch, len]`, 0-padded) whose outputs by two
    computations of one search of ours differ (ids as `ours_part_at_a_tie` takes them: each
    row's ids, or its n-best; texts through `tokenized_back`). Each must part at a choice
    within SCORE_TOLERANCE (`ours_part_at_a_tie`, `model` teacher forced, the search of the
    `DecodingSettings` `settings` replayed: None or beam size 1 is greedy search; `prefix`
    the forced target ids): an AssertionError names the first row that does not. `settings`
    may be a tuple of two, where the two computations run two searches whose outputs agree
    but at a tie of either (an n-best's first and the best): either replay may allow it.
    Only the rows that differ are replayed; the caller keeps a floor of rows alike."""
    max_length = model.config.max_length
    searches = settings if isinstance(settings, tuple) else (settings,)
    parted = []
    for row, (source, a, b) in enumerate(
        zip(np.asarray(source_ids), outputs_a, outputs_b, strict=True)
    ):
        if output_ids(a) == output_ids(b):
            continue
        next_logits = teacher_forced(model, source[source != PAD_ID])
        assert any(
            ours_part_at_a_tie(
                next_logits,
                a,
                b,
                None if search is None else search_settings(search, source, max_length, prefix),
            )
            for search in searches
        ), (
            f"row {row} (source {source.tolist()}) differs, not at a choice within "
            f"SCORE_TOLERANCE: {output_ids(a)} and {output_ids(b)}"
        )
        parted.append(row)
    return parted
