"""Validation never shares an example with the test set, and the training/metric pipeline can fit:
a small LM trained on a fixed batch memorises it and the evaluation metric says so."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from posenc.config import load_config
from posenc.errors import ConfigError
from posenc.models.lm import DecoderLM, LMConfig
from posenc.tasks.lengthgen.config import LengthgenData, LengthgenExperimentConfig, expand
from posenc.tasks.lengthgen.generators import PAD, VOCAB_SIZE, example
from posenc.tasks.lengthgen.task import LengthgenTask, accuracy, collate, output_loss

CONFIGS = Path(__file__).resolve().parents[3] / "src" / "posenc" / "configs" / "experiments"


def _test_examples(cfg) -> set[tuple[tuple[int, ...], tuple[int, ...]]]:
    d = cfg.data
    return {(tuple(i), tuple(o)) for n in d.test_lengths for i, o in (example(d.task, n, d.eval_seed, j) for j in range(d.eval_samples))}


def _valid_examples(cfg) -> set[tuple[tuple[int, ...], tuple[int, ...]]]:
    out = set()
    for batch in LengthgenTask().valid_batches(cfg):
        for row, mask in zip(batch.tokens.tolist(), batch.mask.tolist()):
            seq = [t for t, m in zip(row, mask) if m]
            out.add(tuple(seq))
    return out


@pytest.mark.parametrize("name", ["lengthgen_small", "lengthgen_cpu", "lengthgen_gpu"])
def test_validation_shares_no_example_with_test(name: str) -> None:
    exp = load_config(LengthgenExperimentConfig, CONFIGS / f"{name}.yaml")
    seen_tasks = set()
    for task, _, _, cfg in expand(exp):
        if task in seen_tasks:
            continue
        seen_tasks.add(task)
        d = cfg.data
        assert d.valid_seed not in (d.eval_seed, cfg.train.seed)
        low, high = d.train_lengths
        assert all(low <= n <= high for n in d.validation_lengths)  # validation is at seen lengths
        assert not set(d.validation_lengths) & set(d.test_lengths)
        from posenc.tasks.lengthgen.generators import SEP

        test = {i + (SEP,) + o for i, o in _test_examples(cfg)}
        valid = _valid_examples(cfg)
        assert valid and not valid & test, f"{name}/{task}: {len(valid & test)} validation examples are test examples"


def test_validation_lengths_spread_and_skip_test_lengths() -> None:
    d = LengthgenData(task="reverse", train_max_length=20, test_max_length=60, test_step=5)
    assert d.validation_lengths == [1, 7, 13, 19]
    assert LengthgenData(task="reverse", train_max_length=2, test_step=1, test_max_length=5).validation_lengths == [1, 2]
    with pytest.raises(ConfigError, match="valid_seed"):
        LengthgenData(valid_seed=LengthgenData().eval_seed)


def test_a_small_lm_memorises_a_batch_and_the_metric_agrees() -> None:
    """The loss, the teacher-forced metric and eval mode are consistent: fitting a fixed batch of
    reverse examples drives its sequence accuracy to 1 (and an untrained model is far from it)."""
    torch.manual_seed(0)
    model = DecoderLM(LMConfig(layers=2, d_model=32, heads=2, d_ff=64, vocab_size=VOCAB_SIZE), pad_id=PAD)
    batch = collate([example("reverse", n, 5, j) for n in (3, 4, 5) for j in range(4)])
    model.eval()
    assert accuracy(model, batch)[0].float().mean() < 0.5
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(300):
        model.train()
        opt.zero_grad()
        out = output_loss(model, batch)
        (out.loss / out.ntokens).backward()
        opt.step()
    model.eval()
    seq, tok = accuracy(model, batch)
    assert seq.all() and torch.allclose(tok, torch.ones_like(tok))


def test_run_summary_records_stop_reason_and_status(tmp_path: Path) -> None:
    """A run with patience writes the trainer's stop reason and convergence status in results.json."""
    from posenc.experiments.experiment import Cell
    from posenc.tasks.lengthgen.task import TASK

    exp = load_config(LengthgenExperimentConfig, CONFIGS / "lengthgen_cpu.yaml")
    cfg = expand(exp)[0][3]
    cfg = replace(cfg, out_dir=str(tmp_path / "run"),
                  model=replace(cfg.model, d_model=16, d_ff=32, layers=1, heads=2),
                  data=replace(cfg.data, batch_size=4, eval_samples=4, eval_batch_size=4, test_max_length=30, test_step=10),
                  train=replace(cfg.train, max_steps=6, warmup=1, validate_every=2, save_every=2, keep_last=0, patience=50))
    res = TASK.run_cell_config(TASK.experiment(exp), Cell("bucket_sort", "ape", 1), cfg)
    s = res["summary"]
    assert s["stopped"] == "max_steps" and s["status"] == "still improving" and s["converged"] is False
    assert s["best_step"] in (2, 4, 6) and s["evaluated_step"] == s["best_step"]


