"""prepare → train → translate → evaluate → average through ``posenc`` (in-process), on the toy
corpus with tiny models, like fairseq's test_binaries."""

from __future__ import annotations

import json
import re
import shutil
import sys
from io import StringIO
from pathlib import Path

import pytest
import sacrebleu
import torch
import yaml
from safetensors.torch import load_file

from posenc.data.corpora import load_toy
from tests.helpers.tiny import METHODS, N_TEST, N_TRAIN, N_VALID, NEAR_INIT, cli, read, run_overrides


def test_prepare_writes_the_corpus_and_vocabulary(prepared: Path) -> None:
    corpus = load_toy(n_train=N_TRAIN, n_valid=N_VALID, n_test=N_TEST)
    for split in ("train", "valid", "test"):
        pairs = getattr(corpus, split)
        assert read(prepared / f"{split}.src") == [p.src for p in pairs]
        assert read(prepared / f"{split}.tgt") == [p.tgt for p in pairs]
        assert read(prepared / f"{split}.doc") == [f"{p.doc}\t{p.idx}" for p in pairs]
    meta = json.loads((prepared / "meta.json").read_text())
    assert [meta[s]["pairs"] for s in ("train", "valid", "test")] == [N_TRAIN, N_VALID, N_TEST]
    assert meta["vocab_size"] == 40
    assert meta["alpha"] == pytest.approx(meta["train"]["tgt_tokens"] / meta["train"]["src_tokens"])


def test_prepare_prints_summary_and_is_idempotent(capsys: pytest.CaptureFixture[str], prepared: Path) -> None:
    before = {p.name: p.stat().st_mtime_ns for p in prepared.iterdir()}
    code, out, _ = cli(capsys, "prepare", "--out", prepared, *run_overrides(prepared.parent / "unused"))
    assert code == 0
    assert out == f"prepared {prepared}: train {N_TRAIN}, valid {N_VALID}, test {N_TEST} pairs, vocabulary 40, " \
                  f"alpha {json.loads((prepared / 'meta.json').read_text())['alpha']:.3f}\n"
    assert {p.name: p.stat().st_mtime_ns for p in prepared.iterdir()} == before
    assert not (prepared.parent / "unused").exists()


def _sacrebleu(hyp: Path, ref: Path) -> float:
    return sacrebleu.corpus_bleu(read(hyp), [read(ref)]).score


@pytest.mark.parametrize("method", list(METHODS))
def test_train_and_translate(capsys: pytest.CaptureFixture[str], tmp_path: Path, prepared: Path, method: str) -> None:
    run = tmp_path / method
    code, out, _ = cli(capsys, "train", *run_overrides(run, prepared, *NEAR_INIT, *METHODS[method]))
    assert code == 0
    summary = json.loads(out)
    assert summary["steps"] == 3 and summary["stopped"] == "max_steps"
    assert summary == json.loads((run / "summary.json").read_text())
    saved = yaml.safe_load((run / "config.yaml").read_text())
    if method == "rnn-nmt":
        assert saved["arch"] == "rnn-nmt" and saved["rnn"]["hidden"] == 16 and saved["rnn"]["vocab_size"] == 40
    else:
        assert saved["model"]["position"]["name"] == method and saved["model"]["vocab_size"] == 40
    assert [p.name for p in sorted((run / "checkpoints").iterdir())] == ["ckpt_00000003"]

    # --split test: hypotheses + scores, BLEU as sacreBLEU computes it on the written files
    code, out, _ = cli(capsys, "translate", "--run", run, "--split", "test", "--data", prepared)
    assert code == 0
    scores = json.loads(out)
    hyp = run / "translations" / "test.beam2.lp0.6.hyp"  # a user's decode: beam and α in its name
    assert scores["hyp"] == "translations/test.beam2.lp0.6.hyp" and scores["lines"] == N_TEST and scores["beam"] == 2
    assert scores["checkpoint"].endswith("ckpt_00000003")
    assert len(read(hyp)) == N_TEST and any(read(hyp))
    assert scores["bleu"] == pytest.approx(_sacrebleu(hyp, prepared / "test.tgt"), abs=1e-9)
    assert scores == json.loads((run / "translations" / "test.beam2.lp0.6.json").read_text())

    # --input/--output on the same sources gives the same lines as --split
    out_file = tmp_path / "out" / "test.hyp"
    out_file.parent.mkdir()  # an output file's directory must exist
    code, out, err = cli(capsys, "translate", "--run", run, "--input", prepared / "test.src", "--output", out_file)
    assert code == 0 and out == "" and err == f"translated {N_TEST} lines -> {out_file}\n"
    assert read(out_file) == read(hyp)


def test_translate_to_stdout_and_from_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path, prepared: Path, trained: Path) -> None:
    src = prepared / "test.src"
    out_file = tmp_path / "file.hyp"
    assert cli(capsys, "translate", "--run", trained, "--input", src, "--output", out_file)[0] == 0
    code, out, _ = cli(capsys, "translate", "--run", trained, "--input", src)
    assert code == 0 and out.splitlines() == read(out_file)
    monkeypatch.setattr(sys, "stdin", StringIO(src.read_text(encoding="utf-8")))
    code, out, _ = cli(capsys, "translate", "--run", trained, "--input", "-")
    assert code == 0 and out.splitlines() == read(out_file)
    # --beam overrides the run's decode.beam (2): greedy output is written under its own name
    code, out, _ = cli(capsys, "translate", "--run", trained, "--split", "test", "--beam", "1", "--data", prepared)
    assert code == 0 and json.loads(out)["beam"] == 1 and (trained / "translations" / "test.beam1.lp0.6.hyp").is_file()


