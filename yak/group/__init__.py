"""Consumer groups: the group coordinator and the state it keeps in `__consumer_offsets`.

- `coordinator.GroupCoordinator`: the facade the broker calls; routes a group id to its
  partition and hands the request to a manager.
- `shard`: the `__consumer_offsets` partitions this broker coordinates, as shards of the
  coordinator runtime (`yak.coordinator`: replay on election, unload on resignation, the
  routing check); each shard owns its partition's groups (`ShardedGroups` routes an id).
- `membership.GroupMetadataManager`: the groups and their members; the classic protocol's
  state machine is `classic.ClassicGroups` (JoinGroup/SyncGroup/Heartbeat/LeaveGroup, static
  members, the join barrier), KIP-848's is `consumer_group.ConsumerGroups`
  (ConsumerGroupHeartbeat, server-side assignment).
- `offsets.OffsetMetadataManager`: committed and transactional offsets and their expiry.
- `api`: the settings and the values the API takes and returns; `state`: a classic group's
  data and its state machine; `records`: Kafka's `__consumer_offsets` record formats and
  topic configs. Writes, loading and timers are the runtime's (`yak.coordinator`): its
  writer and loader on the partition layer are built by the broker's composition.

This package never imports `yak.broker`.
"""
