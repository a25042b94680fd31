"""yak.console."""
