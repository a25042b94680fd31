"""The Quotas page's API: client quotas (KIP-546) listed and changed, through Yak's own
client (no Python Kafka client has DescribeClientQuotas or AlterClientQuotas)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

from fastapi import Request
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from yak.gateway.cluster import ClusterClient, ClusterError
from yak.gateway.console_api.common import ERRORS, cluster_of, page_router
from yak.gateway.errors import MAX_SAFE_INT

router = page_router()


QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage",
              "controller_mutation_rate")


# Kafka's IP quotas take only connection_creation_rate, which Yak does not enforce: the
# broker refuses them, so the console offers users and client ids.
QuotaEntityType = Literal["user", "client-id"]


def _not_a_bool(value: Any) -> Any:
    """Pydantic's lax mode reads JSON `true` as 1; a quota is a number, as the schema says."""
    if isinstance(value, bool):
        raise ValueError("a quota value is a number, not a boolean")
    return value


_NotBool = BeforeValidator(_not_a_bool)
_ByteRate = Annotated[int, Field(gt=0, le=MAX_SAFE_INT), _NotBool]  # whole bytes per second
_Rate = Annotated[float, Field(gt=0, le=MAX_SAFE_INT), _NotBool]


class QuotaValues(BaseModel):
    """Quota key -> value; null removes the key, a key left out is left as it is."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"minProperties": 1})
    producer_byte_rate: _ByteRate | None = None
    consumer_byte_rate: _ByteRate | None = None
    request_percentage: _Rate | None = None
    controller_mutation_rate: _Rate | None = None

    @model_validator(mode="after")
    def _one_at_least(self) -> QuotaValues:
        if not self.model_fields_set:
            raise ValueError("name at least one quota")
        return self

    def changes(self) -> dict[str, float | None]:
        return {k: (None if (v := getattr(self, k)) is None else float(v))
                for k in sorted(self.model_fields_set)}


class QuotaChange(BaseModel):
    """Types, keys and value ranges in the schema itself, so a request it allows is one
    the server accepts."""

    # entity type -> name; null names the default entity of that type (`<default>`).
    entity: dict[QuotaEntityType, str | None] = Field(min_length=1)
    quotas: QuotaValues


def _quota_call(cluster: ClusterClient, fn: Any) -> Any:
    """Run `fn(client)` with Yak's own client (no Python Kafka client has the quota APIs),
    with the cluster's bootstrap and security; a Kafka error becomes a ClusterError."""
    from yak.client import KafkaClient
    from yak.errors import KafkaError

    try:
        with KafkaClient(cluster.bootstrap, client_id="yak-console",
                         request_timeout_ms=int(cluster.timeout_s * 1000), retries=1,
                         security=cluster.security) as c:
            return fn(c)
    except KafkaError as e:
        name = getattr(e.code, "name", str(e.code)).upper()
        raise ClusterError(f"{name}: {e.message}", int(e.code), name) from None
    except OSError as e:
        raise ClusterError(f"the cluster is unreachable: {e}", -195, "_TRANSPORT") from None


def _quota_number(v: float) -> float | int:
    return int(v) if float(v).is_integer() else v


@router.get("/quotas", responses=ERRORS)
async def quotas(request: Request) -> Any:
    """Every client quota the cluster keeps (DescribeClientQuotas, any entity): one row
    per entity (user, client id, ip; a null name is that type's default)."""
    cluster = cluster_of(request)
    found = await asyncio.to_thread(_quota_call, cluster, lambda c: c.describe_client_quotas(
        []))
    rows = [{"entity": e, "quotas": {k: _quota_number(v) for k, v in sorted(q.items())}}
            for e, q in found]
    rows.sort(key=lambda r: [(t, n is not None, n or "") for t, n in sorted(r["entity"].items())])
    return {"quotas": rows, "keys": list(QUOTA_KEYS)}


@router.post("/quotas", responses=ERRORS)
async def alter_quotas(request: Request, body: QuotaChange) -> Any:
    """Set (a number) or remove (null) quota keys of one entity (AlterClientQuotas)."""
    quotas = body.quotas.changes()  # types, keys and values checked by the schema
    cluster = cluster_of(request)
    results = await asyncio.to_thread(_quota_call, cluster, lambda c: c.alter_client_quotas(
        [(body.entity, quotas)]))
    for _entity, code, message in results:
        if code:
            from yak.errors import ErrorCode

            name = ErrorCode(code).name.upper()
            raise ClusterError(f"{name}: {message or name}", code, name)
    return {"entity": body.entity, "quotas": quotas}
