"""``train_run`` → run directory, ``load_run`` / ``find_checkpoint`` / ``translate_split``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import sacrebleu
import torch
import yaml
from safetensors.torch import load_file

from posenc.config import load_config
from posenc.errors import CheckpointError
from posenc.runs.run import find_checkpoint
from posenc.tasks.translation import train_run
from posenc.tasks.translation.config import DecodeConfig, RunConfig
from posenc.tasks.translation.load import load_run, translate_split
from posenc.tasks.translation.prepare import load_meta
from tests.helpers.tiny import METHODS, N_TEST, NEAR_INIT, read, run_overrides


def _config(run: Path, data: Path, *extra: str) -> RunConfig:
    return load_config(RunConfig, None, run_overrides(run, data, *NEAR_INIT, "train.save_every=1", "train.keep_last=2",
                                                      "train.average_last=2", *extra))


@pytest.fixture(scope="module")
def cape_run(tmp_path_factory: pytest.TempPathFactory, toy_prepared: Path) -> Path:
    run = tmp_path_factory.mktemp("run") / "cape"
    train_run(_config(run, toy_prepared, *METHODS["cape"]))
    return run


def test_run_directory_layout(cape_run: Path, toy_prepared: Path) -> None:
    names = {p.name for p in cape_run.iterdir()}
    assert {"config.yaml", "spm.model", "checkpoints", "train.csv", "valid.csv", "summary.json"} <= names
    assert (cape_run / "spm.model").read_bytes() == (toy_prepared / "spm.model").read_bytes()
    # keep_last=2 pruned step 1; average_last=2 averaged steps 2 and 3
    assert sorted(p.name for p in (cape_run / "checkpoints").iterdir()) == ["average", "ckpt_00000002", "ckpt_00000003"]
    summary = json.loads((cape_run / "summary.json").read_text())
    assert summary["checkpoint"] == "checkpoints/average"  # relative to the run directory
    assert [int(r.split(",")[0]) for r in read(cape_run / "train.csv")[1:]] == [1, 2, 3]


def test_saved_config_is_resolved_from_the_data(cape_run: Path, toy_prepared: Path) -> None:
    """vocab_size comes from the tokenizer and CAPE's source scale α from meta.json (CAPE §5.3)."""
    saved = yaml.safe_load((cape_run / "config.yaml").read_text())
    meta = load_meta(toy_prepared)
    assert saved["model"]["vocab_size"] == meta["vocab_size"]
    assert saved["model"]["position"]["cape"]["source_scale"] == meta["alpha"]
    # paths are stored relative to the run directory (a data directory outside it stays absolute)
    assert saved["data_dir"] == str(toy_prepared.resolve()) and saved["out_dir"] == "."


def test_explicit_cape_scale_is_kept(tmp_path: Path, toy_prepared: Path) -> None:
    run = tmp_path / "run"
    train_run(_config(run, toy_prepared, *METHODS["cape"], "model.position.cape.source_scale=0.5", "train.max_steps=1",
                               "train.average_last=0"))
    assert yaml.safe_load((run / "config.yaml").read_text())["model"]["position"]["cape"]["source_scale"] == 0.5


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v for k, v in model.state_dict().items()}


def test_load_run_picks_the_checkpoint(cape_run: Path) -> None:
    ckpts = cape_run / "checkpoints"
    assert find_checkpoint(cape_run) == ckpts / "average"
    assert find_checkpoint(cape_run, "latest") == ckpts / "ckpt_00000003"
    assert find_checkpoint(cape_run, str(ckpts / "ckpt_00000002")) == ckpts / "ckpt_00000002"
    for which, name in (("auto", "average"), ("latest", "ckpt_00000003"), (str(ckpts / "ckpt_00000002"), "ckpt_00000002")):
        loaded = load_run(cape_run, which)
        stored = load_file(str(ckpts / name / "model.safetensors"))
        state = _state(loaded.model)
        assert loaded.checkpoint == ckpts / name and not loaded.model.training
        for key, value in stored.items():
            assert torch.equal(state[key], value), (which, key)
    assert load_run(cape_run).prepend_src_bos  # CAPE prepends BOS to the source (CAPE §5.3)


