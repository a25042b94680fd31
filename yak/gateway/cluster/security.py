"""What the cluster lets this client's principal do, and its ACLs and SCRAM users
(DescribeTopics/DescribeCluster authorized operations, DescribeAcls, CreateAcls,
DeleteAcls, DescribeUserScramCredentials, AlterUserScramCredentials). The cluster
decides; the gateway only asks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from confluent_kafka.admin import ResourceType

from yak.gateway.cluster.base import ClientBase
from yak.gateway.cluster.model import ClusterError


class SecurityCalls(ClientBase):
    """Authorized operations, ACLs and SCRAM users, as the cluster answers them."""

    async def topic_access(self, name: str) -> tuple[bool, frozenset[str]]:
        """(exists, the operations this client's principal may do on it) for one topic, by
        DescribeTopics, which never auto-creates. A topic the principal may not describe
        is PERMISSION_DENIED (TOPIC_AUTHORIZATION_FAILED) whether or not it exists, as
        Kafka answers a named Metadata request."""
        from confluent_kafka import TopicCollection

        futs = self.admin.describe_topics(TopicCollection([name]),
                                          include_authorized_operations=True,
                                          request_timeout=self.timeout_s)
        try:
            desc = await self._future(futs[name])
        except ClusterError as e:
            if e.name in ("UNKNOWN_TOPIC_OR_PART", "UNKNOWN_TOPIC_ID"):
                return False, frozenset()
            raise
        return True, frozenset(op.name for op in desc.authorized_operations or ())

    async def cluster_operations(self) -> frozenset[str]:
        """What this client's principal may do on the cluster resource, as the cluster
        itself decides (DescribeCluster with include_cluster_authorized_operations): the
        gateway asks rather than evaluating ACLs itself."""
        fut = self.admin.describe_cluster(include_authorized_operations=True,
                                          request_timeout=self.timeout_s)
        desc = await self._future(fut)
        return frozenset(op.name for op in desc.authorized_operations or ())

    async def describe_acls(self) -> list[Any]:
        """Every ACL binding this principal may see (DescribeAcls: DESCRIBE on the
        cluster), as confluent-kafka `AclBinding`s."""
        from confluent_kafka.admin import (
            AclBindingFilter,
            AclOperation,
            AclPermissionType,
            ResourcePatternType,
        )

        flt = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                               AclOperation.ANY, AclPermissionType.ANY)
        fut = self.admin.describe_acls(flt, request_timeout=self.timeout_s)
        return list(await self._future(fut))

    async def create_acls(self, bindings: Sequence[Any]) -> None:
        futs = self.admin.create_acls(list(bindings), request_timeout=self.timeout_s)
        for fut in futs.values():
            await self._future(fut)

    async def delete_acls(self, filters: Sequence[Any]) -> list[Any]:
        """Delete what each filter matches; returns the deleted bindings."""
        futs = self.admin.delete_acls(list(filters), request_timeout=self.timeout_s)
        out: list[Any] = []
        for fut in futs.values():
            out.extend(await self._future(fut))
        return out

    async def scram_users(self) -> dict[str, list[tuple[str, int]]]:
        """User name -> [(mechanism, iterations)] (DescribeUserScramCredentials; no
        secret ever leaves the broker).

        librdkafka 2.16 crashes the whole process when this API is refused (any top-level
        error, Kafka's own answer included: it frees a string it does not own), and here
        that process is the gateway or the broker embedding it. So the cluster is asked
        first whether this principal may DESCRIBE the cluster, and a refusal is raised
        here as Kafka's CLUSTER_AUTHORIZATION_FAILED."""
        if "DESCRIBE" not in await self.cluster_operations():
            raise ClusterError("not authorized to describe users (DESCRIBE on the cluster)",
                               31, "CLUSTER_AUTHORIZATION_FAILED")
        fut = self.admin.describe_user_scram_credentials(request_timeout=self.timeout_s)
        got = await self._future(fut)  # type: ignore[arg-type]
        return {
            user: [(info.mechanism.name.replace("_", "-"), int(info.iterations))
                   for info in desc.scram_credential_infos]
            for user, desc in sorted(got.items())
        }

    async def alter_scram_users(self, alterations: Sequence[Any]) -> None:
        futs = self.admin.alter_user_scram_credentials(list(alterations),
                                                       request_timeout=self.timeout_s)
        for fut in futs.values():
            await self._future(fut)
