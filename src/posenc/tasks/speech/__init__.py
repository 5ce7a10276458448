"""The speech task (CAPE §5.2): CTC on FSDD digits, WER/CER by utterance duration.
``posenc experiment configs/speech/fsdd_small.yaml``."""

from posenc.tasks.speech.config import SpeechConfig, SpeechDataConfig, SpeechExperimentConfig, SpeechTrainConfig
from posenc.tasks.speech.evaluate import cer, eval_sets, evaluate_by_duration, transcribe, wer
from posenc.tasks.speech.task import TASK, SpeechTask, build_model, ctc_sums, training_utterance

__all__ = [
    "TASK", "SpeechConfig", "SpeechDataConfig", "SpeechExperimentConfig", "SpeechTask", "SpeechTrainConfig",
    "build_model", "cer", "ctc_sums", "eval_sets", "evaluate_by_duration", "training_utterance", "transcribe", "wer",
]
