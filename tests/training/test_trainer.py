import csv
from pathlib import Path

import pytest
import torch

from posenc.config import from_dict
from posenc.errors import CheckpointError, ConfigError
from posenc.models.seq2seq_loss import Seq2SeqLoss
from posenc.training import TrainConfig, Trainer, load_checkpoint
from tests.helpers.cuda import cuda_only
from tests.helpers.training import (
    batch_of,
    batches_fn,
    latest,
    make_trainer,
    random_pairs,
    tiny_model,
    train,
    train_config,
)

PAIRS = random_pairs(40, seed=2)
TRAIN = batches_fn(PAIRS, max_tokens=48)
VALID = [batch_of(random_pairs(6, seed=9))]


def _weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    different = [k for k in a if not torch.equal(a[k], b[k])]
    assert not different, f"differ: {different[:3]}"


class Crash(Exception):
    pass


class CrashingLoss(Seq2SeqLoss):
    """Raises on the ``crash_at``-th call: an interruption in the middle of an update."""

    def __init__(self, crash_at: int) -> None:
        super().__init__(0.1, 0)
        self.calls, self.crash_at = 0, crash_at

    def __call__(self, model, batch):
        self.calls += 1
        if self.calls == self.crash_at:
            raise Crash()
        return super().__call__(model, batch)


@pytest.mark.parametrize("interrupt", ["crash", "stop"])
def test_resume_is_bit_identical_with_dropout_and_shape(tmp_path: Path, interrupt: str) -> None:
    # 40 pairs → several batches per epoch; 9 updates of 2 micro-batches cross epoch boundaries.
    cfg = dict(max_steps=9, update_freq=2, save_every=3, validate_every=2)
    reference = tiny_model(dropout=0.3, position="shape")
    full = train(reference, TRAIN, train_config(**cfg), tmp_path / "full", valid_batches=VALID)
    assert full.state.epoch >= 1 and full.state.step == 9

    run = tmp_path / "interrupted"
    first = tiny_model(dropout=0.3, position="shape")
    if interrupt == "crash":  # dies inside update 8; the last checkpoint is step 6
        with pytest.raises(Crash):
            train(first, TRAIN, train_config(**cfg), run, valid_batches=VALID, loss_fn=CrashingLoss(2 * 7 + 2))
    else:  # a clean stop at step 5 (not a multiple of save_every): checkpoint at the end
        train(first, TRAIN, train_config(**{**cfg, "max_steps": 5}), run, valid_batches=VALID)
    resumed_model = tiny_model(dropout=0.3, position="shape", seed=123)  # other init: must be overwritten
    resumed = train(resumed_model, TRAIN, train_config(**cfg), run, valid_batches=VALID)
    assert resumed.state.step == 9 and resumed.state.epoch == full.state.epoch
    assert resumed.state.batch_index == full.state.batch_index
    assert resumed.state.tokens == full.state.tokens
    _assert_same(_weights(reference), _weights(resumed_model))
    # the logs of the resumed run continue the interrupted one without duplicated steps
    steps = [int(r["step"]) for r in csv.DictReader(open(run / "train.csv"))]
    assert steps == list(range(1, 10))
    assert [float(r["loss"]) for r in csv.DictReader(open(run / "train.csv"))] == pytest.approx(
        [float(r["loss"]) for r in csv.DictReader(open(tmp_path / "full" / "train.csv"))], rel=1e-6)


def test_resume_without_rng_restore_would_differ(tmp_path: Path) -> None:
    """Control for the test above: dropout/SHAPE randomness really depends on the RNG state."""
    a, b = tiny_model(dropout=0.3, position="shape"), tiny_model(dropout=0.3, position="shape")
    train(a, TRAIN, train_config(max_steps=2, seed=3), tmp_path / "a")
    train(b, TRAIN, train_config(max_steps=2, seed=4), tmp_path / "b")
    assert any(not torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))


