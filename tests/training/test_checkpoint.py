from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from posenc.errors import CheckpointError
from posenc.models.seq2seq_loss import Seq2SeqLoss
from posenc.training import (
    average_checkpoints,
    checkpoint_name,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    restore_model,
    save_average,
    save_checkpoint,
)
from posenc.training import checkpoint as ck
from tests.helpers.training import batch_of, prune_checkpoints, random_pairs, tiny_model


def _trained_model_and_optimizer():
    model = tiny_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9)
    batch = batch_of(random_pairs(4))
    for _ in range(2):
        opt.zero_grad()
        Seq2SeqLoss(0.1)(model, batch).loss.backward()
        opt.step()
    return model, opt


def _save_simple(path: Path, value: float, step: int = 1) -> Path:
    state = {"w": torch.full((2, 3), value), "b": torch.tensor([value, 2 * value])}
    return save_checkpoint(path, state, state={"kind": "train", "step": step}, config={"model": {"d": 3}})


def test_round_trip_is_bit_exact(tmp_path: Path) -> None:
    model, opt = _trained_model_and_optimizer()
    assert model.src_embed.weight is model.tgt_embed.weight  # tied weights are saved once
    path = save_checkpoint(tmp_path / checkpoint_name(7), model.state_dict(), state={"step": 7, "note": "x"},
                           config={"model": {"d_model": 16}}, optim_state=opt.state_dict(),
                           tensors={"rng.torch.0": torch.get_rng_state()})
    assert sorted(p.name for p in path.iterdir()) == ["config.yaml", "model.safetensors", "optim.safetensors", "state.json"]
    ckpt = load_checkpoint(path)
    assert ckpt.step == 7 and ckpt.state["note"] == "x" and ckpt.config == {"model": {"d_model": 16}}
    saved = model.state_dict()
    assert saved.keys() == ckpt.model.keys()
    assert all(torch.equal(saved[k], ckpt.model[k]) for k in saved)
    assert ckpt.model["src_embed.weight"] is ckpt.model["tgt_embed.weight"]
    assert torch.equal(ckpt.tensors["rng.torch.0"], torch.get_rng_state())
    ref, got = opt.state_dict(), ckpt.optimizer_state()
    assert got["param_groups"] == ref["param_groups"]
    assert ref["state"].keys() == got["state"].keys()
    for i, entry in ref["state"].items():
        assert entry.keys() == got["state"][i].keys()
        assert all(torch.equal(entry[k], got["state"][i][k]) for k in entry)
    fresh = tiny_model(seed=5)
    restore_model(fresh, ckpt)
    fresh_opt = torch.optim.Adam(fresh.parameters(), lr=1.0)
    fresh_opt.load_state_dict(got)
    assert fresh_opt.param_groups[0]["betas"] == (0.9, 0.98)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), fresh.parameters()))


def _one_line_error(path: Path, **kw) -> str:
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path, **kw)
    message = str(info.value)
    assert "\n" not in message and message
    return message