def test_a_changed_config_is_stale(tmp_path: Path) -> None:
    """A finished run is reused only under the same config: another one is refused, or retrained
    with ``rerun_stale``; an unchanged grid skips it."""
    import yaml

    from posenc.experiments.runner import task_runner

    experiment = task_runner("lengthgen")

    exp = yaml.safe_load((CONFIGS / "lengthgen_cpu.yaml").read_text())
    exp.update(out_dir=str(tmp_path / "exp"), tasks=["parity"], seeds=[1], task_overrides={})
    exp["methods"] = {"ape": exp["methods"]["ape"]}
    exp["base"]["model"].update(d_model=16, d_ff=32, layers=1, heads=2)
    exp["base"]["data"].update(batch_size=4, eval_samples=4, eval_batch_size=4, curriculum_steps=0, test_max_length=30, test_step=10)
    exp["base"]["train"].update(max_steps=2, warmup=1, validate_every=1, save_every=1)
    experiment(exp, [])
    done = tmp_path / "exp" / "parity" / "ape" / "seed1" / "results.json"
    first = done.read_text()
    experiment(exp, [])
    assert done.read_text() == first  # skipped, not retrained
    with pytest.raises(ConfigError, match=r"the config changed: train.max_steps \(2 -> 3\)"):
        experiment(exp, ["base.train.max_steps=3"])
    experiment(exp, ["base.train.max_steps=3"], rerun_stale=True)
    assert '"steps": 3' in done.read_text()


def test_partial_report_from_committed_results(tmp_path: Path) -> None:
    """The report of a partial grid: finished runs' cells with each seed's status, missing ones "–";
    a result of another config (stale) is listed with what differs, never in the tables."""
    import json

    from posenc.runs.same_run import RunRecord
    from posenc.tasks.lengthgen.config import run_config
    from posenc.tasks.lengthgen.report import main
    from posenc.tasks.lengthgen.task import summarize

    exp = load_config(LengthgenExperimentConfig, CONFIGS / "lengthgen_cpu.yaml")
    rows = [{"length": n, "seq_acc": a, "token_acc": a} for n, a in ((10, 1.0), (20, 0.9), (30, 0.2))]
    for seed, stopped in ((1, "max_steps"), (2, "patience"), (3, "patience")):
        run = tmp_path / "res" / "reverse" / "ape" / f"seed{seed}"
        run.mkdir(parents=True)
        record = RunRecord.of(run_config(exp, "reverse", "ape", seed)).to_dict()
        if seed == 3:
            record["extension"]["max_steps"] = 123  # trained with another budget
        summary = {"steps": 3000, "stopped": stopped, "best_step": 2800, "warmup": 100}
        (run / "results.json").write_text(json.dumps({"task": "reverse", "method": "ape", "seed": seed, "summary": summary,
                                                      "record": record, "metrics": summarize(rows, 20)}))
    assert main(["lengthgen_cpu", str(tmp_path / "res"), str(tmp_path / "rep")]) == 0
    text = (tmp_path / "rep" / "README.md").read_text()
    # seed 2 stopped by patience but recorded no validation curve: "no curve", never "converged"
    assert "| reverse | ape | 95.0 ± 0.0 | 20.0 ± 0.0 | 20.0 ± 0.0 | 1: capped @ 3000, 2: no curve @ 3000 |" in text
    assert "| copy | – |" in text and "| reverse | 0/2 (no curve, still improving) |" in text
    assert "- reverse / ape / seed 3: train.max_steps (123 -> 6000)" in text