def test_find_checkpoint_errors(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="no checkpoints"):
        find_checkpoint(tmp_path)
    with pytest.raises(CheckpointError, match="no averaged checkpoint"):
        find_checkpoint(tmp_path, "average")
    with pytest.raises(CheckpointError, match="not a run directory"):
        load_run(tmp_path)


def test_a_config_yaml_the_checkpoint_cannot_be_rebuilt_from_is_one_line(tmp_path: Path, cape_run: Path) -> None:
    """The model is rebuilt from config.yaml with the checkpoint's sections; a config.yaml that
    today's RunConfig refuses (the run's record, which judges the checkpoint, is intact) names
    both files in one line."""
    run = tmp_path / "run"
    shutil.copytree(cape_run, run)
    with (run / "config.yaml").open("a", encoding="utf-8") as f:
        f.write("bogus: 1\n")
    with pytest.raises(CheckpointError) as err:
        load_run(run)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{run / 'config.yaml'} with the sections saved in ")
    assert f"{run / 'checkpoints' / 'average'}: not a usable run config (bogus: unknown option" in message


def test_translate_split_scores_with_sacrebleu(cape_run: Path, toy_prepared: Path) -> None:
    loaded = load_run(cape_run)
    scores = translate_split(loaded, "valid", DecodeConfig(beam=1))
    hyp = cape_run / "translations" / "valid.beam1.hyp"
    assert scores["hyp"] == "translations/valid.beam1.hyp" and scores["beam"] == 1 and scores["split"] == "valid"
    hyps, refs = read(hyp), read(toy_prepared / "valid.tgt")
    assert len(hyps) == len(refs)
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score, abs=1e-9)
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score, abs=1e-9)
    assert json.loads((cape_run / "translations" / "valid.beam1.json").read_text()) == scores
    greedy_again = translate_split(loaded, "test", DecodeConfig(beam=1))
    assert greedy_again["lines"] == N_TEST


def test_rnn_nmt_has_no_source_bos(tmp_path: Path, toy_prepared: Path) -> None:
    run = tmp_path / "rnn"
    summary = train_run(_config(run, toy_prepared, *METHODS["rnn-nmt"], "train.max_steps=1", "train.average_last=0"))
    loaded = load_run(run)
    assert type(loaded.model).__name__ == "RNNNMT" and not loaded.prepend_src_bos
    assert summary["params"] == sum(p.numel() for p in loaded.model.parameters())


@pytest.mark.parametrize("emptied", ["config.yaml", "checkpoints/average/config.yaml"])
def test_an_emptied_config_of_the_run_or_its_checkpoint_is_refused_in_one_line(
        tmp_path: Path, cape_run: Path, emptied: str) -> None:
    """posenc writes both files whole (atomically); an empty one is damage, never "all defaults":
    the model would otherwise be rebuilt from defaults or from config.yaml alone."""
    run = tmp_path / "run"
    shutil.copytree(cape_run, run)
    (run / emptied).write_text("", encoding="utf-8")
    with pytest.raises(CheckpointError) as err:
        load_run(run)
    message = str(err.value)
    assert "\n" not in message
    if emptied == "config.yaml":
        assert message.startswith(f"{run / 'config.yaml'}: empty")
    else:
        assert message.startswith(f"{run / 'checkpoints' / 'average'}: its config.yaml records no model section")


def test_loading_a_run_imports_no_experiment_side() -> None:
    """``posenc translate``/``export``/``average`` and :func:`load_run` users import the loading
    module alone: in a fresh interpreter it pulls in neither the task module (the grid, its
    reports and analyses) nor matplotlib, while the package's ``TASK`` is still there when asked for."""
    import subprocess
    import sys

    code = ("import sys, posenc.tasks.translation.load\n"
            "print(sorted(m for m in ('matplotlib', 'posenc.tasks.translation.task') if m in sys.modules))\n"
            "from posenc.tasks.translation import TASK\n"
            "print(type(TASK).__name__)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == ["[]", "TranslationTask"]
