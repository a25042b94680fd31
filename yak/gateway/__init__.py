"""yak.gateway."""
