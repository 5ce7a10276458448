"""Load a trained run and translate/score its data splits.

``load_run(run_dir, checkpoint)`` rebuilds the model from the config saved *with the
checkpoint* (its ``arch``, ``data`` and ``model`` sections), never from ``config.yaml`` alone,
and loads weights from ``checkpoints/average`` (if present), the latest checkpoint, or a given
path. Paths in the run's config.yaml are resolved against the run directory, so a moved or
copied run works; with ``confine`` (the CLI) nothing outside the run directory is read or
written except what the command line names.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from posenc.config import load_yaml, to_dict
from posenc.data.spm import Tokenizer
from posenc.data.text import read_lines
from posenc.decoding.loaded import LoadedRun
from posenc.decoding.translate import translate_file
from posenc.errors import CheckpointError, ConfigError, RunDirError
from posenc.evaluation.metrics import corpus_scores
from posenc.files import atomic_write_text
from posenc.runs.ownership import dir_kind
from posenc.runs.run import Run, read_record
from posenc.runs.same_run import RunRecord, Verdict, read_stored, same_record, same_run
from posenc.tasks.translation.config import ARCH_SECTIONS, DecodeConfig, RunConfig, located_config
from posenc.tasks.translation.spec import SPEC, VOCAB_FILE, VOCAB_KEY
from posenc.tasks.translation.train import build_model
from posenc.training import checkpoint as ck

SPLITS = ("train", "valid", "test")


def _with_sections(stored: dict[str, Any], sections: dict[str, Any]) -> dict[str, Any]:
    """``stored`` (a config or a record's fingerprint) with the ``arch``, ``data`` and model
    sections saved with a checkpoint in place of its own."""
    arch = str(sections.get("arch", stored.get("arch", "transformer")))
    own = {"data": sections.get("data"), ARCH_SECTIONS.get(arch, "model"): sections.get("model")}
    return {**stored, "arch": arch, **{k: v for k, v in own.items() if isinstance(v, dict)}}


def check_checkpoint_run(run_dir: Path, sections: dict[str, Any], where: Path, record: RunRecord | None = None) -> None:
    """Refuse a checkpoint of another run by the one rule (:func:`~posenc.runs.same_run.same_run`):
    the run's ``record`` (default: its fingerprint.json; runs without one are not checked) against
    that record with the checkpoint's stored ``arch``/``data``/model ``sections`` in place of its
    own, so only those sections can differ. The record, not config.yaml, is the reference: where
    the run trained (e.g. the precision ``auto`` chose there, bf16 on a GPU) is recorded there and
    must not refuse the run on a CPU. A checkpoint of another model copied into a run is never
    decoded with the run's vocabulary or averaged in; options added since either was written pass."""
    record = read_record(run_dir) if record is None else record
    if record is None or not isinstance(record.config, dict):
        return
    try:
        saved = read_stored(RunConfig, _with_sections(record.config, sections), str(run_dir))
    except ConfigError as err:
        raise CheckpointError(f"{where}: the config saved with the checkpoint is not usable ({err})") from None
    verdict = same_run(record, saved)
    if verdict.kind == "stale":
        raise CheckpointError(f"{where}: a checkpoint of another model or data than the run {run_dir} "
                              f"({verdict.detail}); remove it or pass the run it belongs to")


def checkpoint_run_config(run: Run, verdict: Verdict | None = None) -> RunConfig:
    """What the model of the opened checkpoint is rebuilt from: the run's config.yaml with the
    ``arch``, ``data`` and model sections saved with that checkpoint in place of its own, resolved
    against the run directory (never a file a later command could change), once the checkpoint is
    judged to be the run's (:func:`check_checkpoint_run`). Both files hold what posenc wrote there
    or the run is refused: a model section in the checkpoint's, a run config in config.yaml.
    ``verdict``: the caller's verdict on the run (a grid cell's); a checkpoint recording the record
    it judged is the run's and is not judged again (:func:`~posenc.runs.same_run.same_record`)."""
    ckpt = run.opened_checkpoint()
    sections, where = ckpt.config, ckpt.path
    if not isinstance(sections.get("model"), dict):
        raise CheckpointError(f"{where}: its config.yaml records no model section (not a complete posenc checkpoint)")
    if run.record is not None and not _vouched(run, verdict):
        check_checkpoint_run(run.out, sections, where, run.record)
    if not run.stored_config:
        raise CheckpointError(f"{run.out / 'config.yaml'}: empty (the run's config is gone); restore it from the "
                              "run's copy or retrain")
    try:
        return located_config(_with_sections(run.stored_config, sections), run.out)
    except ConfigError as err:
        raise CheckpointError(f"{run.out / 'config.yaml'} with the sections saved in {where}: not a usable "
                              f"run config ({err})") from None


def _vouched(run: Run, verdict: Verdict | None) -> bool:
    """Whether the opened checkpoint records the run ``verdict`` judged (its state's record)."""
    ckpt = run.opened_checkpoint()
    record = ckpt.state.get("record")
    if verdict is None or verdict.kind == "stale" or not isinstance(record, dict):
        return False
    return same_record(verdict, RunRecord.read(record, where=f"{ckpt.path}/state.json"), SPEC.derived_keys)


def check_vocab(state: dict[str, Any], digest: str, vocab: Path, where: Path) -> None:
    """A one-line CheckpointError unless the checkpoint state ``state`` (of ``where``) was saved
    with the vocabulary whose sha256 is ``digest`` (the file ``vocab``); no check for a checkpoint
    written before the hash was stored."""
    saved = state.get(VOCAB_KEY)
    if saved is not None and saved != digest:
        raise CheckpointError(f"{vocab}: not the vocabulary {where.name} was trained with (sha256 {digest[:12]}, "
                              f"checkpoint {str(saved)[:12]}): spm.model belongs to another run")


def check_vocabulary(cfg: RunConfig, tok: Tokenizer, state: dict[str, Any], run_dir: Path, where: Path) -> None:
    """The run's spm.model (``tok``) must be the vocabulary the checkpoint at ``where`` was trained
    with: first its size against the model's (``cfg``; token ids beyond the embedding would crash
    decoding), then its hash against the one stored in the checkpoint's ``state``. One-line
    CheckpointError otherwise."""
    expected = int(getattr(getattr(cfg, cfg.model_section), "vocab_size", 0) or 0)
    if expected and tok.vocab_size != expected:
        raise CheckpointError(f"{run_dir / VOCAB_FILE}: {tok.vocab_size} pieces, but the checkpoint's model has a "
                              f"vocabulary of {expected}: spm.model belongs to another run")
    check_vocab(state, tok.sha256, run_dir / VOCAB_FILE, where)


def load_run(run_dir: str | Path, checkpoint: str = "auto", device: str = "cpu", confine: bool = False,
             verdict: Verdict | None = None) -> LoadedRun:
    """The trained run in ``run_dir`` with the weights of ``checkpoint`` (``auto``: the average if
    present, else the latest; ``latest``, ``average`` or a path), its model rebuilt from the
    config saved with that checkpoint, checked against the run's record and vocabulary: the run
    opened once (:meth:`~posenc.runs.run.Run.finished`). ``verdict``: the caller's verdict on the
    run (:func:`checkpoint_run_config`)."""
    run = Run.finished(run_dir, checkpoint)
    return _loaded(run, checkpoint_run_config(run, verdict), device, confine)


def loaded_after_training(trained: Run, checkpoint: str = "auto", device: str = "cpu") -> LoadedRun:
    """:func:`load_run` of the run ``trained`` in this process (its resolved config and config
    sections in memory): a checkpoint holding this run's sections is rebuilt from that config,
    without reading it again; any other is judged and rebuilt as :func:`load_run` does."""
    run = Run.finished(trained.out, checkpoint, stored=False)
    sections = json.loads(json.dumps({k: to_dict(v) for k, v in trained.sections.items()}))
    if sections and all(run.opened_checkpoint().config.get(k) == v for k, v in sections.items()):
        return _loaded(run, trained.cfg, device, False)
    run.stored_config = load_yaml(run.out / "config.yaml")
    return _loaded(run, checkpoint_run_config(run), device, False)


def _loaded(run: Run, cfg: RunConfig, device: str, confine: bool) -> LoadedRun:
    """The model of ``cfg`` with the opened checkpoint's weights, once the run's vocabulary is the
    checkpoint's (before the weights: a clearer error than their shapes)."""
    ckpt = run.opened_checkpoint()
    tok = Tokenizer.from_file(run.out / VOCAB_FILE)
    model = build_model(cfg, tok.pad_id)
    check_vocabulary(cfg, tok, ckpt.state, run.out, ckpt.path)
    ck.restore_model(model, ckpt)
    return LoadedRun(cfg, model.to(device).eval(), tok, ckpt.path, run.out, confine)


def decode_options(dc: DecodeConfig, run: LoadedRun) -> dict[str, Any]:
    return dict(
        beam=dc.beam, length_penalty=dc.length_penalty, max_len_a=dc.max_len_a, max_len_b=dc.max_len_b,
        batch_tokens=dc.batch_tokens, max_source_len=run.cfg.data.max_source_len,
        prepend_src_bos=run.prepend_src_bos,
    )


def _inside(path: Path, root: Path, what: str, where: str = "the run directory") -> Path:
    """``path`` (symlinks resolved) if it lies inside ``root`` (``where``), else a one-line ConfigError."""
    real, base = path.resolve(), root.resolve()
    if not real.is_relative_to(base):
        raise ConfigError(f"{what} {path} lies outside {where} {root}; pass --data DIR to use it")
    return real


def split_files(run: LoadedRun, split: str, data_dir: str | Path | None = None) -> tuple[Path, Path]:
    """Source and reference file of ``split``. A confined run reads them inside the run directory,
    from the ``data_dir`` given by the caller, or from the data directory its config names when
    that is posenc-prepared data (an experiment's shared data, marker kind ``data``)."""
    if split not in SPLITS:
        raise ConfigError(f"--split must be one of {', '.join(SPLITS)}, got {split!r}")
    data = Path(data_dir) if data_dir is not None else Path(run.cfg.prepared_dir)
    src, ref = data / f"{split}.src", data / f"{split}.tgt"
    if run.confine and data_dir is None:  # no symlink out of the run, or of the posenc-prepared data it names
        root, where = (data, "its prepared data") if dir_kind(data) == "data" else (run.root, "the run directory")
        src, ref = _inside(src, root, "data file", where), _inside(ref, root, "data file", where)
    for f in (src, ref):
        if not f.is_file():
            raise ConfigError(f"{f}: no such file (the run's prepared data; pass --data DIR)")
    return src, ref


def alpha_key(alpha: float) -> str:
    """``0.6`` → ``"0.6"``: a length penalty α as a results.json key and in hypothesis file names."""
    return f"{float(alpha):g}"


def recorded_translations(root: Path) -> set[str]:
    """Run-relative paths of the translations that ``root/results.json`` scored (every ``hyp`` and
    its ``.json``): the record an experiment's result came from. Empty without a readable file."""
    try:
        stack: list[Any] = [json.loads((root / "results.json").read_text(encoding="utf-8"))]
    except (OSError, ValueError):
        return set()
    found: set[str] = set()
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("hyp"), str):
                found |= {node["hyp"], str(Path(node["hyp"]).with_suffix(".json"))}
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def translate_split(run: LoadedRun, split: str, decode: DecodeConfig | None = None,
                    data_dir: str | Path | None = None, stem: str | None = None, user: bool = False,
                    at_bound: bool | None = None) -> dict[str, Any]:
    """Translate ``split`` of the run's prepared data; write hypotheses and scores into the run
    directory's ``translations/`` (as ``<stem>.beam<K>.hyp``/``.json``, ``stem`` defaulting to the
    split's name); return scores (paths relative to the run directory), which record the α decoded
    with and, when ``at_bound`` is given (an α chosen by the validation search), whether that α sat
    at the search's hard bound. A ``user`` decode
    (``posenc translate --split``) is named ``<split>.beam<K>.lp<α>`` instead, beside the files
    an experiment scored, and a RunDirError refuses it before decoding if results.json names it."""
    src, ref = split_files(run, split, data_dir)
    dc = decode or run.cfg.decode
    root = run.root
    out = root / "translations"
    if run.confine and out.exists():
        _inside(out, root, "translations directory")
    name = f"{stem or split}.beam{dc.beam}" + (f".lp{alpha_key(dc.length_penalty)}" if user else "")
    hyp, scored = out / f"{name}.hyp", out / f"{name}.json"
    if user:
        _check_not_recorded(root, (hyp, scored))
    options = decode_options(dc, run)
    out.mkdir(parents=True, exist_ok=True)
    with torch.inference_mode():
        # a split line over data.max_source_len is truncated with a warning (scored, never fatal)
        translate_file(run.model, run.tokenizer, src, hyp, **options, too_long="truncate")
    scores = corpus_scores(read_lines(hyp), read_lines(ref), hyp_name=str(hyp), ref_name=f"{split}.tgt")
    keep = {k: scores[k] for k in ("bleu", "chrf", "bleu_signature", "chrf_signature", "bleu_text", "lines")}
    keep.update(split=split, beam=dc.beam, length_penalty=dc.length_penalty, hyp=_relative(hyp, root),
                checkpoint=_relative(run.checkpoint, root))
    if at_bound is not None:
        keep["at_bound"] = bool(at_bound)
    atomic_write_text(scored, json.dumps(keep, indent=2))
    return keep


def _check_not_recorded(root: Path, paths: tuple[Path, ...]) -> None:
    """One-line RunDirError when one of ``paths`` is a translation that results.json scored."""
    recorded = recorded_translations(root)
    for path in paths:
        if _relative(path, root) in recorded:
            raise RunDirError(f"{path} holds the translations {root / 'results.json'} scored; posenc does not "
                              "replace them (move results.json away to decode under this name)")


def _relative(path: Path, root: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)