def test_truncated_and_garbage_files_raise_one_line_errors(tmp_path: Path) -> None:
    path = _save_simple(tmp_path / "ckpt_00000001", 1.0)
    weights = path / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    assert "truncated" in _one_line_error(path)
    assert "safetensors" in _one_line_error(path, verify=False)  # the safetensors parser itself
    weights.write_bytes(b"\x07garbage" * (len(data) // 8) + b"\x00" * (len(data) % 8))
    assert "corrupt" in _one_line_error(path)
    assert "model.safetensors" in _one_line_error(path, verify=False)
    weights.write_bytes(data[:9] + bytes([data[9] ^ 0xFF]) + data[10:])  # same size, one flipped byte
    assert "checksum" in _one_line_error(path)
    weights.write_bytes(data)
    load_checkpoint(path)  # intact again


def test_missing_files_and_bad_json(tmp_path: Path) -> None:
    assert "no such directory" in _one_line_error(tmp_path / "nope")
    path = _save_simple(tmp_path / "ckpt_00000001", 1.0)
    (path / "model.safetensors").unlink()
    assert "missing model.safetensors" in _one_line_error(path)
    path = _save_simple(tmp_path / "ckpt_00000002", 1.0)
    (path / "state.json").write_text("{not json")
    assert "state.json" in _one_line_error(path)
    path = _save_simple(tmp_path / "ckpt_00000003", 1.0)
    (path / "config.yaml").unlink()
    assert "missing config.yaml" in _one_line_error(path)


def test_shape_and_config_mismatch(tmp_path: Path) -> None:
    model = tiny_model()
    path = save_checkpoint(tmp_path / "c", model.state_dict(), config={"model": {"d_model": 16, "heads": 2}})
    ckpt = load_checkpoint(path)
    bigger = torch.nn.Linear(3, 3)
    with pytest.raises(CheckpointError, match="lacks parameter 'weight'"):
        restore_model(bigger, ckpt)
    state = dict(ckpt.model)
    state["output_bias"] = torch.zeros(2)
    bad = save_checkpoint(tmp_path / "d", {k: v.clone() for k, v in state.items()})
    with pytest.raises(CheckpointError, match="unexpected parameter 'output_bias'"):
        restore_model(model, load_checkpoint(bad))
    wrong = {k: (torch.zeros(3, 3) if k == "src_embed.weight" else v.clone()) for k, v in ckpt.model.items()}
    with pytest.raises(CheckpointError, match=r"shape \(3, 3\) in the checkpoint, model expects \(24, 16\)"):
        restore_model(model, load_checkpoint(save_checkpoint(tmp_path / "e", wrong)))


def test_keep_last_and_latest(tmp_path: Path) -> None:
    for step in (5, 10, 15, 20, 25):
        _save_simple(tmp_path / checkpoint_name(step), float(step), step)
    (tmp_path / "average").mkdir()  # other directories are not checkpoints
    assert latest_checkpoint(tmp_path).name == "ckpt_00000025"
    removed = prune_checkpoints(tmp_path, keep_last=2)
    assert [p.name for p in removed] == ["ckpt_00000005", "ckpt_00000010", "ckpt_00000015"]
    assert [p.name for p in list_checkpoints(tmp_path)] == ["ckpt_00000020", "ckpt_00000025"]
    assert prune_checkpoints(tmp_path, keep_last=0) == []
    assert latest_checkpoint(tmp_path / "empty") is None


def test_average_of_three_equals_hand_mean(tmp_path: Path) -> None:
    torch.manual_seed(1)
    states = [{"w": torch.randn(4, 5), "h": torch.randn(3).half(), "n": torch.tensor([7])} for _ in range(3)]
    for s in states:
        s["tied"] = s["w"]
    paths = [save_checkpoint(tmp_path / checkpoint_name(i), s, state={"step": i}) for i, s in enumerate(states)]
    avg = average_checkpoints(paths)
    expected_w = ((states[0]["w"].double() + states[1]["w"].double() + states[2]["w"].double()) / 3).float()
    expected_h = ((states[0]["h"].double() + states[1]["h"].double() + states[2]["h"].double()) / 3).half()
    assert torch.equal(avg["w"], expected_w) and torch.equal(avg["h"], expected_h)
    assert avg["h"].dtype == torch.float16 and torch.equal(avg["n"], torch.tensor([7]))
    assert avg["tied"] is avg["w"]
    out = save_average(paths, tmp_path / "average")
    loaded = load_checkpoint(out)
    assert torch.equal(loaded.model["w"], expected_w)
    assert loaded.state["kind"] == "average" and loaded.state["averaged_from"] == [p.name for p in paths]
    states[2]["n"] = torch.tensor([8])
    save_checkpoint(paths[2], states[2])
    with pytest.raises(CheckpointError, match="non-float buffer 'n'"):
        average_checkpoints(paths)


def test_failed_save_leaves_no_partial_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = _save_simple(tmp_path / "ckpt_00000001", 1.0)

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(ck, "_write_text", broken)  # fails after the tensors were written
    with pytest.raises(CheckpointError, match="disk full"):  # one line, not the bare OSError
        _save_simple(tmp_path / "ckpt_00000002", 2.0)
    with pytest.raises(CheckpointError, match="disk full"):
        _save_simple(good, 3.0)  # overwriting an existing checkpoint keeps the old one intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt_00000001"]
    assert torch.equal(load_checkpoint(good).model["w"], torch.full((2, 3), 1.0))


def test_stale_temporaries_are_ignored_and_removed(tmp_path: Path) -> None:
    _save_simple(tmp_path / "ckpt_00000001", 1.0)
    stale = tmp_path / ".tmp-ckpt_00000002-123-abc"
    stale.mkdir()
    save_file({"x": torch.zeros(1)}, str(stale / "model.safetensors"))
    assert [p.name for p in list_checkpoints(tmp_path)] == ["ckpt_00000001"]
    old = tmp_path / ".old-ckpt_00000003-0a1b2c3d"  # crash between the two renames of a replace
    _save_simple(old, 3.0, 3)
    ck.remove_stale_temporaries(tmp_path)
    assert not stale.exists() and not old.exists()
    assert [p.name for p in list_checkpoints(tmp_path)] == ["ckpt_00000001", "ckpt_00000003"]
    assert load_checkpoint(tmp_path / "ckpt_00000003").step == 3
