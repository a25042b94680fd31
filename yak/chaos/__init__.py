"""Fault-injection workloads and their history checker (issues 12 and 16)."""
