"""yak.storage."""
