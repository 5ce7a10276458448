"""Run directories, for every task: what determines a run (:mod:`~posenc.runs.fingerprint`),
whether a stored run is the one a config asks for (:mod:`~posenc.runs.same_run`) and the
directory rules (:mod:`~posenc.runs.rundir`: ownership markers, the lock, resuming)."""
