"""The registry's state, rebuilt by applying the `_schemas` log in order.

Records use Confluent's key and value formats, so a Confluent Schema Registry pointed at the
same topic reads what Yak wrote (and the reverse):

| key | value |
|---|---|
| `{"keytype":"SCHEMA","subject":s,"version":v,"magic":1}` | `{"subject","version","id","schemaType"?,"references"?,"schema","deleted"}`; null = hard delete |
| `{"keytype":"CONFIG","subject":s or null,"magic":0}` | `{"compatibilityLevel": L}`; null = back to the default |
| `{"keytype":"MODE","subject":s or null,"magic":0}` | `{"mode": M}` |
| `{"keytype":"DELETE_SUBJECT","subject":s,"magic":0}` | `{"subject": s, "version": last}`: soft delete up to `last` |
| `{"keytype":"CLEAR_SUBJECT","subject":s,"magic":0}` | `{"subject": s}`: forget soft-deleted versions |
| `{"keytype":"NOOP","magic":0}` | ignored |
| `{"keytype":"YAK_MAX_ID","magic":0}` | `{"maxId": n}` (Yak's own: see below) |

Ids are never reused: the next id is above every id ever applied. A hard delete removes the
record that carried an id, and compaction would eventually forget it, so before a hard
delete the leader writes `YAK_MAX_ID` (one compacted key, Confluent's readers skip unknown
key types) and `max_id` is restored from it after a restart.

Two writers racing for one id cannot both win: the first SCHEMA record applied for an id
owns it; a later record giving that id to a different schema is ignored by every reader
(Confluent's rule too), and its writer sees that and retries.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class Reference:
    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass
class SchemaVersion:
    subject: str
    version: int
    id: int
    schema_type: str
    schema: str
    references: list[Reference] = field(default_factory=list)
    deleted: bool = False

    def content(self) -> tuple[str, str, tuple[tuple[str, str, int], ...]]:
        """What must be equal for two records to be the same schema under one id."""
        return (self.schema_type, self.schema,
                tuple((r.name, r.subject, r.version) for r in self.references))


def _dump(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def schema_key(subject: str, version: int) -> bytes:
    return _dump({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1})


def schema_value(sv: SchemaVersion) -> bytes:
    v: dict[str, Any] = {"subject": sv.subject, "version": sv.version, "id": sv.id}
    if sv.schema_type != "AVRO":
        v["schemaType"] = sv.schema_type
    if sv.references:
        v["references"] = [r.to_json() for r in sv.references]
    v["schema"] = sv.schema
    v["deleted"] = sv.deleted
    return _dump(v)


def config_key(subject: str | None) -> bytes:
    return _dump({"keytype": "CONFIG", "subject": subject, "magic": 0})


def config_value(level: str) -> bytes:
    return _dump({"compatibilityLevel": level})


def mode_key(subject: str | None) -> bytes:
    return _dump({"keytype": "MODE", "subject": subject, "magic": 0})


def mode_value(mode: str) -> bytes:
    return _dump({"mode": mode})


def delete_subject_key(subject: str) -> bytes:
    return _dump({"keytype": "DELETE_SUBJECT", "subject": subject, "magic": 0})


def delete_subject_value(subject: str, version: int) -> bytes:
    return _dump({"subject": subject, "version": version})


def noop_key() -> bytes:
    return _dump({"keytype": "NOOP", "magic": 0})


def max_id_key() -> bytes:
    return _dump({"keytype": "YAK_MAX_ID", "magic": 0})


def max_id_value(n: int) -> bytes:
    return _dump({"maxId": n})


class RegistryState:
    """Subjects, versions, ids, configs and modes, as of the last applied log offset."""

    def __init__(self) -> None:
        self.subjects: dict[str, dict[int, SchemaVersion]] = {}
        self.by_id: dict[int, SchemaVersion] = {}
        self.configs: dict[str | None, str] = {}
        self.modes: dict[str | None, str] = {}
        self.max_id = 0
        self.applied = -1  # offset of the last record applied
        self.rejected: list[tuple[int, int]] = []  # (offset, id) of ignored duplicate-id records
        self.changes = 0  # bumped on every applied change (caches key on it)

    # -- applying the log ---------------------------------------------------------------------

    def apply(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        self.applied = offset
        if key is None:
            return
        try:
            k = json.loads(key)
            v = json.loads(value) if value is not None else None
            kind = k.get("keytype")
        except (ValueError, AttributeError, TypeError):
            log.warning("_schemas offset %d: key or value is not JSON; skipped", offset)
            return
        try:
            if kind == "SCHEMA":
                self._schema(offset, k, v)
            elif kind == "CONFIG":
                self._setting(self.configs, k, v, "compatibilityLevel")
            elif kind == "MODE":
                self._setting(self.modes, k, v, "mode")
            elif kind == "DELETE_SUBJECT" and v is not None:
                self._delete_subject(v["subject"], int(v["version"]))
            elif kind == "CLEAR_SUBJECT" and v is not None:
                self._clear_subject(v["subject"])
            elif kind == "YAK_MAX_ID" and v is not None:
                self.max_id = max(self.max_id, int(v["maxId"]))
            else:
                return
        except (KeyError, TypeError, ValueError) as e:
            log.warning("_schemas offset %d: malformed %s record (%s); skipped", offset, kind, e)
            return
        self.changes += 1

    def _schema(self, offset: int, k: dict[str, Any], v: dict[str, Any] | None) -> None:
        subject, version = str(k["subject"]), int(k["version"])
        if v is None:
            versions = self.subjects.get(subject, {})
            gone = versions.pop(version, None)
            if not versions:
                self.subjects.pop(subject, None)
            if gone is not None:
                self._reassign_id(gone.id)
            return
        sv = SchemaVersion(
            subject=subject, version=version, id=int(v["id"]),
            schema_type=str(v.get("schemaType") or "AVRO"), schema=str(v["schema"]),
            references=[Reference(str(r["name"]), str(r["subject"]), int(r["version"]))
                        for r in v.get("references") or ()],
            deleted=bool(v.get("deleted", False)),
        )
        owner = self.by_id.get(sv.id)
        if owner is not None and owner.content() != sv.content():
            log.error("_schemas offset %d: id %d already belongs to another schema; record for "
                      "%s version %d ignored", offset, sv.id, subject, version)
            self.rejected.append((offset, sv.id))
            return
        self.subjects.setdefault(subject, {})[version] = sv
        if owner is None or (owner.subject, owner.version) == (subject, version) or (
                owner.deleted and not sv.deleted):
            self.by_id[sv.id] = sv
        self.max_id = max(self.max_id, sv.id)

    def _reassign_id(self, schema_id: int) -> None:
        """An id's record was hard-deleted: another version with that id keeps it alive."""
        self.by_id.pop(schema_id, None)
        for versions in self.subjects.values():
            for sv in versions.values():
                if sv.id == schema_id:
                    self.by_id[schema_id] = sv
                    return

    @staticmethod
    def _setting(table: dict[str | None, str], k: dict[str, Any], v: dict[str, Any] | None,
                 field_name: str) -> None:
        subject = k.get("subject")
        if v is None:
            table.pop(subject, None)
        else:
            table[subject] = str(v[field_name])

    def _delete_subject(self, subject: str, upto: int) -> None:
        for version, sv in self.subjects.get(subject, {}).items():
            if version <= upto:
                sv.deleted = True

    def _clear_subject(self, subject: str) -> None:
        versions = self.subjects.get(subject, {})
        for version in [v for v, sv in versions.items() if sv.deleted]:
            versions.pop(version)
        if not versions:
            self.subjects.pop(subject, None)

    # -- queries ------------------------------------------------------------------------------

    def versions(self, subject: str, deleted: bool = False) -> list[SchemaVersion]:
        return [sv for _, sv in sorted(self.subjects.get(subject, {}).items())
                if deleted or not sv.deleted]

    def subject_names(self, deleted: bool = False) -> list[str]:
        return sorted(s for s, vs in self.subjects.items()
                      if any(deleted or not sv.deleted for sv in vs.values()))

    def level(self, subject: str | None) -> str | None:
        return self.configs.get(subject)

    def referenced_by(self, subject: str, version: int) -> list[int]:
        out = set()
        for versions in self.subjects.values():
            for sv in versions.values():
                if not sv.deleted and any(r.subject == subject and r.version == version
                                          for r in sv.references):
                    out.add(sv.id)
        return sorted(out)
