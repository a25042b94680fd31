"""`python -m benchmarks.suite`: the whole side-by-side run (install, ceilings, brokers, report)."""

import sys

from benchmarks.suite.run import main

sys.exit(main())
