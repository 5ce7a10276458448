"""What the length-generalization task declares about its runs (:class:`~posenc.runs.spec.RunSpec`):
its per-length accuracies (``eval.json``) among a run's files."""

from __future__ import annotations

from posenc.runs.spec import RunSpec, declare

SPEC = declare(RunSpec("lengthgen", run_files=("eval.json",)))
