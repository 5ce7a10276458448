"""What the vision task declares about its runs (:class:`~posenc.runs.spec.RunSpec`):
nothing beyond what every run has."""

from __future__ import annotations

from posenc.runs.spec import RunSpec, declare

SPEC = declare(RunSpec("vision"))
