"""yak.spark."""
