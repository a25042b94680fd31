"""Security: listeners, TLS, SASL, principals, ACLs and quotas, by Kafka's own settings.

This layer sits above `cluster/` and below `broker/`. Every part here is sans-IO or talks
only to its own store, so the broker composes them and its handlers just translate:

- `listeners`   listener model: `listeners`, `advertised.listeners`,
                `listener.security.protocol.map`, `inter.broker.listener.name`.
- `settings`    the security settings (Kafka names, defaults) and per-listener overrides.
- `tls`         `ssl.SSLContext` from Kafka's PEM settings; mTLS principal (RFC 2253 DN,
                `ssl.principal.mapping.rules`).
- `sasl`        the SaslHandshake/SaslAuthenticate state machine of one connection and
                which mechanisms a listener enables (`jaas` parses their JAAS configs).
- `plain`, `scram_server`, `oauthbearer`  one SASL server mechanism each (PLAIN,
                SCRAM-SHA-256/512, OAUTHBEARER); `scram` the SCRAM credentials behind a
                `CredentialStore`.
- `acl`, `authorizer`  Kafka's ACL model and StandardAuthorizer behind an `AclStore`.
- `quota_store` client quota entities (user / client-id), keys and the `QuotaStore`.
- `quota_manager`  Kafka's sampled rate and throttle time, one manager per quota key.
- `quota`       the composed `ClientQuotas`: managers, store, Describe/AlterClientQuotas.

See docs/security.md for the settings and for how the broker wires these parts in.
"""
