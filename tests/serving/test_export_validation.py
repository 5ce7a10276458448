"""A tampered CTranslate2 export: every file of it that is truncated, empty,
random, of the wrong JSON shape, missing a key or of another vocabulary is one line naming the
file (and the key), exit 2, before anything is translated or written; the stored beam obeys the
256 cap. The export is a tiny near-initial APE run's (tests/helpers/tiny.py)."""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ctranslate2", reason="the ctranslate2 package is not installed (pip install 'posenc[serve]')")

from posenc.cli.main import main  # noqa: E402
from posenc.errors import ConfigError  # noqa: E402
from posenc.serving.exported import Exported, load_export  # noqa: E402
from tests.helpers.files import md5s  # noqa: E402
from tests.helpers.tiny import NEAR_INIT, assert_one_line_error, cli, run_overrides  # noqa: E402


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("export-validation")
    assert main(["train", *run_overrides(root / "run", None, *NEAR_INIT, "model.position.name=ape")]) == 0
    assert main(["export", "--run", str(root / "run"), "--format", "ctranslate2", "--out", str(root / "ct2")]) == 0
    return root / "ct2"


def _manifest(change: Callable[[dict[str, Any]], Any]) -> Callable[[Path], None]:
    """A tampering that rewrites posenc_export.json with ``change`` applied to its dict."""
    def tamper(d: Path) -> None:
        info = json.loads((d / "posenc_export.json").read_text())
        change(info)
        (d / "posenc_export.json").write_text(json.dumps(info))
    return tamper


def _config(change: Callable[[dict[str, Any]], Any]) -> Callable[[Path], None]:
    """A tampering that rewrites config.json (indented anew) with ``change`` applied to its dict."""
    def tamper(d: Path) -> None:
        config = json.loads((d / "config.json").read_text())
        change(config)
        (d / "config.json").write_text(json.dumps(config, indent=2))
    return tamper


def _bytes(name: str, data: Callable[[bytes], bytes]) -> Callable[[Path], None]:
    return lambda d: (d / name).write_bytes(data((d / name).read_bytes()))


def _self_consistent(tamper: Callable[[Path], None]) -> Callable[[Path], None]:
    """``tamper``, then the description's checksums rewritten to match the tampered files: an export
    that agrees with its own record, refused only by what its files mean."""
    from posenc.serving.validate import file_checksums

    def both(d: Path) -> None:
        tamper(d)
        _manifest(lambda i: i.update(files=file_checksums(d)))(d)
    return both


def _swap_vocabulary(i: int, j: int) -> Callable[[Path], None]:
    def swap(d: Path) -> None:
        vocab = json.loads((d / "shared_vocabulary.json").read_text())
        vocab[i], vocab[j] = vocab[j], vocab[i]
        (d / "shared_vocabulary.json").write_text(json.dumps(vocab))
    return swap


