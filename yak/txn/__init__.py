"""yak.txn."""
