"""The speech task (CAPE §5.2): CTC on FSDD digits, WER/CER by utterance duration.
``posenc experiment configs/speech/fsdd_small.yaml``.

The package's exports are loaded on first use (PEP 562): its config and spec (what a grid's
schema and :func:`~posenc.runs.spec.discover` read) import neither the task module nor its
evaluation."""

from __future__ import annotations

from typing import TYPE_CHECKING

from posenc.tasks.exports import lazy_exports

if TYPE_CHECKING:
    from posenc.tasks.speech.config import SpeechConfig, SpeechDataConfig, SpeechExperimentConfig, SpeechTrainConfig
    from posenc.tasks.speech.evaluate import cer, eval_sets, evaluate_by_duration, transcribe, wer
    from posenc.tasks.speech.task import TASK, SpeechTask, build_model, ctc_sums, training_utterance

__all__ = [
    "TASK", "SpeechConfig", "SpeechDataConfig", "SpeechExperimentConfig", "SpeechTask", "SpeechTrainConfig",
    "build_model", "cer", "ctc_sums", "eval_sets", "evaluate_by_duration", "training_utterance", "transcribe", "wer",
]

#: The package's exports, by the module of the package that defines them.
MODULES = {
    "config": ("SpeechConfig", "SpeechDataConfig", "SpeechExperimentConfig", "SpeechTrainConfig"),
    "evaluate": ("cer", "eval_sets", "evaluate_by_duration", "transcribe", "wer"),
    "task": ("TASK", "SpeechTask", "build_model", "ctc_sums", "training_utterance"),
}


__getattr__, __dir__ = lazy_exports(__name__, MODULES)
