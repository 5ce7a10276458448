"""Length generalization (Delétang et al. 2023; Ruoss et al. 2023): algorithmic tasks generated on
the fly, a decoder-only LM trained on short inputs and tested on long ones, per method.

The package's exports are loaded on first use (PEP 562): its config and spec (what a grid's
schema and :func:`~posenc.runs.spec.discover` read) do not import the task module."""

from __future__ import annotations

from typing import TYPE_CHECKING

from posenc.tasks.exports import lazy_exports

if TYPE_CHECKING:
    from posenc.tasks.lengthgen.config import LengthgenConfig, LengthgenExperimentConfig, expand, run_config
    from posenc.tasks.lengthgen.task import TASK, LengthgenTask

__all__ = ["TASK", "LengthgenConfig", "LengthgenExperimentConfig", "LengthgenTask", "expand", "run_config"]

#: The package's exports, by the module of the package that defines them.
MODULES = {
    "config": ("LengthgenConfig", "LengthgenExperimentConfig", "expand", "run_config"),
    "task": ("TASK", "LengthgenTask"),
}


__getattr__, __dir__ = lazy_exports(__name__, MODULES)
