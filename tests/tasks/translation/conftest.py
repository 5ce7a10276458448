"""A prepared toy directory shared by the translation task tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from posenc.tasks.translation.config import DataConfig
from posenc.tasks.translation.prepare import prepare
from tests.helpers.tiny import N_TEST, N_TRAIN, N_VALID

TOY_OPTIONS = {"n_train": N_TRAIN, "n_valid": N_VALID, "n_test": N_TEST}


def toy_data(**kw) -> DataConfig:
    return DataConfig(**{"corpus": "toy", "vocab_size": 40, "options": dict(TOY_OPTIONS), **kw})


@pytest.fixture(scope="session")
def toy_prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepare(toy_data(), tmp_path_factory.mktemp("translation-data") / "toy")
