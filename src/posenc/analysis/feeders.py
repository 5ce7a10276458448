"""How each analysis reads a grid: one feeder per analysis, from a :class:`~posenc.analysis.view.GridView`
and the analysis's typed options (analysis/options.py) into its library function, which writes
its files into ``out``.

A feeder reads only the members of the view that its entry's ``needs`` name
(analysis/registry.py), so it runs on the grid of any task whose runs carry them. Every feeder
takes ``(v, options, out)``: the view of one grid part (one setting; every seed for a pooled
analysis, one seed otherwise), the analysis's options and the existing folder it writes into.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

from posenc.analysis import (
    length_bleu,
    length_diff,
    long_sources,
    plots,
    position_nll,
    shift_invariance,
    significance,
    speed,
    swapped,
    tokenwise,
)
from posenc.analysis.common import Buckets, Translate
from posenc.analysis.options import (
    BootstrapOptions,
    LengthOptions,
    LongSourceOptions,
    NoOptions,
    PositionNllOptions,
    ShiftOptions,
    SwappedOptions,
)
from posenc.analysis.view import GridView
from posenc.data import settings as data_settings
from posenc.data.corpora import Pair
from posenc.models.seq2seq import Seq2SeqTransformer

log = logging.getLogger("posenc")


def source_buckets(view: GridView, width: int) -> Buckets:
    """Uniform source-length buckets up to the longest test source.

    Args:
        view: the grid part (its test set).
        width: the buckets' width (``bucket_width``).

    Returns:
        Buckets of ``width`` from 0; the open-ended last one starts at the longest source rounded
        down to a multiple of ``width``.
    """
    longest = max(view.lengths(view.src), default=width)
    return Buckets.uniform(width, max(width, (longest // width) * width))


def feed_length_bleu(v: GridView, options: LengthOptions, out: Path) -> None:
    """length_bleu on every method's outputs pooled over the seeds, seen lengths from the training sources.

    Args:
        v: the view of one grid part: every seed of the setting.
        options: its options (``bucket_width``).
        out: the existing folder it writes into.
    """
    hyps = {m: v.hyps(m) for m in v.methods}
    length_bleu.length_bleu(v.lengths(v.src), v.ref, hyps, out, source_buckets(v, options.bucket_width),
                            baseline=v.baseline, train_lengths=v.train_lengths)


def feed_bootstrap(v: GridView, options: BootstrapOptions, out: Path) -> None:
    """The paired bootstrap between every two methods on their outputs pooled over the seeds.

    Args:
        v: the view of one grid part: every seed of the setting.
        options: its options (``bootstrap_samples``).
        out: the existing folder it writes into.
    """
    significance.bootstrap_table({m: v.hyps(m) for m in v.methods}, v.ref, out, n_samples=options.bootstrap_samples)


def feed_length_diff(v: GridView, options: LengthOptions, out: Path) -> None:
    """length_diff on every method's output lengths pooled over the seeds.

    Args:
        v: the view of one grid part: every seed of the setting.
        options: its options (``bucket_width``).
        out: the existing folder it writes into.
    """
    hyp_lengths = {m: v.lengths(v.hyps(m)) for m in v.methods}
    length_diff.length_diff(v.lengths(v.src), v.lengths(v.ref), hyp_lengths, out,
                            source_buckets(v, options.bucket_width), train_lengths=v.train_lengths)


def feed_long_sources(v: GridView, options: LongSourceOptions, out: Path) -> None:
    """Neishi's long-sentence endpoints: sources longer than every training source, per seed. Where
    no test source is that long, long_sources.md says so and nothing else is written.

    Args:
        v: the view of one grid part: every seed of the setting.
        options: its options (``bootstrap_samples``, ``outputs``).
        out: the existing folder it writes into.
    """
    n = len(v.src) // len(v.seeds)  # v.src repeats the test set once per seed
    src_lengths, ref_lengths, longest = v.lengths(v.src[:n]), v.lengths(v.ref[:n]), max(v.train_lengths)
    if not long_sources.long_subset(src_lengths, longest):
        plots.write_markdown(out / "long_sources.md", [{"note": "No test source is longer than the longest training "
                                                       f"source ({longest} subwords): nothing to compare."}], ["note"])
        return
    hyps = {m: v.hyps_by_seed(m, greedy=options.outputs == "greedy") for m in v.methods}
    hyp_lengths = {m: [v.lengths(h) for h in per_seed] for m, per_seed in hyps.items()}
    long_sources.long_sources(src_lengths, v.ref[:n], ref_lengths, hyps, hyp_lengths, out, train_max=longest,
                              baseline=v.baseline, n_samples=options.bootstrap_samples)


def feed_shift_invariance(v: GridView, options: ShiftOptions, out: Path) -> None:
    """Encoder-state similarity under position offsets on the first ``shift_sentences`` test sources,
    each in its method's own source format (Transformers only: an RNN encoder has no positions).

    Args:
        v: the view of one grid part: one seed of the setting.
        options: its options (``shift_sentences``, ``shift_offsets``).
        out: the existing folder it writes into.
    """
    n = options.shift_sentences
    models = {m: model for m, model in v.models().items() if isinstance(model, Seq2SeqTransformer)}  # not RNN-NMT
    sources = {m: [s for s, _ in v.pairs(v.src[:n], v.ref[:n], m)] for m in models}
    shift_invariance.shift_invariance(models, sources, out, offsets=options.shift_offsets, pad_id=v.tok.pad_id)


def _device_list(devices: dict[str, str]) -> str:
    """``{"ape": "cpu", "rpe": "cuda"}`` -> ``"ape: cpu, rpe: cuda"`` (the speed note's device listing)."""
    return ", ".join(f"{m}: {d}" for m, d in devices.items())


def feed_speed(v: GridView, options: NoOptions, out: Path) -> None:
    """Training speed against the baseline, among the runs trained on the baseline's device (wall
    clock compares runs of one machine): the runs trained elsewhere are named under the table, and a
    baseline alone on its device gets a one-line note instead of a table.

    Args:
        v: the view of one grid part: one seed of the setting.
        options: none (:class:`~posenc.analysis.options.NoOptions`).
        out: the existing folder it writes into.
    """
    devices = {m: v.device(m) for m in v.methods}
    base = v.baseline
    same = [m for m in v.methods if devices[m] == devices[base]]
    elsewhere = _device_list({m: d for m, d in devices.items() if d != devices[base]})
    if len(same) < 2 and elsewhere:
        (out / "speed.md").write_text(f"Not compared (seed {v.seeds[0]}): its runs trained on different devices ("
                                      f"{_device_list(devices)}); wall-clock speed compares runs of one machine.\n",
                                      encoding="utf-8")
        return
    speed.speed({m: v.run_dir(m) for m in same}, out, baseline=base, params={m: v.params(m) for m in same})
    if elsewhere:
        with (out / "speed.md").open("a", encoding="utf-8") as f:
            f.write(f"\nLeft out (seed {v.seeds[0]}): trained on another device than {base} ({devices[base]}): "
                    f"{elsewhere}.\n")


def feed_tokenwise(v: GridView, options: NoOptions, out: Path) -> None:
    """Gold-token scores of each method against the baseline on the test pairs (SHAPE §4, Fig. 4), binned by
    decoder position and by the token's frequency rank in the training targets: a folder ``tokenwise_<method>``
    per method.

    Args:
        v: the view of one grid part: one seed of the setting.
        options: none (:class:`~posenc.analysis.options.NoOptions`).
        out: the existing folder it writes into.
    """
    counts = tokenwise.token_counts(v.tok.encode(t) for t in v.training_texts()[1])
    base = v.baseline
    for m in v.methods:
        if m != base:
            tokenwise.tokenwise(v.model(m), v.model(base), v.pairs(v.src, v.ref, m), counts, out / f"tokenwise_{m}",
                                v.tok.bos_id, v.tok.eos_id, v.tok.pad_id, names=(m, base),
                                baseline_pairs=v.pairs(v.src, v.ref, base))


def feed_position_nll(v: GridView, options: PositionNllOptions, out: Path) -> None:
    """CAPE Fig. 8 on test pairs stacked until the target has >= ``stack_tokens`` tokens (a warning
    and nothing written when the test set is too small to stack that far).

    Args:
        v: the view of one grid part: one seed of the setting.
        options: its options (``stack_tokens``).
        out: the existing folder it writes into.
    """
    min_tokens = options.stack_tokens
    pairs = [Pair(s, t) for s, t in zip(v.src, v.ref)]
    stacked = data_settings.stack(pairs, min_tokens, length_fn=lambda s: len(v.tok.encode(s)))
    if not stacked:
        log.warning("position_nll: the test set is too small to stack to %d target tokens", min_tokens)
        return
    src, tgt = [p.src for p in stacked], [p.tgt for p in stacked]
    position_nll.position_nll(v.models(), {m: v.pairs(src, tgt, m) for m in v.methods}, out,
                              v.tok.bos_id, v.tok.eos_id, v.tok.pad_id, train_max=v.train_max_target)


def training_subsample(v: GridView, n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """Training pairs drawn without replacement, in corpus order.

    Args:
        v: the grid part (its training data).
        n: how many pairs (all of them when the split has fewer).
        seed: the draw's seed (fixed: every report draws the same pairs).

    Returns:
        (sources, targets) of the drawn pairs.
    """
    src, tgt = v.training_texts()
    keep = sorted(random.Random(seed).sample(range(len(src)), min(n, len(src))))
    return [src[i] for i in keep], [tgt[i] for i in keep]


def feed_swapped(v: GridView, options: SwappedOptions, out: Path) -> None:
    """SHAPE Table 1 on a random subsample of the INTERPOLATE *training* data (as the paper: the
    model has seen these groups, so only the order of the sentences is new); nothing is written
    when the training data has no full ``<sep>``-joined groups.

    Args:
        v: the view of one grid part: one seed of the setting.
        options: its options (``swapped_pairs``: the subsample's size).
        out: the existing folder it writes into.
    """
    sep = " <sep> "
    src, tgt = training_subsample(v, options.swapped_pairs)
    size = v.group_size  # full groups only: SHAPE Table 1 moves X1 of X1..X10
    groups = [swapped.make_groups(s.split(sep), t.split(sep), size)[0]
              for s, t in zip(src, tgt) if s.count(sep) == t.count(sep) == size - 1]
    if not groups:
        log.info("swapped: setting %s has no <sep>-joined groups; skipped", v.setting)
        return
    decoders: dict[str, Translate] = {m: v.decoder(m) for m in v.methods}
    swapped.swapped(groups, decoders, out)
