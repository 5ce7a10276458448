"""What the vision task declares about its runs (:class:`~posenc.runs.spec.RunSpec`): its ``eval``
section only says how a run is scored (test resolutions, TTA), never what it is, so a change of it
rescores the stored model instead of training another run."""

from __future__ import annotations

from posenc.runs.spec import RunSpec, declare

SPEC = declare(RunSpec("vision", scoring_sections=("eval",)))
