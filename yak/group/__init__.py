"""Consumer groups: the group coordinator and the state it keeps in `__consumer_offsets`.

- `coordinator.GroupCoordinator`: classic groups (JoinGroup/SyncGroup/Heartbeat/LeaveGroup,
  static members, cooperative clients), committed offsets and their expiry.
- `consumer_group.ConsumerGroups`: KIP-848 groups (ConsumerGroupHeartbeat, server-side
  assignment), owned by the coordinator.
- `state`: a classic group's data and its state machine; `timers`: every deadline;
  `records`: Kafka's `__consumer_offsets` record formats; `offsets_log`: the only
  interface to the log; `broker_plugin`: attaches all of this to a running broker.

This package never imports `yak.broker`.
"""
