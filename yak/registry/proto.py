"""PROTOBUF schemas: `.proto` text compiled by protoc (grpcio-tools), descriptors by `protobuf`.

Clients register either `.proto` text (Java, the REST proxy, the CLI) or, like
confluent-kafka's Python serializer, a base64 `FileDescriptorProto`; both become a
validated descriptor, which is the schema's identity (the same schema registered either
way gets the same id) and what `?format=serialized` returns. `.proto` text is compiled
in-process by protoc from grpcio-tools (`get_protos`, which reports errors with line and
column), and the descriptor is read back from the generated module's source without
executing it.

Compatibility follows Confluent's Protobuf rules (fields compared by tag number; adding and
removing optional fields, renaming, enum changes are compatible; changing a field's kind,
scalar family or message type, removing a message, adding or removing a required field,
moving fields into a oneof are not).
"""

from __future__ import annotations

import ast
import base64
import binascii
import os
import tempfile
import threading
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from yak.registry.errors import invalid_schema

_WELL_KNOWN = (
    "any", "api", "descriptor", "duration", "empty", "field_mask", "source_context", "struct",
    "timestamp", "type", "wrappers",
)
_compile_lock = threading.Lock()


def _well_known() -> dict[str, bytes]:
    from importlib import import_module

    out = {}
    for name in _WELL_KNOWN:
        mod = import_module(f"google.protobuf.{name}_pb2")
        out[mod.DESCRIPTOR.name] = mod.DESCRIPTOR.serialized_pb
    return out


_BUILTIN: dict[str, bytes] | None = None


def builtin_files() -> dict[str, bytes]:
    global _BUILTIN
    if _BUILTIN is None:
        _BUILTIN = _well_known()
    return _BUILTIN


