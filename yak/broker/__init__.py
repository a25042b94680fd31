"""yak.broker."""
