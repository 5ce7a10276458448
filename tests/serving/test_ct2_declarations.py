"""Each position method declares its CTranslate2 form (or why it has none) next to its code, and the
export reads it from the method: every registered input and attention method declares exactly one of
the two, a refused one is refused with its declared reason, and serving/ctranslate2.py names no method.
(Augmentations are judged by what they do: eval_offsets exports a constant inference shift only.)"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from posenc.errors import ConfigError
from posenc.models.config import ModelConfig
from posenc.models.seq2seq import Seq2SeqTransformer
from posenc.positions import registry
from posenc.positions.base import AttentionPosition, InputPosition
from posenc.serving import ctranslate2 as serving
from posenc.tasks.translation.config import RunConfig
from posenc.tasks.translation.load import LoadedRun

#: Per family: the base class and the method that gives a CTranslate2 form.
FORM = {"input": (InputPosition, "ct2_table"), "attention": (AttentionPosition, "ct2_spec")}
FAMILIES = {"input": registry.INPUT, "attention": registry.ATTENTION}
METHODS = [(family, name) for family in FORM for name in sorted(FAMILIES[family])]


def _declares_form(cls: type, family: str) -> bool:
    base, method = FORM[family]
    return getattr(cls, method) is not getattr(base, method)


@pytest.mark.parametrize(("family", "name"), METHODS)
def test_every_method_declares_a_form_or_a_reason(family: str, name: str) -> None:
    cls = FAMILIES[family][name].builder
    refusal = cls.ct2_refusal
    assert refusal is None or (isinstance(refusal, str) and refusal.strip() and "\n" not in refusal)
    assert _declares_form(cls, family) != (refusal is not None), f"{name}: declare a CTranslate2 form or a ct2_refusal"


def _run(name: str) -> LoadedRun | None:
    """A random tiny seq2seq model of method ``name`` (None where such a model cannot be built)."""
    try:
        cfg = ModelConfig.from_preset("transformer-tiny", vocab_size=40, position={"name": name})
        model = Seq2SeqTransformer(cfg).eval()
    except ConfigError:  # e.g. a causal-only method in the encoder, a 2-D method in a text model
        return None
    return LoadedRun(RunConfig(model=cfg), model, tokenizer=None, checkpoint=Path("x"))  # type: ignore[arg-type]


@pytest.mark.parametrize(("family", "name"), METHODS)
def test_the_export_follows_the_declaration(family: str, name: str) -> None:
    run = _run(name)
    if run is None:
        pytest.skip(f"no seq2seq Transformer with position {name!r}")
    refusal = FAMILIES[family][name].builder.ct2_refusal
    if refusal is None:
        serving.check_exportable(run)
        return
    with pytest.raises(ConfigError) as err:
        serving.check_exportable(run)
    message = str(err.value)
    assert "\n" not in message and f"position method {name!r} ({refusal})" in message


def test_a_refusal_declared_per_instance_is_read_from_the_model() -> None:
    run = _run("rope")
    assert run is not None
    run.model.encoder.attn_pos.ct2_refusal = "not today"
    with pytest.raises(ConfigError, match=r"position method 'rope' \(not today\)"):
        serving.check_exportable(run)


def test_serving_names_no_position_method() -> None:
    """No string constant of serving/ctranslate2.py is a method name (no per-method table or branch)."""
    source = Path(serving.__file__).read_text()
    names = {e.name for e in registry.entries()}
    constants = {node.value for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Constant)}
    assert not names & constants
    for old in ("INPUT_TABLES", "REFUSED", "RELATIVE", "_sinusoidal_table", "_shaw_tables", "_t5_bias", "_rotary"):
        assert old not in source
