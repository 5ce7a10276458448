"""Tasks: translation, vision, speech, language modelling / length generalization.

Each task is one package under ``posenc.tasks`` implementing :class:`posenc.tasks.base.Task`;
all of them train through the one :class:`posenc.training.trainer.Trainer` and run as
``posenc experiment`` grids.
"""
