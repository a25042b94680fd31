"""FileDescriptorProto -> `.proto` text.

A schema registered as a serialized descriptor (confluent-kafka's Python serializer does
that) is shown and returned as `.proto` text, as Confluent's registry does, and a text
schema that imports it needs its text to compile. `protobuf` can parse descriptors but not
print them as `.proto`, so this prints the parts a schema is made of: syntax, package,
imports, file options, messages (nested, maps, oneofs, proto3 `optional`, reserved), enums
and services. Tests round-trip the output through protoc.
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import descriptor_pb2

_F = descriptor_pb2.FieldDescriptorProto
_TYPES = {v: k[len("TYPE_"):].lower() for k, v in _F.Type.items()}
_LABELS = {_F.LABEL_OPTIONAL: "optional", _F.LABEL_REQUIRED: "required",
           _F.LABEL_REPEATED: "repeated"}
_FILE_OPTIONS = ("java_package", "java_outer_classname", "java_multiple_files", "go_package",
                 "csharp_namespace", "objc_class_prefix", "php_namespace", "ruby_package",
                 "optimize_for", "cc_enable_arenas", "swift_prefix")


def _literal(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    return str(v)


def render(fdp: descriptor_pb2.FileDescriptorProto) -> str:
    out: list[str] = []
    syntax = fdp.syntax or "proto2"
    out.append(f'syntax = "{syntax}";')
    if fdp.package:
        out.append(f"package {fdp.package};")
    for i, dep in enumerate(fdp.dependency):
        kind = "public " if i in fdp.public_dependency else "weak " if i in fdp.weak_dependency \
            else ""
        out.append(f'import {kind}"{dep}";')
    opts = fdp.options
    for name in _FILE_OPTIONS:
        if opts.HasField(name):
            value = getattr(opts, name)
            if name == "optimize_for":
                value_s = descriptor_pb2.FileOptions.OptimizeMode.Name(value)
            else:
                value_s = _literal(value)
            out.append(f"option {name} = {value_s};")
    for m in fdp.message_type:
        out += _message(m, syntax, 0)
    for e in fdp.enum_type:
        out += _enum(e, 0)
    for s in fdp.service:
        out.append(f"service {s.name} {{")
        for m in s.method:
            cs = "stream " if m.client_streaming else ""
            ss = "stream " if m.server_streaming else ""
            out.append(f"  rpc {m.name}({cs}{m.input_type}) returns ({ss}{m.output_type});")
        out.append("}")
    return "\n".join(out) + "\n"


def _type_name(f: Any) -> str:
    if f.type in (_F.TYPE_MESSAGE, _F.TYPE_ENUM, _F.TYPE_GROUP):
        return f.type_name  # fully qualified with a leading dot: valid .proto syntax
    return _TYPES[f.type]


def _field_options(f: Any, syntax: str) -> str:
    opts = []
    if f.HasField("default_value"):
        v = f.default_value
        if f.type in (_F.TYPE_STRING, _F.TYPE_BYTES):
            v = json.dumps(v)
        opts.append(f"default = {v}")
    if f.HasField("json_name") and f.json_name != _camel(f.name):
        opts.append(f"json_name = {json.dumps(f.json_name)}")
    if f.options.HasField("packed"):
        opts.append(f"packed = {_literal(f.options.packed)}")
    if f.options.HasField("deprecated"):
        opts.append(f"deprecated = {_literal(f.options.deprecated)}")
    return f" [{', '.join(opts)}]" if opts else ""


def _camel(name: str) -> str:
    parts = name.split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])


def _message(m: Any, syntax: str, depth: int) -> list[str]:
    pad = "  " * depth
    out = [f"{pad}message {m.name} {{"]
    maps = {f".{n.name}": n for n in m.nested_type if n.options.map_entry}
    entries = {n.name for n in m.nested_type if n.options.map_entry}

    def field_line(f: Any, in_oneof: bool) -> str:
        entry = None
        if f.type == _F.TYPE_MESSAGE and f.label == _F.LABEL_REPEATED:
            short = f.type_name.rsplit(".", 1)[-1]
            if short in entries:
                entry = next(n for n in m.nested_type if n.name == short)
        if entry is not None:
            k, v = entry.field[0], entry.field[1]
            head = f"map<{_type_name(k)}, {_type_name(v)}>"
        else:
            label = ""
            if not in_oneof:
                if f.proto3_optional:
                    label = "optional "
                elif f.label == _F.LABEL_REPEATED:
                    label = "repeated "
                elif syntax == "proto2":
                    label = _LABELS[f.label] + " "
            head = f"{label}{_type_name(f)}"
        return f"{head} {f.name} = {f.number}{_field_options(f, syntax)};"

    del maps
    real_oneofs = {f.oneof_index for f in m.field
                   if f.HasField("oneof_index") and not f.proto3_optional}
    emitted: set[int] = set()
    for f in m.field:
        if f.HasField("oneof_index") and f.oneof_index in real_oneofs:
            idx = f.oneof_index
            if idx in emitted:
                continue
            emitted.add(idx)
            out.append(f"{pad}  oneof {m.oneof_decl[idx].name} {{")
            for g in m.field:
                if g.HasField("oneof_index") and g.oneof_index == idx:
                    out.append(f"{pad}    {field_line(g, True)}")
            out.append(f"{pad}  }}")
        else:
            out.append(f"{pad}  {field_line(f, False)}")
    for n in m.nested_type:
        if not n.options.map_entry:
            out += _message(n, syntax, depth + 1)
    for e in m.enum_type:
        out += _enum(e, depth + 1)
    for r in m.reserved_range:
        end = r.end - 1
        out.append(f"{pad}  reserved {r.start}" + (f" to {end};" if end != r.start else ";"))
    if m.reserved_name:
        out.append(f"{pad}  reserved {', '.join(json.dumps(n) for n in m.reserved_name)};")
    out.append(f"{pad}}}")
    return out


def _enum(e: Any, depth: int) -> list[str]:
    pad = "  " * depth
    out = [f"{pad}enum {e.name} {{"]
    if e.options.HasField("allow_alias"):
        out.append(f"{pad}  option allow_alias = {_literal(e.options.allow_alias)};")
    for v in e.value:
        out.append(f"{pad}  {v.name} = {v.number};")
    out.append(f"{pad}}}")
    return out
