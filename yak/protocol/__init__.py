"""yak.protocol."""
