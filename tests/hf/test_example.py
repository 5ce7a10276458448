"""examples/hf_finetune.py runs end to end on tiny random models and its losses fall."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="examples/hf_finetune.py needs transformers (pip install posenc[hf])")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hf_finetune.py"


def test_hf_finetune_example_trains_every_run(capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("hf_finetune", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    results = module.main(["--steps", "12"])
    assert set(results) == {"llama+shape", "llama+cape", "gpt2+shape", "bart+shape"}
    for name, losses in results.items():
        assert len(losses) == 12 and all(math.isfinite(x) for x in losses)
        # even steps are right-padded batches; compare like with like
        assert losses[10] < losses[0] - 0.3, (name, losses)
    printed = module.main(["--steps", "2"])
    out = capsys.readouterr().out
    assert all(f"{name:12s} loss {printed[name][0]:.3f}" in out for name in printed)
