"""DescribeUserScramCredentials (KIP-554): which SCRAM mechanisms and iteration counts each
user has (never a key or a salt). Needs DESCRIBE on the cluster."""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._admin import NO_THROTTLE
from yak.errors import ErrorCode
from yak.protocol.kio_compat import build, error_code, schema_module
from yak.security.acl import AclOperation, ResourceType
from yak.security.authorizer import authorization_error

API_KEY = 50
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = schema_module("describe_user_scram_credentials", ctx.api_version, "response")
    if not ctx.cluster_authorized(AclOperation.DESCRIBE):
        # Kafka's getErrorResponse: the error and its message at the top and for every user
        # asked about. (librdkafka 2.16 crashes its own process on any top-level error
        # here, Kafka's answer included: Yak's clients ask DescribeCluster first.)
        err = authorization_error(ResourceType.CLUSTER)
        code = error_code(err.code)
        results = tuple(
            build(m.DescribeUserScramCredentialsResult, user=u.name, error_code=code,
                  error_message=err.message, credential_infos=())
            for u in request.users or ())
        return build(m.DescribeUserScramCredentialsResponse, throttle_time=NO_THROTTLE,
                     error_code=code, error_message=err.message, results=results)
    users = None if request.users is None else [u.name for u in request.users]
    results = tuple(
        build(
            m.DescribeUserScramCredentialsResult,
            user=r.user,
            error_code=error_code(r.error_code),
            error_message=r.error_message,
            credential_infos=tuple(
                build(m.CredentialInfo, mechanism=mech, iterations=it)
                for mech, it in r.credentials
            ),
        )
        for r in ctx.broker.scram_credentials.describe(users)
    )
    return build(m.DescribeUserScramCredentialsResponse, throttle_time=NO_THROTTLE,
                 error_code=ErrorCode.none, error_message=None, results=results)
