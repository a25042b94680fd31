"""Kafka's ACL model: resource patterns, access control entries, bindings and their filters.

The numeric codes are Kafka's (`ResourceType`, `PatternType`, `AclOperation`,
`AclPermissionType`), because CreateAcls/DescribeAcls/DeleteAcls carry them as int8 on the
wire and ACLs written by Kafka's tools must mean the same thing here. The filter semantics
(`matches`) are those of Kafka's `ResourcePatternFilter`/`AccessControlEntryFilter`, which
DescribeAcls and DeleteAcls apply to the stored bindings; `validate_new_acl` and
`validate_filter` are the checks Kafka makes before creating or matching.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from yak.errors import InvalidRequestError, UnsupportedVersionError
from yak.security.principal import parse_principal

__all__ = [
    "CLUSTER_NAME",
    "WILDCARD_HOST",
    "WILDCARD_RESOURCE",
    "AccessControlEntry",
    "AccessControlEntryFilter",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "PatternType",
    "ResourcePattern",
    "ResourcePatternFilter",
    "ResourceType",
    "validate_filter",
    "validate_new_acl",
]

WILDCARD_RESOURCE = "*"
WILDCARD_HOST = "*"
# The one name a CLUSTER resource can have (Kafka's `Resource.CLUSTER_NAME`).
CLUSTER_NAME = "kafka-cluster"


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only: any pattern type, name compared exactly
    MATCH = 2  # filters only: every pattern that would match the literal name
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    DENY = 2
    ALLOW = 3


def _enum(cls: type[IntEnum], code: int) -> IntEnum:
    """Kafka's `fromCode`: a code this version does not know reads as UNKNOWN."""
    try:
        return cls(code)
    except ValueError:
        return cls(0)


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    @classmethod
    def from_wire(cls, resource_type: int, name: str, pattern_type: int) -> ResourcePattern:
        return cls(_enum(ResourceType, resource_type), name, _enum(PatternType, pattern_type))  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str  # "User:alice" as written; compared as a string, like Kafka
    host: str  # "*" or an IP address string
    operation: AclOperation
    permission_type: AclPermissionType

    @classmethod
    def from_wire(
        cls, principal: str, host: str, operation: int, permission_type: int
    ) -> AccessControlEntry:
        return cls(
            principal,
            host,
            _enum(AclOperation, operation),  # type: ignore[arg-type]
            _enum(AclPermissionType, permission_type),  # type: ignore[arg-type]
        )


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def to_json(self) -> dict[str, object]:
        """The stored form (names, not codes, so the file reads like `kafka-acls --list`)."""
        return {
            "resource_type": self.pattern.resource_type.name,
            "resource_name": self.pattern.name,
            "pattern_type": self.pattern.pattern_type.name,
            "principal": self.entry.principal,
            "host": self.entry.host,
            "operation": self.entry.operation.name,
            "permission_type": self.entry.permission_type.name,
        }

    @classmethod
    def from_json(cls, d: dict[str, object]) -> AclBinding:
        return cls(
            ResourcePattern(
                ResourceType[str(d["resource_type"])],
                str(d["resource_name"]),
                PatternType[str(d["pattern_type"])],
            ),
            AccessControlEntry(
                str(d["principal"]),
                str(d["host"]),
                AclOperation[str(d["operation"])],
                AclPermissionType[str(d["permission_type"])],
            ),
        )


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    """`name=None` matches any name; `pattern_type` may be ANY or MATCH (see `matches`)."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType

    def is_unknown(self) -> bool:
        return (
            self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN
        )

    def matches(self, pattern: ResourcePattern) -> bool:
        """Kafka's rule. ANY: same name whatever the pattern type. MATCH: every stored pattern
        that would apply to the literal resource `name` (itself, the `*` wildcard, and the
        PREFIXED patterns it starts with). Otherwise: the same pattern type and name."""
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and (
            self.pattern_type != pattern.pattern_type
        ):
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        # MATCH against a stored pattern of another type
        if pattern.pattern_type == PatternType.LITERAL:
            return self.name == pattern.name or pattern.name == WILDCARD_RESOURCE
        if pattern.pattern_type == PatternType.PREFIXED:
            return self.name.startswith(pattern.name)
        return False


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    """None for principal/host matches anything; ANY for operation/permission likewise."""

    principal: str | None
    host: str | None
    operation: AclOperation
    permission_type: AclPermissionType

    def is_unknown(self) -> bool:
        return (
            self.operation == AclOperation.UNKNOWN
            or self.permission_type == AclPermissionType.UNKNOWN
        )

    def matches(self, entry: AccessControlEntry) -> bool:
        if self.principal is not None and self.principal != entry.principal:
            return False
        if self.host is not None and self.host != entry.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != entry.operation:
            return False
        return (
            self.permission_type == AclPermissionType.ANY
            or self.permission_type == entry.permission_type
        )


ANY_ENTRY = AccessControlEntryFilter(None, None, AclOperation.ANY, AclPermissionType.ANY)


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    pattern_filter: ResourcePatternFilter
    entry_filter: AccessControlEntryFilter

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern_filter.matches(binding.pattern) and self.entry_filter.matches(
            binding.entry
        )

    @classmethod
    def from_wire(
        cls,
        resource_type: int,
        name: str | None,
        pattern_type: int,
        principal: str | None,
        host: str | None,
        operation: int,
        permission_type: int,
    ) -> AclBindingFilter:
        return cls(
            ResourcePatternFilter(
                _enum(ResourceType, resource_type),  # type: ignore[arg-type]
                name,
                _enum(PatternType, pattern_type),  # type: ignore[arg-type]
            ),
            AccessControlEntryFilter(
                principal,
                host,
                _enum(AclOperation, operation),  # type: ignore[arg-type]
                _enum(AclPermissionType, permission_type),  # type: ignore[arg-type]
            ),
        )


def validate_new_acl(binding: AclBinding, api_version: int | None = None) -> None:
    """The checks Kafka makes before storing an ACL (AclApis + AclControlManager + the
    CreateAcls request's own validation); raises InvalidRequestError with Kafka's wording."""
    p, e = binding.pattern, binding.entry
    if api_version == 0 and p.pattern_type != PatternType.LITERAL:
        raise UnsupportedVersionError("Version 0 only supports literal resource pattern types")
    if p.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise InvalidRequestError(f"Invalid resourceType {p.resource_type.name}")
    if p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidRequestError(f"Invalid patternType {p.pattern_type.name}")
    if e.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise InvalidRequestError(f"Invalid operation {e.operation.name}")
    if e.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        raise InvalidRequestError(f"Invalid permissionType {e.permission_type.name}")
    if p.resource_type == ResourceType.CLUSTER and p.name != CLUSTER_NAME:
        raise InvalidRequestError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not p.name:
        raise InvalidRequestError("Invalid empty resource name")
    try:
        parse_principal(e.principal)
    except ValueError as exc:
        raise InvalidRequestError(str(exc)) from None
    if not e.host:
        raise InvalidRequestError("Invalid empty host (use * for any host)")


def validate_filter(f: AclBindingFilter, api_version: int | None = None) -> None:
    """DescribeAcls/DeleteAcls filters: UNKNOWN anywhere is refused (INVALID_REQUEST)."""
    if api_version == 0 and f.pattern_filter.pattern_type != PatternType.LITERAL:
        raise UnsupportedVersionError("Version 0 only supports literal resource pattern types")
    if f.pattern_filter.is_unknown():
        raise InvalidRequestError("Unknown patternFilter.")
    if f.entry_filter.is_unknown():
        raise InvalidRequestError("Unknown entryFilter.")
