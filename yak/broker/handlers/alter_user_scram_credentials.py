"""AlterUserScramCredentials (KIP-554): create, replace or delete SCRAM credentials.

The client sends the salted password; the broker derives the stored and server keys and
keeps only those (yak.security.scram), in the same store SCRAM logins read, so a new user
can log in as soon as the answer arrives. Needs ALTER on the cluster.
"""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._admin import NO_THROTTLE
from yak.protocol.kio_compat import ErrorCode, build, error_code, schema_module
from yak.security.acl import AclOperation
from yak.security.scram import ScramUpsertion

API_KEY = 51
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = schema_module("alter_user_scram_credentials", ctx.api_version, "response")
    if not ctx.cluster_authorized(AclOperation.ALTER):
        names = dict.fromkeys([d.name for d in request.deletions]
                              + [u.name for u in request.upsertions])
        results = tuple(
            build(m.AlterUserScramCredentialsResult, user=n,
                  error_code=ErrorCode.cluster_authorization_failed, error_message=None)
            for n in names
        )
    else:
        changed = await ctx.broker.scram_credentials.alter(
            [(d.name, d.mechanism) for d in request.deletions],
            [ScramUpsertion(u.name, u.mechanism, u.iterations, bytes(u.salt),
                            bytes(u.salted_password)) for u in request.upsertions],
        )
        results = tuple(
            build(m.AlterUserScramCredentialsResult, user=r.user,
                  error_code=error_code(r.error_code), error_message=r.error_message)
            for r in changed
        )
    return build(m.AlterUserScramCredentialsResponse, throttle_time=NO_THROTTLE,
                 results=results)
