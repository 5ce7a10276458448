"""``python -m posenc.tasks.lengthgen EXPERIMENT RESULTS_ROOT OUT_DIR``: the lengthgen report of
committed or finished runs (:func:`posenc.tasks.lengthgen.driver.main`)."""

import sys

from posenc.tasks.lengthgen.driver import main

raise SystemExit(main(sys.argv[1:]))