BLEU_LINE = re.compile(r"^BLEU = (\d+\.\d\d) ")
CHRF_LINE = re.compile(r"^chrF2 = (\d+\.\d\d)$")


def test_evaluate_matches_sacrebleu(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    ref = tmp_path / "ref.txt"
    hyp = tmp_path / "hyp.txt"
    ref.write_text("the cat sat on the mat\nthere is a dog in the garden today\nhello world\n", encoding="utf-8")
    hyp.write_text("the cat sat on a mat\nthere is a dog in the garden\nhello there world\n", encoding="utf-8")
    expected = sacrebleu.corpus_bleu(read(hyp), [read(ref)])
    expected_chrf = sacrebleu.corpus_chrf(read(hyp), [read(ref)])
    assert 10 < expected.score < 90  # a non-trivial score

    code, out, _ = cli(capsys, "evaluate", "--hyp", hyp, "--ref", ref)
    assert code == 0
    bleu_line, bleu_sig, chrf_line, chrf_sig = out.splitlines()
    assert float(BLEU_LINE.match(bleu_line).group(1)) == round(expected.score, 2)
    assert bleu_line == str(expected)
    assert float(CHRF_LINE.match(chrf_line).group(1)) == round(expected_chrf.score, 2)
    # the sacreBLEU signatures are printed without --json too (README; issue 10 finding 8)
    bleu, chrf = sacrebleu.BLEU(), sacrebleu.CHRF()
    bleu.corpus_score(read(hyp), [read(ref)]), chrf.corpus_score(read(hyp), [read(ref)])
    assert bleu_sig == f"  signature: {bleu.get_signature()}" and "nrefs:1" in bleu_sig
    assert chrf_sig == f"  signature: {chrf.get_signature()}" and "nrefs:1" in chrf_sig

    code, out, _ = cli(capsys, "evaluate", "--hyp", hyp, "--ref", ref, "--json")
    scores = json.loads(out)
    assert code == 0 and scores["lines"] == 3
    assert scores["bleu"] == pytest.approx(expected.score, abs=1e-9)
    assert scores["chrf"] == pytest.approx(expected_chrf.score, abs=1e-9)
    assert scores["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp")


def test_evaluate_translation_of_a_run(capsys: pytest.CaptureFixture[str], prepared: Path, trained: Path) -> None:
    assert cli(capsys, "translate", "--run", trained, "--split", "test", "--data", prepared)[0] == 0
    hyp, ref = trained / "translations" / "test.beam2.lp0.6.hyp", prepared / "test.tgt"
    code, out, _ = cli(capsys, "evaluate", "--hyp", hyp, "--ref", ref, "--json")
    assert code == 0 and json.loads(out)["bleu"] == pytest.approx(_sacrebleu(hyp, ref), abs=1e-9)
    code, out, _ = cli(capsys, "evaluate", "--hyp", hyp, "--ref", ref)
    assert code == 0 and out.splitlines()[0] == str(sacrebleu.corpus_bleu(read(hyp), [read(ref)]))


def _weights(ckpt: Path) -> dict[str, torch.Tensor]:
    return load_file(str(ckpt / "model.safetensors"))


def test_average_last_two(capsys: pytest.CaptureFixture[str], tmp_path: Path, trained: Path) -> None:
    ckpts = trained / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir() if p.name.startswith("ckpt_")) == [
        "ckpt_00000001", "ckpt_00000002", "ckpt_00000003"]
    out_dir = tmp_path / "avg"
    code, out, _ = cli(capsys, "average", "--run", trained, "--last", "2", "--output", out_dir)
    assert code == 0
    assert out == f"averaged 2 checkpoints (ckpt_00000002 .. ckpt_00000003) -> {out_dir}\n"
    two, three = _weights(ckpts / "ckpt_00000002"), _weights(ckpts / "ckpt_00000003")
    averaged = _weights(out_dir)
    assert averaged.keys() == two.keys() == three.keys()
    assert any(not torch.equal(two[k], three[k]) for k in two)  # the two checkpoints differ
    for key in two:
        mean = ((two[key].double() + three[key].double()) / 2).to(two[key].dtype)
        assert torch.equal(averaged[key], mean), key
    state = json.loads((out_dir / "state.json").read_text())
    assert state["averaged_from"] == ["ckpt_00000002", "ckpt_00000003"] and state["step"] == 3


def test_average_default_output_is_used_by_translate(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                     trained: Path, prepared: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    code, out, _ = cli(capsys, "average", "--run", run, "--last", "10")  # more than exist: all 3
    assert code == 0 and out.startswith("averaged 3 checkpoints (ckpt_00000001 .. ckpt_00000003)")
    ckpts = run / "checkpoints"
    mean = {k: sum(_weights(ckpts / f"ckpt_0000000{i}")[k].double() for i in (1, 2, 3)) / 3
            for k in _weights(ckpts / "average")}
    for key, value in _weights(ckpts / "average").items():
        assert torch.equal(value, mean[key].to(value.dtype)), key
    code, out, _ = cli(capsys, "translate", "--run", run, "--split", "test", "--data", prepared)
    assert code == 0 and json.loads(out)["checkpoint"] == "checkpoints/average"  # relative to the run
    code, out, _ = cli(capsys, "translate", "--run", run, "--split", "test", "--checkpoint", "latest", "--data", prepared)
    assert code == 0 and json.loads(out)["checkpoint"] == "checkpoints/ckpt_00000003"
