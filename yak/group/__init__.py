"""yak.group."""
