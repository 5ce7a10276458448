"""What the vision task declares about its runs (:class:`~posenc.runs.spec.RunSpec`): its ``eval``
section says how a run is scored (test resolutions, TTA), not what it is, so a change of it
rescores the stored model instead of training another run. (``eval.batch_size`` also batches the
validation loss the trainer stops on; another one changes that loss only by float summation order.)"""

from __future__ import annotations

from posenc.runs.spec import RunSpec, declare

SPEC = declare(RunSpec("vision", scoring_sections=("eval",)))
