"""Batches (masks cover only outputs, reproducible), the output-only loss, the accuracy metric with
an oracle model, the shipped configs, and a tiny end-to-end run of the driver."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml
from torch import Tensor, nn

from posenc.config import load_config
from posenc.errors import ConfigError
from posenc.tasks.base import Task
from posenc.tasks.lengthgen.config import LengthgenExperimentConfig, expand
from posenc.tasks.lengthgen.generators import SEP, VOCAB_SIZE, example
from posenc.tasks.lengthgen.task import LengthgenTask, accuracy, collate, summarize, training_batch

CONFIGS = Path(__file__).resolve().parents[3] / "src" / "posenc" / "configs" / "experiments"


def small_cfg(task: str = "reverse", **data):
    exp = load_config(LengthgenExperimentConfig, CONFIGS / "lengthgen_small.yaml")
    cfg = expand(exp)[0][3]
    from dataclasses import replace

    return replace(cfg, data=replace(cfg.data, task=task, **data))


def test_collate_masks_cover_only_outputs() -> None:
    batch = collate([([4, 5, 5], [5, 5, 4]), ([4], [4, 4])])
    assert batch.tokens.tolist() == [[4, 5, 5, SEP, 5, 5, 4], [4, SEP, 4, 4, 0, 0, 0]]
    assert batch.out_mask.tolist() == [[False] * 4 + [True] * 3, [False, False, True, True, False, False, False]]
    assert batch.mask.tolist() == [[True] * 7, [True] * 4 + [False] * 3]


def test_training_batches_are_pure_and_in_range() -> None:
    cfg = small_cfg("parity")
    task = LengthgenTask()
    assert isinstance(task, Task)
    a, b = task.train_batches(cfg, 2, 0, 1), task.train_batches(cfg, 2, 0, 1)
    assert all(torch.equal(x.tokens, y.tokens) for x, y in zip(a, b))
    assert not torch.equal(a[0].tokens, task.train_batches(cfg, 3, 0, 1)[0].tokens)
    # rank r of world w gets global batch (epoch·S + i)·w + r
    assert torch.equal(task.train_batches(cfg, 0, 1, 2)[0].tokens, training_batch(cfg, 1, world=2).tokens)
    lengths = {int(x.tokens.shape[1]) - 2 for x in a}  # input + SEP + one parity bit
    assert min(lengths) >= 1 and max(lengths) <= cfg.data.train_max_length and len(lengths) > 3


class Oracle(nn.Module):
    """Predicts the true next token (from a lookup of the batch) except at a chosen position."""

    def __init__(self, tokens: Tensor, wrong: tuple[int, int] | None = None) -> None:
        super().__init__()
        self.tokens, self.wrong = tokens, wrong

    def forward(self, tokens: Tensor, mask: Tensor) -> Tensor:
        nxt = self.tokens[:, 1:].clone()
        if self.wrong is not None:
            nxt[self.wrong] = (nxt[self.wrong] + 1) % VOCAB_SIZE
        return F.one_hot(nxt, VOCAB_SIZE).float() * 10


def test_accuracy_and_loss_on_outputs_only() -> None:
    batch = collate([example("reverse", 5, 1, i) for i in range(3)])
    seq, tok = accuracy(Oracle(batch.tokens), batch)
    assert seq.tolist() == [True] * 3 and tok.tolist() == [1.0] * 3
    seq, tok = accuracy(Oracle(batch.tokens, (1, 6)), batch)  # an output token of row 1 (SEP at 5)
    assert seq.tolist() == [True, False, True] and tok[1].item() == pytest.approx(4 / 5)
    seq, _ = accuracy(Oracle(batch.tokens, (1, 2)), batch)  # an input token: not scored
    assert seq.all()
    out = LengthgenTask().loss(Oracle(batch.tokens, (1, 2)), batch)
    assert int(out.ntokens) == 15
    expected = 15 * -F.log_softmax(torch.tensor([10.0] + [0.0] * (VOCAB_SIZE - 1), dtype=torch.float64), 0)[0]
    # each token's NLL (~9e-4) comes out of a float32 log of a sum near 1: a few float32 eps each,
    # whatever the float path; one token more or fewer would be off by the NLL itself
    assert float(out.loss) == pytest.approx(float(expected), abs=15 * 8 * torch.finfo(torch.float32).eps)


def test_summary_splits_seen_and_unseen() -> None:
    rows = [{"length": n, "seq_acc": a, "token_acc": a} for n, a in ((10, 1.0), (40, 0.5), (50, 0.2), (60, 0.0))]
    s = summarize(rows, 40)
    assert s["seen_seq_acc"] == 0.75 and s["unseen_seq_acc"] == pytest.approx(0.1)


@pytest.mark.parametrize("name", ["lengthgen_small", "lengthgen_gpu", "lengthgen_cpu"])
def test_shipped_configs_load_and_expand(name: str) -> None:
    exp = load_config(LengthgenExperimentConfig, CONFIGS / f"{name}.yaml")
    cells = expand(exp)
    assert {c[3].out_dir for c in cells} == {str(exp.root / t / m / f"seed{s}") for t, m, s, _ in cells}
    assert len(cells) == len({(t, m, s) for t, m, s, _ in cells})
    assert {c[:3] for c in cells} == {(t, m, s) for t in exp.tasks for m in exp.methods for s in exp.seeds}
    for _, _, _, cfg in cells:
        assert all(n <= cfg.data.test_max_length for n in cfg.data.test_lengths)
    if name == "lengthgen_gpu":
        assert exp.seeds == [1, 2, 3] and cells[0][3].data.train_max_length == 40 and cells[0][3].data.test_max_length == 500
        assert len(exp.tasks) == 7
    if name == "lengthgen_cpu":  # seen <= 20, unseen to 60, patience on seen-length validation, 1 thread per job
        assert exp.seeds == [1, 2, 3] and set(exp.tasks) == {"copy", "reverse", "bucket_sort", "parity", "decimal_addition", "binary_addition"} and len(exp.methods) == 9
        for _, _, _, cfg in cells:
            d, t = cfg.data, cfg.train
            assert d.train_max_length <= 20 and d.test_max_length >= 60 and t.num_threads == 0
            assert t.patience and t.validate_every > 0 and t.save_every == t.validate_every and t.keep_last > t.patience


def test_unknown_task_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown"):
        LengthgenExperimentConfig(methods={"ape": {}}, tasks=["copy", "nonsense"])


def test_driver_end_to_end(tmp_path: Path) -> None:
    """A 3-step grid (2 methods × 2 tasks × 1 seed) writes results, plots and the table; rerun reuses results."""
    from posenc.experiments.runner import run_experiment

    exp = yaml.safe_load((CONFIGS / "lengthgen_small.yaml").read_text())
    exp.update(out_dir=str(tmp_path / "exp"), tasks=["parity", "binary_addition"], seeds=[1])
    exp["methods"] = {"ape": exp["methods"]["ape"], "rpe": {"model.position.name": "rpe", "model.position.shaw.k": 8}}
    exp["base"]["model"].update(d_model=16, d_ff=32, layers=1)
    exp["base"]["data"].update(train_max_length=6, test_max_length=12, test_step=4, batch_size=4, eval_samples=4)
    exp["base"]["train"].update(max_steps=3, warmup=2, log_every=1, device="cpu", num_threads=1)
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(exp))
    report = run_experiment(str(path))
    text = (report / "README.md").read_text()
    assert "| parity |" in text and "| binary_addition |" in text and "| task | ape | rpe |" in text
    assert (report / "parity.png").stat().st_size > 0 and (report / "binary_addition.png").stat().st_size > 0
    res = json.loads((tmp_path / "exp" / "parity" / "rpe" / "seed1" / "results.json").read_text())
    assert res["summary"]["steps"] == 3 and [r["length"] for r in res["metrics"]["by_length"]] == [4, 8, 12]
    stored = json.loads((tmp_path / "exp" / "parity" / "rpe" / "seed1" / "summary.json").read_text())
    assert res["summary"]["flat"] == stored["flat"]  # the report's status reads the trainer's flatness
    from posenc.tasks.lengthgen.report import run_status

    assert run_status(res) == stored["status"]
    (tmp_path / "exp" / "parity" / "rpe" / "seed1" / "checkpoints").rename(tmp_path / "moved")
    run_experiment(str(path))  # done runs are not retrained (no checkpoint is needed)
    assert not (tmp_path / "exp" / "parity" / "rpe" / "seed1" / "checkpoints").exists()
    assert json.loads((tmp_path / "exp" / "parity" / "rpe" / "seed1" / "results.json").read_text()) == res


def test_jobs_2_equals_jobs_1(tmp_path: Path) -> None:
    """Worker processes (``--jobs 2``) give the same per-run results as one process, one log each."""
    from posenc.experiments.runner import run_experiment

    exp = yaml.safe_load((CONFIGS / "lengthgen_small.yaml").read_text())
    exp.update(tasks=["parity"], seeds=[1])
    exp["methods"] = {"ape": exp["methods"]["ape"], "rpe": {"model.position.name": "rpe", "model.position.shaw.k": 8}}
    exp["base"]["model"].update(d_model=16, d_ff=32, layers=1)
    exp["base"]["data"].update(train_max_length=6, test_max_length=12, test_step=4, batch_size=4, eval_samples=4)
    exp["base"]["train"].update(max_steps=3, warmup=2, log_every=1, device="cpu", num_threads=1)
    results = {}
    for jobs in (1, 2):
        exp["out_dir"] = str(tmp_path / f"jobs{jobs}")
        path = tmp_path / f"jobs{jobs}.yaml"
        path.write_text(yaml.safe_dump(exp))
        run_experiment(str(path), jobs=jobs)
        results[jobs] = {m: json.loads((tmp_path / f"jobs{jobs}" / "parity" / m / "seed1" / "results.json").read_text())
                         for m in ("ape", "rpe")}
    for m in ("ape", "rpe"):
        for r in results.values():
            r[m]["summary"].pop("wall_s")
        assert results[1][m] == results[2][m]
    assert sorted(p.name for p in (tmp_path / "jobs2" / "logs").iterdir()) == [
        ".posenc-run", "experiment.json", "parity-ape-seed1.log", "parity-rpe-seed1.log"]  # posenc's log directory


def test_the_curriculum_spans_the_same_updates_on_any_number_of_ranks() -> None:
    """Under torchrun each update consumes ``world`` global batches; the curriculum follows the
    update, so with 4 ranks it does not end 4 times sooner."""
    cfg = small_cfg("reverse", curriculum_steps=100, train_max_length=20)
    task = LengthgenTask()
    update = 10  # curriculum range at update 10: lengths up to 1 + round(19 * 11 / 100) = 3
    for world in (1, 4):
        for rank in range(world):
            batch = task.train_batches(cfg, 0, rank, world)[update]
            assert batch.tokens.shape[1] - 1 <= 2 * 3  # input ≤ 3, SEP, output ≤ 3 (reverse)
