"""What the translation task declares about its runs (:class:`~posenc.runs.spec.RunSpec`): the
model keys it fills in from the prepared data, the files it writes into a run directory, what
marks its prepared data, the SentencePiece cache it keeps beside them, its decoding section
(how a run is scored, never what it is), the length caps that only say how prepared data is used
and what its runs carry for the analyses (every name of analysis/view.py: the report's
``SettingView`` reads them)."""

from __future__ import annotations

from posenc.analysis.view import CARRIED
from posenc.runs.spec import RunSpec, declare

#: The run's vocabulary (a copy of its prepared data's), so a moved run directory translates on its own.
VOCAB_FILE = "spm.model"
#: The SentencePiece cache kept beside prepared data (prepare.py).
SPM_CACHE_NAME = ".spm-cache"
#: state.json key of the sha256 of the vocabulary a translation model was trained with.
VOCAB_KEY = "vocab_sha256"
#: summary.json key of the content identity of the tokenizer a run trained with (Tokenizer.identity).
TOKENIZER_KEY = "tokenizer"
#: Scored splits, the α sweep and ``posenc translate --split``: ``<split>[.lp<α>].beam<K>[.lp<α>].hyp/.json``.
TRANSLATION_NAMES = r"^\.?[\w-]+(\.lp[-+.\de]+)?\.beam\d+(\.lp[-+.\de]+)?\.(hyp|json)(\..+\.tmp)?$"

SPEC = declare(RunSpec(
    "translation",
    derived_keys=frozenset({"model.vocab_size", "rnn.vocab_size", "model.position.cape.source_scale"}),
    run_files=("translations", VOCAB_FILE),
    run_dirs={"translations": TRANSLATION_NAMES},
    data_files=("meta.json", VOCAB_FILE),
    caches=(SPM_CACHE_NAME,),
    scoring_sections=("decode",),
    data_runtime_keys=frozenset({"max_source_len", "max_train_len"}),
    carries=frozenset(CARRIED),
))
