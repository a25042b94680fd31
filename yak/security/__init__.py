"""Security: listeners, TLS, SASL, principals, ACLs and quotas, by Kafka's own settings.

This layer sits above `cluster/` and below `broker/`. Every part here is sans-IO or talks
only to its own store, so the broker composes them and its handlers just translate:

- `listeners`   listener model: `listeners`, `advertised.listeners`,
                `listener.security.protocol.map`, `inter.broker.listener.name`.
- `settings`    the security settings (Kafka names, defaults) and per-listener overrides.
- `tls`         `ssl.SSLContext` from Kafka's PEM settings; mTLS principal (RFC 2253 DN,
                `ssl.principal.mapping.rules`).
- `jaas`, `sasl`, `scram`  SASL server mechanisms (PLAIN, SCRAM-SHA-256/512) as state
                machines, the SaslHandshake/SaslAuthenticate sequence, SCRAM credentials
                behind a `CredentialStore`.
- `acl`, `authorizer`  Kafka's ACL model and StandardAuthorizer behind an `AclStore`.
- `quota`       client quotas (user / client-id), Kafka's sampled rate and throttle time.

See docs/security.md for the settings and for how the broker wires these parts in.
"""
