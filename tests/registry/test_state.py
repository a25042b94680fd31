"""The registry state applied from `_schemas` records (Confluent's formats), no broker:
first writer of an id wins, ids survive compaction of hard deletes, soft deletes, configs,
malformed records skipped."""

from __future__ import annotations

from yak.registry import state as S
from yak.registry.state import RegistryState, SchemaVersion


def sv(subject: str, version: int, schema_id: int, schema: str = '"string"',
       deleted: bool = False) -> SchemaVersion:
    return SchemaVersion(subject, version, schema_id, "AVRO", schema, deleted=deleted)


def apply_all(st: RegistryState, records: list[tuple[bytes, bytes | None]]) -> None:
    for off, (k, v) in enumerate(records, start=st.applied + 1):
        st.apply(off, k, v)


def test_the_first_record_for_an_id_owns_it() -> None:
    st = RegistryState()
    apply_all(st, [(S.schema_key("a", 1), S.schema_value(sv("a", 1, 1, '"int"'))),
                   (S.schema_key("b", 1), S.schema_value(sv("b", 1, 1, '"long"'))),
                   (S.schema_key("c", 1), S.schema_value(sv("c", 1, 1, '"int"')))])
    assert st.by_id[1].schema == '"int"'
    assert st.subject_names() == ["a", "c"]  # b's record lost the race and is ignored
    assert st.rejected == [(1, 1)]


def test_ids_survive_compaction_of_a_hard_delete() -> None:
    log = [(S.schema_key("a", 1), S.schema_value(sv("a", 1, 1))),
           (S.schema_key("b", 1), S.schema_value(sv("b", 1, 2, '"int"'))),
           (S.schema_key("b", 1), S.schema_value(sv("b", 1, 2, '"int"', deleted=True))),
           (S.max_id_key(), S.max_id_value(2)),
           (S.schema_key("b", 1), None)]
    st = RegistryState()
    apply_all(st, log)
    assert st.max_id == 2 and 2 not in st.by_id
    # After compaction only the latest record per key remains, and tombstones go too.
    compacted = [log[0], log[3]]
    again = RegistryState()
    apply_all(again, compacted)
    assert again.max_id == 2


def test_soft_delete_config_mode_and_junk() -> None:
    st = RegistryState()
    apply_all(st, [(S.schema_key("s", 1), S.schema_value(sv("s", 1, 1))),
                   (S.schema_key("s", 2), S.schema_value(sv("s", 2, 2, '"int"'))),
                   (S.config_key("s"), S.config_value("FULL")),
                   (S.config_key(None), S.config_value("NONE")),
                   (S.mode_key(None), S.mode_value("READONLY")),
                   (b"not json", b"{}"),
                   (S.delete_subject_key("s"), S.delete_subject_value("s", 2)),
                   (S.config_key("s"), None)])
    assert st.subject_names() == [] and st.subject_names(deleted=True) == ["s"]
    assert [v.deleted for v in st.versions("s", deleted=True)] == [True, True]
    assert st.level("s") is None and st.level(None) == "NONE"
    assert st.modes[None] == "READONLY"
    assert st.applied == 7  # the junk record was skipped, not fatal


def test_record_formats_are_confluents() -> None:
    assert S.schema_key("orders-value", 3) == \
        b'{"keytype":"SCHEMA","subject":"orders-value","version":3,"magic":1}'
    v = S.schema_value(SchemaVersion("t", 1, 7, "PROTOBUF", "syntax...", []))
    assert v == (b'{"subject":"t","version":1,"id":7,"schemaType":"PROTOBUF",'
                 b'"schema":"syntax...","deleted":false}')
    assert S.config_key(None) == b'{"keytype":"CONFIG","subject":null,"magic":0}'
