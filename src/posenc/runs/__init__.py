"""Run directories, for every task: one run through its whole life (:mod:`~posenc.runs.run`), what
determines a run (:mod:`~posenc.runs.fingerprint`), whether a stored run is the one a config asks
for (:mod:`~posenc.runs.same_run`), which directories are posenc's (:mod:`~posenc.runs.ownership`),
their lock (:mod:`~posenc.runs.lock`) and what each task declares about its runs
(:mod:`~posenc.runs.spec`)."""
