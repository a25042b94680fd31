"""Consumer groups: the group coordinator and the state it keeps in `__consumer_offsets`.

- `coordinator.GroupCoordinator`: classic groups (JoinGroup/SyncGroup/Heartbeat/LeaveGroup,
  static members, cooperative clients), committed offsets and their expiry.
- `consumer_group.ConsumerGroups`: KIP-848 groups (ConsumerGroupHeartbeat, server-side
  assignment), owned by the coordinator.
- `state`: a classic group's data and its state machine; `timers`: every deadline;
  `records`: Kafka's `__consumer_offsets` record formats; `offsets_log`: the only
  interface to the log; `offsets_topic`: that interface on `__consumer_offsets` through
  the partition layer (the broker's composition builds it and the coordinator).

This package never imports `yak.broker`.
"""