#: name → (tampering, words the one-line error holds besides the file's path)
TAMPERED: dict[str, tuple[Callable[[Path], None], tuple[str, ...]]] = {
    "model-truncated": (_bytes("model.bin", lambda b: b[:1000]), ("model.bin",)),
    "model-cut-at-end": (_bytes("model.bin", lambda b: b[:-100]), ("model.bin", "bytes", "posenc export wrote")),
    "model-empty": (_bytes("model.bin", lambda b: b""), ("model.bin",)),
    "model-random": (_bytes("model.bin", lambda b: random.Random(0).randbytes(5000)), ("model.bin",)),
    "model-missing": (lambda d: (d / "model.bin").unlink(), ("model.bin",)),
    "manifest-not-json": (_bytes("posenc_export.json", lambda b: b"{not json"), ("posenc_export.json",)),
    "manifest-a-list": (_bytes("posenc_export.json", lambda b: b"[1, 2]"), ("posenc_export.json", "JSON object")),
    "manifest-missing-key": (_manifest(lambda i: i.pop("prepend_src_bos")), ("posenc_export.json", "prepend_src_bos")),
    "manifest-missing-beam": (_manifest(lambda i: i["decode"].pop("beam")), ("posenc_export.json", "decode.beam")),
    "manifest-wrong-type": (_manifest(lambda i: i.update(max_source_len="x")),
                            ("posenc_export.json", "max_source_len")),
    "manifest-bool-beam": (_manifest(lambda i: i["decode"].update(beam=True)), ("posenc_export.json", "beam")),
    "manifest-beam-over-cap": (_manifest(lambda i: i["decode"].update(beam=100000)),
                               ("posenc_export.json", "decode.beam 100000", "limit of 256")),
    # a source of max_source_len tokens holds the BOS (where the run prepends one) and a token; no EOS
    "manifest-source-len-1": (_manifest(lambda i: i.update(max_source_len=1)),
                              ("posenc_export.json", "max_source_len must be >= 2", "got 1")),
    "manifest-source-len-0": (_manifest(lambda i: i.update(max_source_len=0)),
                              ("posenc_export.json", "max_source_len must be >= 2", "got 0")),
    "manifest-source-len-negative": (_manifest(lambda i: i.update(max_source_len=-5)),
                                     ("posenc_export.json", "max_source_len must be >= 2", "got -5")),
    "manifest-rows-short-of-source": (_manifest(lambda i: i.update(position_rows=i["max_source_len"])),
                                      ("posenc_export.json", "position_rows", "max_source_len")),
    "manifest-rows-negative": (_manifest(lambda i: i.update(position_rows=-1)), ("posenc_export.json", "position_rows")),
    "manifest-len-a-negative": (_manifest(lambda i: i["decode"].update(max_len_a=-1.0)),
                                ("posenc_export.json", "decode.max_len_a")),
    "manifest-len-b-negative": (_manifest(lambda i: i["decode"].update(max_len_b=-3)),
                                ("posenc_export.json", "decode.max_len_a/b")),
    "manifest-batch-tokens-0": (_manifest(lambda i: i["decode"].update(batch_tokens=0)),
                                ("posenc_export.json", "decode.batch_tokens")),
    "manifest-beam-0": (_manifest(lambda i: i["decode"].update(beam=0)), ("posenc_export.json", "decode.beam")),
    "manifest-other-format": (_manifest(lambda i: i.update(format="onnx")), ("posenc_export.json", "format")),
    "config-garbage": (_bytes("config.json", lambda b: b"garbage{"), ("config.json",)),
    "config-a-list": (_bytes("config.json", lambda b: b"[1]"), ("config.json", "not the file posenc export wrote")),
    "vocabulary-garbage": (_bytes("shared_vocabulary.json", lambda b: b"garbage{"), ("shared_vocabulary.json",)),
    "vocabulary-of-another-size": (_bytes("shared_vocabulary.json", lambda b: b'["a"]'),
                                   ("shared_vocabulary.json", "1 entries", "spm.model")),
    "spm-garbage": (_bytes("spm.model", lambda b: b"garbage"), ("spm.model",)),
    # a valid CTranslate2 configuration that decodes wrongly: it starts decoding where it should stop
    "config-eos-swapped": (_config(lambda c: c.update(eos_token=c["decoder_start_token"],
                                                      decoder_start_token=c["eos_token"])),
                           ("config.json", "not the file posenc export wrote", "export again")),
    # the same with the export's own checksums rewritten: its meaning against spm.model refuses it
    "config-eos-swapped-self-consistent": (
        _self_consistent(_config(lambda c: c.update(eos_token=c["decoder_start_token"],
                                                    decoder_start_token=c["eos_token"]))),
        ("config.json", "eos_token is '<s>'", "spm.model defines '</s>' (id 3)")),
    "config-unk-renamed-self-consistent": (_self_consistent(_config(lambda c: c.update(unk_token="a"))),
                                           ("config.json", "unk_token is 'a'", "'<unk>' (id 1)")),
    "config-bos-missing-self-consistent": (_self_consistent(_config(lambda c: c.pop("bos_token"))),
                                           ("config.json", "bos_token is None", "'<s>' (id 2)")),
    "config-adds-source-bos-self-consistent": (_self_consistent(_config(lambda c: c.update(add_source_bos=True))),
                                               ("config.json", "add_source_bos is True", "expected false")),
    # the vocabulary is not among the checksummed files: only its meaning tells (pad and unk swapped)
    "vocabulary-pad-unk-swapped": (_swap_vocabulary(0, 1),
                                   ("shared_vocabulary.json", "entry 0 is '<unk>'", "piece 0 of spm.model is '<pad>'")),
    "vocabulary-eos-swapped-self-consistent": (_self_consistent(_swap_vocabulary(3, 5)),
                                               ("shared_vocabulary.json", "entry 3", "'</s>'")),
    "manifest-without-checksums": (_manifest(lambda i: i.pop("files")),
                                   ("posenc_export.json", "checksum", "write the export again")),
    "manifest-checksum-of-another-file": (_manifest(lambda i: i["files"].update({"model.bin": i["files"]["config.json"]})),
                                          ("model.bin", "not the file posenc export wrote")),
}


