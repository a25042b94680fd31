"""yak.cli."""
