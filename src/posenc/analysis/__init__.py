"""The papers' analyses as library functions (``posenc analyze <name>``).

Every analysis takes plain data (texts, lengths, token ids, CSV logs) and, where it needs model
internals, models following the Seq2SeqTransformer protocol; it writes CSV + PNG files into
``out_dir`` and returns its rows (a list of dicts, the CSV's content before rounding).

:data:`~posenc.analysis.registry.REGISTRY` holds every analysis: its description, its feeder
(analysis/feeders.py: how it reads a grid through the :class:`~posenc.analysis.view.GridView`
protocol), what it needs of the runs and its options schema (analysis/options.py).
"""