@pytest.mark.parametrize("name", list(TAMPERED))
def test_a_tampered_export_is_one_line_naming_the_file(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                       export: Path, name: str) -> None:
    tamper, words = TAMPERED[name]
    broken = tmp_path / "ct2"
    shutil.copytree(export, broken)
    tamper(broken)
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("")  # nothing to translate: every check is made when the export loads
    before = md5s(tmp_path)
    code, stdout, err = cli(capsys, "translate", "--engine", "ctranslate2", "--run", broken, "--input", src,
                            "--output", out)
    assert_one_line_error(code, err, str(broken), *words)
    assert stdout == "" and md5s(tmp_path) == before


@pytest.fixture(scope="module")
def other_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The export of another run of the same architecture (another seed)."""
    root = tmp_path_factory.mktemp("other-export")
    assert main(["train", *run_overrides(root / "run", None, *NEAR_INIT, "model.position.name=ape",
                                         "train.seed=2")]) == 0
    assert main(["export", "--run", str(root / "run"), "--format", "ctranslate2", "--out", str(root / "ct2")]) == 0
    return root / "ct2"


def test_another_runs_model_of_the_same_architecture_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                                  export: Path, other_export: Path) -> None:
    """Its model.bin loads in CTranslate2 and has the same size: only the recorded checksum tells."""
    other = (other_export / "model.bin").read_bytes()
    assert len(other) == (export / "model.bin").stat().st_size and other != (export / "model.bin").read_bytes()
    broken = tmp_path / "ct2"
    shutil.copytree(export, broken)
    (broken / "model.bin").write_bytes(other)
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("a b c\n")
    before = md5s(tmp_path)
    code, stdout, err = cli(capsys, "translate", "--engine", "ctranslate2", "--run", broken, "--input", src,
                            "--output", out)
    assert_one_line_error(code, err, str(broken / "model.bin"), "sha256", "not the file posenc export wrote")
    assert stdout == "" and md5s(tmp_path) == before


def test_the_untampered_export_loads_and_translates(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                    export: Path) -> None:
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("a b c\nd e\n")
    code, _, err = cli(capsys, "translate", "--engine", "ctranslate2", "--run", export, "--input", src, "--output", out)
    assert code == 0 and err == f"translated 2 lines -> {out}\n"
    assert len(out.read_text().splitlines()) == 2


def test_the_export_translates_through_a_users_symlink(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                       export: Path) -> None:
    """``--output LINK``: the link's target gets the lines (its mode kept), the link stays."""
    src, target, link = tmp_path / "in.txt", tmp_path / "hyp.txt", tmp_path / "latest.txt"
    src.write_text("a b c\n")
    target.write_text("old\n")
    target.chmod(0o640)
    link.symlink_to(target)
    code, _, err = cli(capsys, "translate", "--engine", "ctranslate2", "--run", export, "--input", src,
                       "--output", link)
    assert code == 0, err
    assert link.is_symlink() and len(target.read_text().splitlines()) == 1 and target.stat().st_mode & 0o777 == 0o640


def test_an_engine_error_while_translating_names_the_model(export: Path) -> None:
    """A model.bin that loads but fails to decode (the engine raises): one line, not a traceback."""
    loaded = load_export(export)

    class Failing:
        def translate_batch(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("out of range")

    broken = Exported(Failing(), loaded.tokenizer, loaded.info, export)
    with pytest.raises(ConfigError, match=r"model\.bin: CTranslate2 failed to translate with it \(out of range\)"):
        list(broken.translate_lines(["a b c"]))


def test_the_files_are_checked_before_any_is_parsed_and_sizes_before_hashes(monkeypatch: pytest.MonkeyPatch,
                                                                            tmp_path: Path, export: Path) -> None:
    """A replaced spm.model is refused by its recorded size: no file is hashed and none parsed (the
    SentencePiece model is untrusted until it is the file export wrote); with every size right, a
    sha256 that differs (here: every one, config.json hashed first) is refused before spm.model is
    parsed."""
    from posenc.serving import exported, validate

    parsed: list[Path] = []
    hashed: list[Path] = []
    monkeypatch.setattr(exported.Tokenizer, "from_file", classmethod(lambda cls, path: parsed.append(path)))
    monkeypatch.setattr(validate, "sha256_of", lambda path: hashed.append(Path(path)) or "0" * 64)
    broken = tmp_path / "ct2"
    shutil.copytree(export, broken)
    (broken / "spm.model").write_bytes(b"garbage")
    with pytest.raises(ConfigError, match=r"spm\.model: not the file posenc export wrote \(7 bytes, "):
        load_export(broken)
    assert hashed == [] and parsed == []
    shutil.copyfile(export / "spm.model", broken / "spm.model")
    with pytest.raises(ConfigError, match=r"config\.json: not the file posenc export wrote \(same size, another sha256"):
        load_export(broken)
    assert hashed == [broken / "config.json"] and parsed == []
