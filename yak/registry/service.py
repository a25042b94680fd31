"""The schema registry of one gateway: its operations, over the `_schemas` log.

The state lives in `store.py` (`KafkaStore`: the compacted topic `_schemas`, read from
the beginning and tailed, so any gateway answers reads); parsed schemas and lookups by
content in `schema_cache.py`. Writes are made only by the elected leader
(`election.py`): the API forwards them there. The leader serializes them with one lock,
reads the log to its end before deciding anything (another leader may have written just
before), appends records with acks=all, and answers once its own reader has applied
them, so a client that registers and then reads (through this gateway) sees its schema.

Everything reaches the cluster over the Kafka protocol: this is an edge, like the gateway.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from yak.registry import compat
from yak.registry import state as S
from yak.registry.election import Identity, LeaderElector
from yak.registry.errors import (
    INVALID_COMPATIBILITY_LEVEL,
    INVALID_MODE,
    INVALID_VERSION,
    OPERATION_NOT_PERMITTED,
    REFERENCE_EXISTS,
    SCHEMA_VERSION_NOT_SOFT_DELETED,
    SCHEMA_VERSION_SOFT_DELETED,
    STORE_ERROR,
    SUBJECT_NOT_SOFT_DELETED,
    SUBJECT_SOFT_DELETED,
    RegistryError,
    schema_not_found,
    subject_not_found,
    version_not_found,
)
from yak.registry.schema_cache import SchemaCache
from yak.registry.state import Reference, RegistryState, SchemaVersion
from yak.registry.store import START_TIMEOUT_S, TOPIC, KafkaStore

__all__ = ["LEADER_WAIT_S", "MODES", "START_TIMEOUT_S", "TOPIC", "SchemaRegistry",
           "parse_version"]

log = logging.getLogger(__name__)

MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
LEADER_WAIT_S = 20.0



def parse_version(raw: str | int, allow_latest: bool = True) -> int:
    """A version in a path: 1..2^31-1, or `latest` / -1 (returned as -1)."""
    if isinstance(raw, int):
        v = raw
    elif allow_latest and str(raw).lower() == "latest":
        return -1
    else:
        try:
            v = int(str(raw))
        except ValueError:
            v = 0
    if v == -1 and allow_latest:
        return -1
    if not 1 <= v <= 2**31 - 1:
        raise RegistryError(422, INVALID_VERSION,
                            f"The specified version '{raw}' is not a valid version id. Allowed "
                            "values are between [1, 2^31-1] and the string \"latest\"")
    return v


class SchemaRegistry:
    def __init__(self, bootstrap: str, topic: str = TOPIC, timeout_s: float = 10.0,
                 security: Any = None) -> None:
        self.bootstrap = bootstrap
        self.security = security  # the gateway's client security, as in `KafkaStore`
        self.timeout_s = timeout_s
        self.store = KafkaStore(bootstrap, topic, timeout_s, security, on_started=self._join)
        self.state: RegistryState = self.store.state
        self.schemas = SchemaCache(self.state)
        self.elector: LeaderElector | None = None
        self.identity: Identity | None = None
        self._write_lock = asyncio.Lock()

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def topic(self) -> str:
        return self.store.topic

    async def ensure_started(self) -> None:
        """Start on first use (the gateway starts nothing until used); later calls just wait."""
        await self.store.ensure_started()

    def _join(self) -> None:
        """Once `_schemas` is read: join the election if this gateway knows its address."""
        if self.identity is not None:
            self._elect()

    def _elect(self) -> None:
        """Join the election once this gateway knows its own HTTP address (first request)."""
        if self.elector is None and self.identity is not None \
                and self.store.starting_or_started:
            self.elector = LeaderElector(self.bootstrap, self.identity,
                                         security=self.security)
            self.elector.start()

    async def stop(self) -> None:
        if self.elector is not None:
            await self.elector.stop()
        await self.store.stop()

    async def sync(self, timeout_s: float | None = None) -> None:
        """Wait until everything written to `_schemas` so far has been applied here."""
        await self.store.sync(timeout_s)

    # -- leadership ---------------------------------------------------------------------------

    async def leader(self) -> Identity:
        """The elected leader's identity (waits through a rebalance, bounded)."""
        self._elect()
        if self.elector is None:
            from yak.registry.errors import UNKNOWN_LEADER

            raise RegistryError(500, UNKNOWN_LEADER, "this gateway does not know its own "
                                "HTTP address yet, so it cannot take part in the election")
        found = await self.elector.wait_for_leader(LEADER_WAIT_S)
        if found is None:
            from yak.registry.errors import UNKNOWN_LEADER

            raise RegistryError(500, UNKNOWN_LEADER,
                                "no schema registry leader elected (is the group coordinator "
                                "reachable?)")
        return found

    # -- parsing ------------------------------------------------------------------------------

    def parsed(self, sv: SchemaVersion) -> Any:
        """`sv` parsed (once per schema id)."""
        return self.schemas.parsed(sv)

    def resolve(self, refs: list[Reference]) -> list[tuple[str, Any]]:
        """The named, parsed schemas that `refs` point at."""
        return self.schemas.resolve(refs)

    # -- reads --------------------------------------------------------------------------------

    def subject_versions(self, subject: str, deleted: bool = False) -> list[SchemaVersion]:
        versions = self.state.versions(subject, deleted)
        if not versions:
            raise subject_not_found(subject)
        return versions

    def version(self, subject: str, raw: str | int, deleted: bool = False) -> SchemaVersion:
        v = parse_version(raw)
        if subject not in self.state.subjects:
            raise subject_not_found(subject)
        if v == -1:
            versions = self.state.versions(subject, deleted)
            if not versions:
                raise subject_not_found(subject)
            return versions[-1]
        sv = self.state.subjects[subject].get(v)
        if sv is None or (sv.deleted and not deleted):
            raise version_not_found(subject, v)
        return sv

    def by_id(self, schema_id: int) -> SchemaVersion:
        sv = self.state.by_id.get(schema_id)
        if sv is None:
            raise schema_not_found(schema_id)
        return sv

    def level(self, subject: str | None) -> str:
        return (self.state.level(subject) if subject is not None else None) \
            or self.state.level(None) or compat.DEFAULT_LEVEL

    def mode(self, subject: str | None) -> str:
        return (self.state.modes.get(subject) if subject is not None else None) \
            or self.state.modes.get(None) or "READWRITE"

    def lookup(self, subject: str, schema_type: str | None, text: str,
               refs: list[Reference], normalize: bool, deleted: bool) -> SchemaVersion:
        if subject not in self.state.subjects:
            raise subject_not_found(subject)
        kind = (schema_type or "AVRO").upper()
        parsed = compat.parse(kind, text, self.resolve(refs))
        sv = self.schemas.find_version(subject, kind, parsed, refs, normalize, deleted)
        if sv is None:
            raise schema_not_found()
        return sv

    def compatibility(self, subject: str, version: str | None, schema_type: str | None,
                      text: str, refs: list[Reference], normalize: bool = False,
                      ) -> list[str]:
        """Messages (empty: compatible) for `text` against one version or the subject's level."""
        kind = (schema_type or "AVRO").upper()
        parsed = compat.parse(kind, text, self.resolve(refs))
        level = self.level(subject)
        if version is None:
            previous = self.state.versions(subject)
        else:
            previous = [self.version(subject, version)]
            level = level.removesuffix("_TRANSITIVE")
        olds = [self.parsed(sv) for sv in previous if sv.schema_type == kind]
        msgs = compat.check(level, parsed, olds)
        if any(sv.schema_type != kind for sv in previous) and level != "NONE":
            msgs.append(f"TYPE_CHANGED: the subject holds other schema types than {kind}")
        return msgs

    # -- writes (leader only) -----------------------------------------------------------------

    def _check_mode(self, subject: str | None) -> None:
        if self.mode(subject) in ("READONLY", "READONLY_OVERRIDE"):
            raise RegistryError(422, OPERATION_NOT_PERMITTED,
                                f"Subject {subject} is in read-only mode" if subject
                                else "The registry is in read-only mode")

    async def register(self, subject: str, schema_type: str | None, text: str,
                       refs: list[Reference], normalize: bool = False) -> SchemaVersion:
        kind = (schema_type or "AVRO").upper()
        async with self._write_lock:
            for _attempt in range(5):
                await self.sync()
                self._check_mode(subject)
                parsed = compat.parse(kind, text, self.resolve(refs))
                existing = self.schemas.find_version(subject, kind, parsed, refs, normalize)
                if existing is not None:
                    return existing
                live = self.state.versions(subject)
                level = self.level(subject)
                olds = [self.parsed(sv) for sv in live if sv.schema_type == kind]
                if level != "NONE" and any(sv.schema_type != kind for sv in live):
                    raise RegistryError(409, 409, f"Schema being registered is incompatible "
                                        f"with an earlier schema for subject \"{subject}\": "
                                        f"TYPE_CHANGED: the subject holds "
                                        f"{live[-1].schema_type} schemas, not {kind} "
                                        f"(compatibility {level})")
                errors = compat.check(level, parsed, olds)
                if errors:
                    raise RegistryError(
                        409, 409,
                        f"Schema being registered is incompatible with an earlier schema for "
                        f"subject \"{subject}\", details: {'; '.join(errors)} "
                        f"(compatibility {level}, latest version {live[-1].version})")
                schema_id = self.schemas.find_id(kind, parsed, refs, normalize)
                if schema_id is None:
                    schema_id = self.state.max_id + 1
                stored = compat.identity(parsed, True) if normalize and kind != "PROTOBUF" \
                    else parsed.canonical()
                all_versions = self.state.subjects.get(subject, {})
                version = max(all_versions, default=0) + 1
                sv = SchemaVersion(subject, version, schema_id, kind, stored, list(refs))
                await self.store.append([(S.schema_key(subject, version), S.schema_value(sv))])
                owner = self.state.by_id.get(schema_id)
                if owner is not None and owner.content() == sv.content():
                    self.schemas.remember(schema_id, parsed)
                    return self.state.subjects[subject][version]
                log.warning("id %d was taken by another writer; registering again", schema_id)
            raise RegistryError(500, STORE_ERROR, "could not assign a schema id (contention)")

    async def forward(self, method: str, path_and_query: str, body: bytes,
                      headers: dict[str, str]) -> Any:
        """Send a write to the leader; None when this gateway is the leader.

        A leader that cannot be connected to (it died; the group has not noticed yet) is
        waited out: once the coordinator drops it (session timeout) and the group elects
        another, the request goes there. Only refused connections are retried: such a
        request never reached anyone, so it cannot be applied twice."""
        import httpx

        from yak.registry.errors import REQUEST_FORWARDING_FAILED

        leader = await self.leader()
        for attempt in range(3):
            if leader == self.identity:
                return None
            try:
                async with httpx.AsyncClient(timeout=self.timeout_s + 5) as client:
                    return await client.request(method, leader.url + path_and_query,
                                                content=body, headers=headers)
            except (httpx.ConnectError, httpx.ConnectTimeout) as e:
                assert self.elector is not None
                new = await self.elector.wait_for_new_leader(leader, LEADER_WAIT_S)
                if new is None or attempt == 2:
                    raise RegistryError(500, REQUEST_FORWARDING_FAILED,
                                        f"Error while forwarding the request to the leader "
                                        f"{leader.url}: {e!r}") from None
                leader = new
            except httpx.HTTPError as e:
                raise RegistryError(500, REQUEST_FORWARDING_FAILED,
                                    f"Error while forwarding the request to the leader "
                                    f"{leader.url}: {e!r}") from None
        raise RegistryError(500, REQUEST_FORWARDING_FAILED, "no reachable leader")

    async def register_via_leader(self, subject: str, schema_type: str, text: str,
                                  refs: list[Reference] | None = None) -> SchemaVersion:
        """Register here when this gateway leads, else through the leader's HTTP API."""
        import json as _json
        from urllib.parse import quote

        body = {"schema": text, "schemaType": schema_type,
                "references": [r.to_json() for r in refs or ()]}
        resp = await self.forward("POST", f"/subjects/{quote(subject, safe='')}/versions",
                                  _json.dumps(body).encode(),
                                  {"content-type": "application/json"})
        if resp is None:
            return await self.register(subject, schema_type, text, list(refs or ()))
        answer = resp.json()
        if resp.status_code != 200:
            raise RegistryError(resp.status_code, int(answer.get("error_code", 500)),
                                str(answer.get("message")))
        await self.store.wait_applied(await self.store.end_offset() - 1, self.timeout_s)
        return self.by_id(int(answer["id"]))

    async def delete_version(self, subject: str, raw: str, permanent: bool) -> int:
        async with self._write_lock:
            await self.sync()
            self._check_mode(subject)
            v = parse_version(raw)
            if subject not in self.state.subjects:
                raise subject_not_found(subject)
            if v == -1:
                live = self.state.versions(subject, deleted=permanent)
                if not live:
                    raise subject_not_found(subject)
                v = live[-1].version
            sv = self.state.subjects[subject].get(v)
            if sv is None:
                raise version_not_found(subject, v)
            users = self.state.referenced_by(subject, v)
            if users:
                raise RegistryError(422, REFERENCE_EXISTS,
                                    f"One or more references exist to the schema "
                                    f"{{subject={subject}, version={v}}}: ids {users}")
            if permanent:
                if not sv.deleted:
                    raise RegistryError(404, SCHEMA_VERSION_NOT_SOFT_DELETED,
                                        f"Subject '{subject}' Version {v} was not deleted first "
                                        "before being permanently deleted")
                await self.store.append([(S.max_id_key(), S.max_id_value(self.state.max_id)),
                                    (S.schema_key(subject, v), None)])
            else:
                if sv.deleted:
                    raise RegistryError(404, SCHEMA_VERSION_SOFT_DELETED,
                                        f"Subject '{subject}' Version {v} was soft deleted. Set "
                                        "permanent=true to delete permanently")
                gone = SchemaVersion(sv.subject, sv.version, sv.id, sv.schema_type, sv.schema,
                                     list(sv.references), deleted=True)
                await self.store.append([(S.schema_key(subject, v), S.schema_value(gone))])
            return v

    async def delete_subject(self, subject: str, permanent: bool) -> list[int]:
        async with self._write_lock:
            await self.sync()
            self._check_mode(subject)
            all_versions = self.state.versions(subject, deleted=True)
            if not all_versions:
                raise subject_not_found(subject)
            live = [sv for sv in all_versions if not sv.deleted]
            for sv in live if not permanent else all_versions:
                users = self.state.referenced_by(subject, sv.version)
                if users:
                    raise RegistryError(422, REFERENCE_EXISTS,
                                        f"One or more references exist to the schema "
                                        f"{{subject={subject}, version={sv.version}}}: ids {users}")
            if permanent:
                if live:
                    raise RegistryError(404, SUBJECT_NOT_SOFT_DELETED,
                                        f"Subject '{subject}' was not deleted first before "
                                        "being permanently deleted")
                records: list[tuple[bytes, bytes | None]] = [
                    (S.max_id_key(), S.max_id_value(self.state.max_id))]
                records += [(S.schema_key(subject, sv.version), None) for sv in all_versions]
                if subject in self.state.configs:
                    records.append((S.config_key(subject), None))
                if subject in self.state.modes:
                    records.append((S.mode_key(subject), None))
                await self.store.append(records)
                return [sv.version for sv in all_versions]
            if not live:
                raise RegistryError(404, SUBJECT_SOFT_DELETED,
                                    f"Subject '{subject}' was soft deleted. Set permanent=true "
                                    "to delete permanently")
            await self.store.append([(S.delete_subject_key(subject),
                                 S.delete_subject_value(subject, live[-1].version))])
            return [sv.version for sv in live]

    async def set_level(self, subject: str | None, level: str) -> str:
        level = str(level).upper()
        if level not in compat.LEVELS:
            raise RegistryError(422, INVALID_COMPATIBILITY_LEVEL,
                                f"Invalid compatibility level {level!r}. Valid values are "
                                f"{', '.join(compat.LEVELS)}")
        async with self._write_lock:
            await self.store.append([(S.config_key(subject), S.config_value(level))])
        return level

    async def delete_level(self, subject: str | None) -> str:
        async with self._write_lock:
            await self.sync()
            previous = self.level(subject)
            if subject is not None and subject not in self.state.configs:
                from yak.registry.errors import SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED

                if subject not in self.state.subjects:
                    raise subject_not_found(subject)
                raise RegistryError(404, SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED,
                                    f"Subject '{subject}' does not have subject-level "
                                    "compatibility configured")
            await self.store.append([(S.config_key(subject), None)])
            return previous

    async def set_mode(self, subject: str | None, mode: str) -> str:
        mode = str(mode).upper()
        if mode not in MODES:
            raise RegistryError(422, INVALID_MODE,
                                f"Invalid mode {mode!r}. Valid values are {', '.join(MODES)}")
        async with self._write_lock:
            await self.store.append([(S.mode_key(subject), S.mode_value(mode))])
        return mode

    async def delete_mode(self, subject: str | None) -> str:
        async with self._write_lock:
            await self.sync()
            previous = self.mode(subject)
            await self.store.append([(S.mode_key(subject), None)])
            return previous

    def stats(self) -> dict[str, Any]:
        return {"subjects": len(self.state.subject_names()), "schemas": len(self.state.by_id),
                "max_id": self.state.max_id, "applied_offset": self.state.applied,
                "leader": self.elector.leader.url if self.elector and self.elector.leader
                else None, "time": time.time()}