def test_accumulating_two_halves_equals_one_full_batch(tmp_path: Path) -> None:
    pairs = random_pairs(8, seed=5)
    full, half1, half2 = batch_of(pairs), batch_of(pairs[:4]), batch_of(pairs[4:])
    one, two = tiny_model(), tiny_model()
    t1 = make_trainer(one, train_config(max_steps=1, update_freq=1), tmp_path / "one")
    t1.fit(lambda e, r, w: [full])
    t2 = make_trainer(two, train_config(max_steps=1, update_freq=2), tmp_path / "two")
    r2 = t2.fit(lambda e, r, w: [half1, half2])
    for (name, p), q in zip(one.named_parameters(), two.parameters()):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-6, rtol=0, msg=name)
        # Adam's first step is ≈ lr·sign(g): for gradients that are zero up to rounding (e.g.
        # key biases, which softmax ignores) it turns rounding noise into ±lr, so skip those.
        if p.grad.abs().max() > 1e-5:
            torch.testing.assert_close(q, p, atol=1e-6, rtol=0, msg=name)
    assert r2.train[0]["tokens"] == full.ntokens
    # the gradient is the mean over tokens: equal to autograd of the per-token loss
    ref = tiny_model()
    out = Seq2SeqLoss(0.1)(ref, full)
    (out.loss / out.ntokens).backward()
    for (name, p), q in zip(ref.named_parameters(), two.parameters()):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-6, rtol=0, msg=name)


def test_logs_checkpoints_and_average(tmp_path: Path) -> None:
    cfg = train_config(max_steps=6, save_every=2, keep_last=2, average_last=2, validate_every=3, log_every=2)
    result = train(tiny_model(), TRAIN, cfg, tmp_path, valid_batches=VALID)
    assert result.stopped == "max_steps"
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["average", "ckpt_00000004", "ckpt_00000006"]
    rows = list(csv.DictReader(open(tmp_path / "train.csv")))
    assert list(rows[0]) == ["step", "epoch", "loss", "nll", "ppl", "lr", "tokens", "wall_s", "tokens_per_s"]
    assert [int(r["step"]) for r in rows] == [2, 4, 6]
    for r in rows:
        assert float(r["ppl"]) == pytest.approx(torch.tensor(float(r["nll"])).exp().item(), rel=1e-5)
        assert float(r["loss"]) > float(r["nll"]) > 0  # label smoothing adds to the nll
    assert int(rows[-1]["tokens"]) == result.state.tokens
    valid = list(csv.DictReader(open(tmp_path / "valid.csv")))
    assert list(valid[0]) == ["step", "loss", "ppl", "metric", "wall_s"] and [int(v["step"]) for v in valid] == [3, 6]
    assert valid[0]["metric"] == ""
    wall = [float(r["wall_s"]) for r in rows]
    assert all(0 < a <= b for a, b in zip(wall, wall[1:])) and 0 < float(valid[0]["wall_s"]) <= wall[-1]
    assert any((tmp_path / "tensorboard").iterdir())
    a, b = (load_checkpoint(tmp_path / "checkpoints" / n).model for n in ("ckpt_00000004", "ckpt_00000006"))
    avg = load_checkpoint(result.average).model
    assert avg.keys() == a.keys()
    for key in avg:
        torch.testing.assert_close(avg[key], ((a[key].double() + b[key].double()) / 2).float(), rtol=0, atol=0)


def test_validation_loss_matches_direct_evaluation(tmp_path: Path) -> None:
    model = tiny_model()
    result = train(model, TRAIN, train_config(max_steps=2, validate_every=2), tmp_path, valid_batches=VALID)
    model.eval()
    with torch.no_grad():
        out = Seq2SeqLoss(0.1)(model, VALID[0])
    assert result.valid[-1]["loss"] == pytest.approx(float(out.loss / out.ntokens), rel=1e-6)
    assert result.valid[-1]["ppl"] == pytest.approx(float(torch.exp(out.nll / out.ntokens)), rel=1e-6)


def test_metric_callback_and_patience(tmp_path: Path) -> None:
    def bleu(model):
        return 12.5

    cfg = train_config(max_steps=50, validate_every=1, metric_every=2, patience=1, lr=50.0, warmup=1)
    result = train(tiny_model(), TRAIN, cfg, tmp_path, valid_batches=VALID, metric_fn=bleu)
    # with a huge learning rate validation loss soon stops improving → early stop
    assert result.stopped == "patience" and result.state.step < 50
    assert [r["step"] for r in result.valid] == list(range(1, result.state.step + 1))
    assert all((r["metric"] == 12.5) == (r["step"] % 2 == 0) for r in result.valid)
    assert all(r["metric"] is None for r in result.valid if r["step"] % 2)
    with pytest.raises(ConfigError, match="metric_fn"):
        train(tiny_model(), TRAIN, train_config(metric_every=1), tmp_path / "x")


