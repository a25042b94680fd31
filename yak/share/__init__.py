"""Share groups (KIP-932): share partitions on the leader, membership with the simple
assignor, share sessions; in memory for now (docs/share-groups.md)."""
