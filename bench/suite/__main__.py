"""`python -m bench.suite`: the whole side-by-side run (install, ceilings, brokers, report)."""

import sys

from bench.suite.run import main

sys.exit(main())
