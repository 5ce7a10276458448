"""Length generalization (Delétang et al. 2023; Ruoss et al. 2023): algorithmic tasks generated on
the fly, a decoder-only LM trained on short inputs and tested on long ones, per method."""

from posenc.tasks.lengthgen.config import LengthgenConfig, LengthgenExperimentConfig, expand, run_config
from posenc.tasks.lengthgen.task import TASK, LengthgenTask

__all__ = ["TASK", "LengthgenConfig", "LengthgenExperimentConfig", "LengthgenTask", "expand", "run_config"]
