"""``python -m posenc.tasks.lengthgen EXPERIMENT RESULTS_ROOT OUT_DIR``: the lengthgen report of
committed or finished runs (:func:`posenc.tasks.lengthgen.report.main`)."""

import sys

from posenc.tasks.lengthgen.report import main

raise SystemExit(main(sys.argv[1:]))
