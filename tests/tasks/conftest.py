"""The pipeline's prepared toy data, shared with the translation task tests."""

from tests.pipeline.conftest import toy_prepared  # noqa: F401  (fixture)
