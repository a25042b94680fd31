"""Consumer groups: the group coordinator and the state it keeps in `__consumer_offsets`.

- `coordinator.GroupCoordinator`: the facade the broker calls; routes a group id to its
  partition and hands the request to a manager.
- `shard`: the `__consumer_offsets` partitions this broker coordinates (load on election,
  unload on resignation, the routing check).
- `membership.GroupMetadataManager`: the groups and their members; the classic protocol's
  state machine is `classic.ClassicGroups` (JoinGroup/SyncGroup/Heartbeat/LeaveGroup, static
  members, the join barrier), KIP-848's is `consumer_group.ConsumerGroups`
  (ConsumerGroupHeartbeat, server-side assignment).
- `offsets.OffsetMetadataManager`: committed and transactional offsets and their expiry.
- `api`: the settings and the values the API takes and returns; `state`: a classic group's
  data and its state machine; `timers`: every deadline; `records`: Kafka's
  `__consumer_offsets` record formats; `offsets_log`: the only interface to the log;
  `offsets_topic`: that interface on `__consumer_offsets` through the partition layer (the
  broker's composition builds it and the coordinator).

This package never imports `yak.broker`.
"""
