"""yak.cluster."""
