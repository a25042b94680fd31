"""Yak and its peers side by side: `python -m benchmarks.suite` (see docs/benchmarks/README.md)."""
