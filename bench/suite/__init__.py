"""Yak and its peers side by side: `python -m bench.suite` (see docs/benchmarks/README.md)."""