def _descriptor_from_text(text: str, deps: dict[str, ProtobufSchema]) -> descriptor_pb2.FileDescriptorProto:
    import grpc_tools
    from grpc_tools import _protoc_compiler

    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    with tempfile.TemporaryDirectory(prefix="yak-proto-") as tmp:
        files = {name: dep.proto_text() for name, dep in _all_deps(deps).items()}
        files["__schema__.proto"] = text
        for name, body in files.items():
            path = os.path.join(tmp, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(body)
        try:
            with _compile_lock:
                out = _protoc_compiler.get_protos(b"__schema__.proto",
                                                  [tmp.encode(), include.encode()])
        except Exception as e:  # ProtocErrors: one message per error, with line and column
            raise invalid_schema(_protoc_message(e)) from None
    code = dict(out).get(b"__schema___pb2.py")
    if code is None:
        raise invalid_schema("protoc produced no descriptor")
    return _serialized_from_generated(code.decode())


def _protoc_message(e: Exception) -> str:
    errors = getattr(e, "errors", None)
    parts = []
    try:
        for err in errors() if callable(errors) else []:
            msg = err.message.decode() if isinstance(err.message, bytes) else str(err.message)
            parts.append(f"line {err.line + 1}:{err.column + 1}: {msg}")
    except Exception:  # an unexpected shape: fall back to the exception's text
        parts = []
    return "; ".join(parts) if parts else str(e)


def _serialized_from_generated(code: str) -> descriptor_pb2.FileDescriptorProto:
    """The FileDescriptorProto protoc embedded in a generated `_pb2.py` (never executed)."""
    for node in ast.walk(ast.parse(code)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "AddSerializedFile" and node.args):
            raw = ast.literal_eval(node.args[0])
            fdp = descriptor_pb2.FileDescriptorProto()
            fdp.ParseFromString(raw)
            return fdp
    raise invalid_schema("protoc produced no descriptor")


def _all_deps(deps: dict[str, ProtobufSchema]) -> dict[str, ProtobufSchema]:
    out: dict[str, ProtobufSchema] = {}
    for name, dep in deps.items():
        out.update(_all_deps(dep.deps))
        out[name] = dep
    return out


def _looks_serialized(text: str) -> bytes | None:
    s = text.strip()
    if not s or any(c.isspace() for c in s) or ";" in s:
        return None
    try:
        return base64.b64decode(s, validate=True)
    except (binascii.Error, ValueError):
        return None


class ProtobufSchema:
    schema_type = "PROTOBUF"

    def __init__(self, text: str, references: list[tuple[str, ProtobufSchema]] | None = None,
                 ) -> None:
        self.deps = dict(references or ())
        raw = _looks_serialized(text)
        if raw is not None:
            fdp = descriptor_pb2.FileDescriptorProto()
            try:
                fdp.ParseFromString(raw)
            except DecodeError as e:
                raise invalid_schema(f"not a serialized FileDescriptorProto: {e}") from None
            self.source = None
        else:
            fdp = _descriptor_from_text(text, self.deps)
            self.source = text
        fdp.ClearField("source_code_info")
        self.text = text
        self.fdp = fdp
        self._pool: Any = None
        self.pool()  # validates: every type resolves, names are unique

    # -- forms ------------------------------------------------------------------------------

    def canonical(self) -> str:
        return self.text.strip() if self.source is None else self.text

    def key(self) -> str:
        """Identity for "same schema, same id": the descriptor, whatever form it came in."""
        fdp = descriptor_pb2.FileDescriptorProto()
        fdp.CopyFrom(self.fdp)
        fdp.ClearField("name")
        return base64.b64encode(fdp.SerializeToString(deterministic=True)).decode()

    def normalized(self) -> str:
        return self.canonical()

    def serialized(self) -> str:
        return base64.b64encode(self.fdp.SerializeToString()).decode()

    def proto_text(self) -> str:
        """`.proto` text for a file that imports this one (compiling needs text)."""
        if self.source is not None:
            return self.source
        from yak.registry.proto_text import render

        return render(self.fdp)

    # -- descriptors ------------------------------------------------------------------------

    def pool(self) -> Any:
        if self._pool is None:
            pool = descriptor_pool.DescriptorPool()
            added: set[str] = set()
            builtins = builtin_files()

            def add(fdp: descriptor_pb2.FileDescriptorProto, name: str,
                    deps: dict[str, ProtobufSchema]) -> None:
                for dep_name in fdp.dependency:
                    if dep_name in added:
                        continue
                    if dep_name in deps:
                        add(deps[dep_name].fdp, dep_name, deps[dep_name].deps)
                    elif dep_name in builtins:
                        pool.AddSerializedFile(builtins[dep_name])
                        added.add(dep_name)
                    else:
                        raise invalid_schema(f"import {dep_name!r} is not a reference of this "
                                             "schema nor a google/protobuf well-known type")
                copy = descriptor_pb2.FileDescriptorProto()
                copy.CopyFrom(fdp)
                copy.name = name
                try:
                    pool.Add(copy)
                except (TypeError, ValueError) as e:
                    raise invalid_schema(str(e)) from None
                added.add(name)

            name = self.fdp.name or "__schema__.proto"
            add(self.fdp, name, self.deps)
            self._pool = pool
            self._file = pool.FindFileByName(name)
        return self._pool

    def message_descriptor(self, indexes: list[int]) -> Any:
        """The message a Confluent message-index path names ([0] = the first message)."""
        self.pool()
        msgs = list(self._file.message_types_by_name.values())
        desc = None
        for i in indexes or [0]:
            if i >= len(msgs):
                raise ValueError(f"message index {indexes} is not in the schema")
            desc = msgs[i]
            msgs = list(desc.nested_types)
        return desc

    def message_class(self, indexes: list[int]) -> Any:
        return message_factory.GetMessageClass(self.message_descriptor(indexes))

    # -- compatibility ----------------------------------------------------------------------

    def can_read(self, writer: ProtobufSchema) -> list[str]:
        return _Diff(writer, self).run()


_GENERAL = {"int32", "int64", "uint32", "uint64", "bool"}
_SCALAR_FAMILY = {
    **dict.fromkeys(("int32", "int64", "uint32", "uint64", "bool", "enum"), "GENERAL_NUMBER"),
    **dict.fromkeys(("sint32", "sint64"), "SIGNED_NUMBER"),
    **dict.fromkeys(("string", "bytes"), "STRING_OR_BYTES"),
    **dict.fromkeys(("fixed32", "sfixed32"), "FIXED32"),
    **dict.fromkeys(("fixed64", "sfixed64"), "FIXED64"),
    "float": "FLOAT", "double": "DOUBLE",
}
_TYPE_NAMES = {v: k[len("TYPE_"):].lower()
               for k, v in descriptor_pb2.FieldDescriptorProto.Type.items()}
_COMPATIBLE = {
    "MESSAGE_ADDED", "MESSAGE_MOVED", "ENUM_ADDED", "ENUM_REMOVED", "ENUM_CONST_ADDED",
    "ENUM_CONST_CHANGED", "ENUM_CONST_REMOVED", "FIELD_ADDED", "FIELD_REMOVED",
    "FIELD_NAME_CHANGED", "FIELD_STRING_OR_BYTES_LABEL_CHANGED", "ONEOF_ADDED", "ONEOF_REMOVED",
    "ONEOF_FIELD_ADDED",
}


class _Diff:
    """Differences between `original` (the writer's schema) and `update` (the reader's)."""

    def __init__(self, original: ProtobufSchema, update: ProtobufSchema) -> None:
        self.original = original
        self.update = update
        self.errors: list[str] = []
        self.seen: set[tuple[str, str]] = set()
        self.compared: set[tuple[str, str]] = set()

    def add(self, kind: str, where: str) -> None:
        if kind not in _COMPATIBLE:
            self.errors.append(f"{kind} at '{where}'")

    def run(self) -> list[str]:
        o, u = self.original.fdp, self.update.fdp
        if o.package != u.package:
            self.add("PACKAGE_CHANGED", "#")
        self._types(list(o.message_type), list(u.message_type), "#")
        return self.errors

    def _types(self, omsgs: list[Any], umsgs: list[Any], where: str) -> None:
        om = {m.name: m for m in omsgs}
        um = {m.name: m for m in umsgs}
        for name in sorted(set(om) | set(um)):
            a, b = om.get(name), um.get(name)
            if b is None:
                if not a.options.map_entry:
                    self.add("MESSAGE_REMOVED", f"{where}/{name}")
            elif a is not None:
                self._message(a, b, f"{where}/{name}")

    def _message(self, a: Any, b: Any, where: str) -> None:
        key = (where, a.name)
        if key in self.seen:
            return
        self.seen.add(key)
        a_top = {f.number: f for f in a.field if not f.HasField("oneof_index")}
        b_top = {f.number: f for f in b.field if not f.HasField("oneof_index")}
        a_all = {f.number: f for f in a.field}
        b_all = {f.number: f for f in b.field}
        a_oneof = {f.number: a.oneof_decl[f.oneof_index].name for f in a.field
                   if f.HasField("oneof_index") and not f.proto3_optional}
        b_oneof = {f.number: b.oneof_decl[f.oneof_index].name for f in b.field
                   if f.HasField("oneof_index") and not f.proto3_optional}
        # proto3 `optional` is a synthetic oneof: treat such fields as top-level
        for f in a.field:
            if f.proto3_optional:
                a_top[f.number] = f
        for f in b.field:
            if f.proto3_optional:
                b_top[f.number] = f
        for oneof in {n for n in b_oneof.values()}:
            tags = [t for t, n in b_oneof.items() if n == oneof]
            moved = sum(1 for t in tags if t in a_top)
            existing = sum(1 for t in tags if t not in a_top and t in a_oneof)
            for t in tags:
                a_top.pop(t, None)
            if moved > 1:
                self.add("MULTIPLE_FIELDS_MOVED_TO_ONEOF", f"{where}/{oneof}")
            elif moved == 1 and existing:
                self.add("FIELD_MOVED_TO_EXISTING_ONEOF", f"{where}/{oneof}")
        for oneof in sorted(set(a_oneof.values()) | set(b_oneof.values())):
            at = {t for t, n in a_oneof.items() if n == oneof}
            bt = {t for t, n in b_oneof.items() if n == oneof}
            if not bt:
                self.add("ONEOF_REMOVED", f"{where}/{oneof}")
            elif not at:
                self.add("ONEOF_ADDED", f"{where}/{oneof}")
            else:
                for t in sorted(at - bt):
                    self.add("ONEOF_FIELD_REMOVED", f"{where}/{oneof}/{t}")
                for t in sorted(bt - at):
                    self.add("ONEOF_FIELD_ADDED", f"{where}/{oneof}/{t}")
                for t in sorted(at & bt):
                    self._field(a_all[t], b_all[t], f"{where}/{oneof}/{t}")
        req = descriptor_pb2.FieldDescriptorProto.LABEL_REQUIRED
        for t in sorted(set(a_top) | set(b_top)):
            fa, fb = a_top.get(t), b_top.get(t)
            if fb is None:
                self.add("REQUIRED_FIELD_REMOVED" if fa.label == req else "FIELD_REMOVED",
                         f"{where}/{t}")
            elif fa is None:
                self.add("REQUIRED_FIELD_ADDED" if fb.label == req else "FIELD_ADDED",
                         f"{where}/{t}")
            else:
                self._field(fa, fb, f"{where}/{t}")
        for t in sorted(set(a_all) & set(b_all)):
            if (t in a_oneof or t in b_oneof) and a_oneof.get(t) != b_oneof.get(t):
                self._field(a_all[t], b_all[t], f"{where}/{t}")
        self._types(list(a.nested_type), list(b.nested_type), where)

    def _lookup(self, schema: ProtobufSchema, type_name: str) -> Any:
        try:
            return schema.pool().FindMessageTypeByName(type_name.lstrip("."))
        except KeyError:
            return None

    def _kind(self, schema: ProtobufSchema, f: Any) -> tuple[str, Any]:
        t = _TYPE_NAMES[f.type]
        if t == "message" or t == "group":
            desc = self._lookup(schema, f.type_name)
            if desc is not None and desc.GetOptions().map_entry:
                return "MAP", desc
            return "MESSAGE", desc
        return "SCALAR", t

    def _field(self, fa: Any, fb: Any, where: str) -> None:
        if fa.name != fb.name:
            self.add("FIELD_NAME_CHANGED", where)
        self._compare_kinds(self._kind(self.original, fa), self._kind(self.update, fb), where)

    def _compare_kinds(self, ka: tuple[str, Any], kb: tuple[str, Any], where: str) -> None:
        if ka[0] != kb[0]:
            self.add("FIELD_KIND_CHANGED", where)
            return
        if ka[0] == "SCALAR":
            if _SCALAR_FAMILY[ka[1]] != _SCALAR_FAMILY[kb[1]]:
                self.add("FIELD_SCALAR_KIND_CHANGED", where)
        elif ka[0] == "MAP":
            for fname in ("key", "value"):
                fa = ka[1].fields_by_name[fname]
                fb = kb[1].fields_by_name[fname]
                self._compare_kinds(self._desc_kind(fa), self._desc_kind(fb), f"{where}/{fname}")
        else:
            a, b = ka[1], kb[1]
            if a is None or b is None or a.name != b.name:
                self.add("FIELD_NAMED_TYPE_CHANGED", where)
                return
            if (a.full_name, b.full_name) in self.compared:
                return
            self.compared.add((a.full_name, b.full_name))
            before = len(self.errors)
            pa, pb = descriptor_pb2.DescriptorProto(), descriptor_pb2.DescriptorProto()
            a.CopyToProto(pa)
            b.CopyToProto(pb)
            self._message(pa, pb, f"{where}/{a.name}")
            if len(self.errors) > before:
                self.add("FIELD_NAMED_TYPE_CHANGED", where)

    @staticmethod
    def _desc_kind(f: Any) -> tuple[str, Any]:
        if f.message_type is not None:
            return ("MAP" if f.message_type.GetOptions().map_entry else "MESSAGE"), f.message_type
        if f.enum_type is not None:
            return "SCALAR", "enum"
        return "SCALAR", _TYPE_NAMES[f.type]
