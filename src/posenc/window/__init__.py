"""A GPU window: grid cells carried to a lent machine for a fixed number of minutes and back. The
queue of cells it runs (:mod:`~posenc.window.queue`) with their data packed beforehand
(:mod:`~posenc.window.payload`), each cell started only while it can still finish
(:mod:`~posenc.window.deadline`), the archive the finished cells come back in
(:mod:`~posenc.window.archive`), read back as untrusted input (:mod:`~posenc.window.intake`) and
placed into the grid here (:mod:`~posenc.window.merge`). The grids themselves are run by
:mod:`posenc.experiments`, which never imports this package."""
