"""Where each fact of a cluster lives in etcd (see docs/cluster.md, "The etcd layout").

Every key of one cluster is under `/yak/<cluster>/`; `<cluster>` is a namespace name (the path
of the `etcd://` URL, "default" when absent) so several clusters can share one etcd. Values
are JSON shaped like KRaft's metadata records (yak/cluster/records.py).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_NAMESPACE", "ClusterKeys", "parse_metadata_url"]

DEFAULT_NAMESPACE = "default"


def parse_metadata_url(url: str) -> tuple[str, str]:
    """`etcd://h1:p1,h2:p2[/name]` -> (the endpoint list, the cluster namespace).

    Raises ValueError with a one-line message when the URL is not of that shape.
    """
    if not url.startswith("etcd://"):
        raise ValueError(f"metadata store {url!r}: expected etcd://HOST:PORT[,HOST:PORT...][/NAME]")
    rest = url[len("etcd://"):]
    hosts, _, name = rest.partition("/")
    name = name.strip("/") or DEFAULT_NAMESPACE
    if not hosts:
        raise ValueError(f"metadata store {url!r}: no etcd endpoint")
    if "/" in name or not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise ValueError(f"metadata store {url!r}: cluster name {name!r} must be one path"
                         " segment of letters, digits, '.', '_' or '-'")
    return hosts, name


@dataclass(frozen=True, slots=True)
class ClusterKeys:
    """Key names for one cluster namespace."""

    namespace: str = DEFAULT_NAMESPACE

    @property
    def root(self) -> str:
        return f"/yak/{self.namespace}/"

    @property
    def cluster_id(self) -> str:
        """The Kafka cluster id (text), written once by the first broker."""
        return self.root + "cluster_id"

    @property
    def controller(self) -> str:
        """The controller's node id (JSON), on the controller's lease. Its create_revision is the
        controller epoch that fences every controller write."""
        return self.root + "controller"

    @property
    def brokers(self) -> str:
        """Prefix of broker registrations (RegisterBrokerRecord), each on its broker's lease."""
        return self.root + "brokers/"

    def broker(self, node_id: int) -> str:
        return f"{self.brokers}{node_id}"

    @property
    def topics(self) -> str:
        """Prefix of TopicRecord by topic name."""
        return self.root + "topics/"

    def topic(self, name: str) -> str:
        return self.topics + name

    @property
    def partitions(self) -> str:
        """Prefix of PartitionRecord by topic id and partition index (ids, not names, so a
        topic deleted and re-created under the same name never sees its old partitions)."""
        return self.root + "partitions/"

    def partition(self, topic_id: str, partition: int) -> str:
        return f"{self.partitions}{topic_id}/{partition}"

    @property
    def configs(self) -> str:
        """Prefix of ConfigRecord sets: `configs/<resource type>/<resource name>`."""
        return self.root + "configs/"

    def config(self, resource_type: int, resource_name: str) -> str:
        return f"{self.configs}{resource_type}/{resource_name}"

    @property
    def producer_ids(self) -> str:
        """ProducerIdsRecord: the next unallocated producer id block."""
        return self.root + "producer_ids"

    @property
    def documents(self) -> str:
        """Prefix of the cluster-wide documents of the layers above the cluster (the SCRAM
        credentials, the ACLs, the client quotas): one JSON value each, `documents/<name>`."""
        return self.root + "documents/"

    def document(self, name: str) -> str:
        return self.documents + name

    @property
    def broker_loads(self) -> str:
        """Prefix of the brokers' load reports (`yak/cluster/broker_load.py`), each on its
        broker's session lease."""
        return self.root + "broker_loads/"

    def broker_load(self, node_id: int) -> str:
        return f"{self.broker_loads}{node_id}"

    @property
    def remote_log(self) -> str:
        """Prefix of tiered storage's remote log metadata, the commit point of each tiered
        partition's remote segments (`yak/cluster/remote_log_metadata.py`, docs/tiered.md):
        `remote_log/<topic id>/<partition>/head` and `.../segments/<base>-<segment id>`."""
        return self.root + "remote_log/"

    def remote_log_topic(self, topic_id: str) -> str:
        return f"{self.remote_log}{topic_id}/"

    def remote_log_partition(self, topic_id: str, partition: int) -> str:
        return f"{self.remote_log}{topic_id}/{partition}/"

    @staticmethod
    def node_id_of(broker_key: str) -> int:
        return int(broker_key.rsplit("/", 1)[1])
