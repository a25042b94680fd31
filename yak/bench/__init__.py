"""yak.bench."""