def test_the_trainer_knows_no_task(tmp_path: Path) -> None:
    """No default loss, no width guessed from ``model.cfg``: the Noam schedule needs ``d_model``
    given; the task's metric is ``metric_every`` (``bleu_every`` is no option)."""
    with pytest.raises(TypeError):
        Trainer(tiny_model(), train_config(), tmp_path / "a")  # type: ignore[call-arg]
    bare = Trainer(tiny_model(), train_config(max_steps=1), tmp_path / "b", Seq2SeqLoss(0.1))
    with pytest.raises(ConfigError, match="needs d_model"):
        bare.fit(TRAIN)
    assert from_dict(TrainConfig, {"metric_every": 3}).metric_every == 3
    with pytest.raises(ConfigError, match="bleu_every: unknown option for TrainConfig"):
        from_dict(TrainConfig, {"bleu_every": 3})


def test_fp16_on_cpu_falls_back_with_warning(tmp_path: Path) -> None:
    with pytest.warns(UserWarning, match="fp32"):
        trainer = make_trainer(tiny_model(), train_config(precision="fp16"), tmp_path)
    assert trainer.precision == "fp32" and trainer.device.type == "cpu"


def test_resume_refuses_other_model_config_and_model_only_checkpoint(tmp_path: Path) -> None:
    train(tiny_model(), TRAIN, train_config(max_steps=2, average_last=2, save_every=1), tmp_path)
    other = tiny_model(position="learned")
    # the Trainer alone refuses weights that do not fit; whether a run's config matches its
    # checkpoint is the run opener's one rule (posenc.runs.run.Run.open, tests/runs)
    with pytest.raises(CheckpointError, match="ckpt_00000002: checkpoint lacks parameter"):
        train(other, TRAIN, train_config(max_steps=3), tmp_path)
    average = load_checkpoint(tmp_path / "checkpoints" / "average")
    with pytest.raises(CheckpointError, match="model-only checkpoint"):
        train(tiny_model(), TRAIN, train_config(max_steps=3), tmp_path / "new", resume=average)


@pytest.mark.parametrize("resume", [True, "checkpoints/ckpt_00000002", Path("checkpoints/ckpt_00000002")])
def test_fit_resumes_only_from_a_loaded_checkpoint(tmp_path: Path, resume: object) -> None:
    """One resume path: the caller (a run directory's opener) loads the checkpoint and passes it;
    a bool or a path is refused before anything is trained or written."""
    train(tiny_model(), TRAIN, train_config(max_steps=2, save_every=1), tmp_path)
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "checkpoints").iterdir()}
    with pytest.raises(TypeError, match="loaded Checkpoint or None"):
        make_trainer(tiny_model(), train_config(max_steps=3), tmp_path).fit(TRAIN, resume=resume)  # type: ignore[arg-type]
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "checkpoints").iterdir()} == before
    resumed = make_trainer(tiny_model(), train_config(max_steps=3), tmp_path).fit(TRAIN, resume=latest(tmp_path))
    assert [row["step"] for row in resumed.train] == [3]


def test_max_epochs_counts_updates_per_epoch(tmp_path: Path) -> None:
    per_epoch = len(TRAIN(0, 0, 1))
    result = train(tiny_model(), TRAIN, train_config(max_steps=0, max_epochs=2, update_freq=3), tmp_path)
    steps = -(-len(TRAIN(0, 0, 1)) // 3) + -(-len(TRAIN(1, 0, 1)) // 3)
    assert per_epoch >= 4
    assert result.stopped == "max_epochs" and result.state.epoch == 2 and result.state.step == steps
    assert result.state.tokens == sum(b.ntokens for e in (0, 1) for b in TRAIN(e, 0, 1))


def test_clipping_bounds_the_gradient_norm(tmp_path: Path) -> None:
    model = tiny_model()
    result = train(model, TRAIN, train_config(max_steps=1, clip_norm=0.01), tmp_path)
    norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
    assert norm == pytest.approx(0.01, rel=1e-4) and result.train[0]["gnorm"] > 0.01


@cuda_only("needs CUDA")
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_on_cuda(tmp_path: Path, precision: str) -> None:
    cfg = dict(max_steps=4, device="cuda", precision=precision, save_every=2)
    model = tiny_model()
    result = train(model, TRAIN, train_config(**cfg), tmp_path)
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in result.train)
    ckpt = load_checkpoint(result.last_checkpoint)
    assert (ckpt.state["scaler"] is not None) == (precision == "fp16")
    resumed = tiny_model(seed=9)
    train(resumed, TRAIN, train_config(**{**cfg, "max_steps": 6}), tmp_path)
    assert next(resumed.parameters()).device.type == "cuda"
