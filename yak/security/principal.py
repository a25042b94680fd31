"""Kafka principals: who a connection is, as ACLs and quotas name it.

Kafka writes a principal as `<type>:<name>` (`User:alice`, `User:CN=alice,O=acme`,
`User:ANONYMOUS`). ACLs store that string; `super.users` lists them separated by `;`
(because certificate names contain commas). Only the type `User` is produced by Kafka's
default principal builder, and therefore by Yak; other types can still appear in ACLs and
simply never match.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ANONYMOUS",
    "USER_TYPE",
    "WILDCARD_PRINCIPAL",
    "KafkaPrincipal",
    "parse_principal",
    "parse_super_users",
]

USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """`principal_type:name`; hashable so it can key sets and dicts on the hot path."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")
WILDCARD_PRINCIPAL = KafkaPrincipal(USER_TYPE, "*")


def parse_principal(text: str) -> KafkaPrincipal:
    """Kafka's `SecurityUtils.parseKafkaPrincipal`: split at the first colon.

    Raises ValueError with Kafka's wording when there is no colon or either side is empty.
    """
    if text is None or ":" not in text:
        raise ValueError(
            f"Could not parse principal from `{text}` "
            "(no colon is present separating the principal type from the principal name)"
        )
    ptype, _, name = text.partition(":")
    if not ptype or not name:
        raise ValueError(f"Could not parse principal from `{text}` (empty type or name)")
    return KafkaPrincipal(ptype, name)


def parse_super_users(value: str | None) -> frozenset[str]:
    """`super.users`: principals separated by `;` (Kafka's StandardAuthorizer), kept as strings.

    Each entry is checked to be a principal so a typo (`alice` for `User:alice`) stops start-up
    instead of silently granting nobody.
    """
    out: set[str] = set()
    for part in (value or "").split(";"):
        part = part.strip()
        if not part:
            continue
        try:
            parse_principal(part)
        except ValueError as e:
            raise ValueError(f"invalid value {value!r} for super.users: {e}") from None
        out.add(part)
    return frozenset(out)
