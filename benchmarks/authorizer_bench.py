"""CPU cost of one StandardAuthorizer.authorize() call (the per-request ACL check).

    .venv/bin/python benchmarks/authorizer_bench.py [--calls N]

1,000 LITERAL + 100 PREFIXED topic ACLs for 50 users; times an allowed literal match, an
allowed prefix match and a topic with no ACL (denied), in process CPU time per call.
"""

from __future__ import annotations

import argparse
import time

from yak.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from yak.security.authorizer import MemoryAclStore, StandardAuthorizer
from yak.security.principal import KafkaPrincipal


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=200_000)
    n = ap.parse_args().calls
    acls = [
        AclBinding(ResourcePattern(ResourceType.TOPIC, f"t{i}", PatternType.LITERAL),
                   AccessControlEntry(f"User:u{i % 50}", "*", AclOperation.WRITE,
                                      AclPermissionType.ALLOW))
        for i in range(1000)
    ] + [
        AclBinding(ResourcePattern(ResourceType.TOPIC, f"app{i}-", PatternType.PREFIXED),
                   AccessControlEntry(f"User:u{i % 50}", "*", AclOperation.READ,
                                      AclPermissionType.ALLOW))
        for i in range(100)
    ]
    a = StandardAuthorizer(MemoryAclStore(acls))
    a.load()
    p = KafkaPrincipal("User", "u7")
    for name, op in (("t7", AclOperation.WRITE), ("app7-orders", AclOperation.READ),
                     ("missing-topic", AclOperation.WRITE)):
        t0 = time.process_time()
        for _ in range(n):
            a.authorize(p, "127.0.0.1", op, ResourceType.TOPIC, name, log_if_denied=False)
        us = (time.process_time() - t0) / n * 1e6
        print(f"{name:15s} {us:6.2f} us CPU per authorize()")


if __name__ == "__main__":
    main()
