"""`yak schema ...`: register, list, get, delete schemas and check or set compatibility.

Talks to a schema registry over Confluent's REST API (Yak's gateway serves one at the root of
its HTTP port; Confluent's or Redpanda's work the same), so like the other client commands
it works against any cluster. Registry errors are one line with Confluent's error code.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import typer

from yak.cli.common import fail

app = typer.Typer(help="Register, list, get, delete schemas; check or set compatibility.",
                  no_args_is_help=True)

DEFAULT_REGISTRY = "http://127.0.0.1:8080"
LEVELS = ("BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
          "FULL_TRANSITIVE", "NONE")
TYPES = ("AVRO", "JSON", "PROTOBUF")

Registry = Annotated[str, typer.Option(
    "--registry", "-r", envvar="YAK_SCHEMA_REGISTRY", show_envvar=True,
    help="Schema registry URL (Yak's gateway HTTP address).")]
Timeout = Annotated[float, typer.Option("--timeout", min=0.1,
                                        help="Seconds to wait for the registry.")]
Format = Annotated[str, typer.Option("--format", "-f", help="table or json.")]


def _call(registry: str, method: str, path: str, timeout: float,
          body: dict[str, Any] | None = None) -> Any:
    import httpx

    url = registry.rstrip("/") + path
    if not url.startswith(("http://", "https://")):
        fail(f"--registry must be an http(s) URL, got {registry!r}", 2)
    try:
        r = httpx.request(method, url, json=body, timeout=timeout,
                          headers={"accept": "application/vnd.schemaregistry.v1+json"})
    except httpx.HTTPError as e:
        fail(f"schema registry unreachable at {registry} ({type(e).__name__}: {e})")
    try:
        answer = r.json()
    except ValueError:
        answer = r.text
    if r.status_code >= 400:
        if isinstance(answer, dict) and "message" in answer:
            fail(f"{answer['message']} (error {answer.get('error_code', r.status_code)})")
        fail(f"HTTP {r.status_code} from {url}")
    return answer


def _subject(s: str) -> str:
    return quote(s, safe="")


def _read_schema(source: str) -> str:
    if source == "-":
        return sys.stdin.read()
    path = Path(source)
    if not path.is_file():
        fail(f"schema file {source!r} not found", 2)
    return path.read_text()


def _schema_type(kind: str | None, source: str) -> str:
    if kind is None:
        kind = "PROTOBUF" if source.endswith(".proto") else \
            "JSON" if source.endswith((".json", ".jsonschema")) and "schema" in source.lower() \
            else "AVRO"
    kind = kind.upper()
    if kind not in TYPES:
        fail(f"--type must be one of {', '.join(TYPES)}, got {kind!r}", 2)
    return kind


def _refs(refs: list[str] | None) -> list[dict[str, Any]]:
    out = []
    for ref in refs or ():
        name, eq, rest = ref.partition("=")
        subject, colon, version = rest.rpartition(":")
        if not eq or not colon or not subject or not version.isdigit():
            fail(f"--ref must be NAME=SUBJECT:VERSION, got {ref!r}", 2)
        out.append({"name": name, "subject": subject, "version": int(version)})
    return out


@app.command("register")
def register(
    subject: Annotated[str, typer.Argument(help="Subject, e.g. orders-value.")],
    schema_file: Annotated[str, typer.Argument(help="Schema file, or - for stdin.")],
    schema_type: Annotated[str | None, typer.Option(
        "--type", "-t", help="AVRO (default), JSON or PROTOBUF (.proto files: PROTOBUF).")] = None,
    ref: Annotated[list[str] | None, typer.Option(
        "--ref", help="A reference NAME=SUBJECT:VERSION (repeatable).")] = None,
    normalize: Annotated[bool, typer.Option("--normalize", help="Normalize first.")] = False,
    registry: Registry = DEFAULT_REGISTRY,
    timeout: Timeout = 10.0,
) -> None:
    """Register a schema under SUBJECT; prints its id (the same schema keeps its id)."""
    body = {"schema": _read_schema(schema_file), "schemaType": _schema_type(schema_type,
                                                                             schema_file)}
    refs = _refs(ref)
    if refs:
        body["references"] = refs
    answer = _call(registry, "POST", f"/subjects/{_subject(subject)}/versions"
                   f"?normalize={str(normalize).lower()}", timeout, body)
    version = answer.get("version")
    print(f"id {answer['id']}" + (f" (version {version} of {subject})" if version else ""))


@app.command("list")
def list_subjects(
    deleted: Annotated[bool, typer.Option("--deleted", help="Include soft-deleted.")] = False,
    prefix: Annotated[str, typer.Option("--prefix", help="Only subjects starting so.")] = "",
    fmt: Format = "table",
    registry: Registry = DEFAULT_REGISTRY,
    timeout: Timeout = 10.0,
) -> None:
    """Subjects with their latest version, schema id and type."""
    if fmt not in ("table", "json"):
        fail(f"--format must be table or json, got {fmt!r}", 2)
    names = _call(registry, "GET", f"/subjects?deleted={str(deleted).lower()}"
                  f"&subjectPrefix={quote(prefix)}", timeout)
    rows = []
    for name in names:
        latest = _call(registry, "GET", f"/subjects/{_subject(name)}/versions/latest"
                       f"?deleted={str(deleted).lower()}", timeout)
        rows.append({"subject": name, "version": latest["version"], "id": latest["id"],
                     "type": latest.get("schemaType", "AVRO")})
    if fmt == "json":
        print(json.dumps(rows))
        return
    if not rows:
        print("no subjects")
        return
    width = max(len(r["subject"]) for r in rows)
    print(f"{'SUBJECT':<{width}}  {'VERSION':>7}  {'ID':>6}  TYPE")
    for r in rows:
        print(f"{r['subject']:<{width}}  {r['version']:>7}  {r['id']:>6}  {r['type']}")


@app.command("get")
def get(
    subject: Annotated[str | None, typer.Argument(help="Subject (or use --id).")] = None,
    version: Annotated[str, typer.Option("--version", "-v", help="Version or latest.")] = "latest",
    schema_id: Annotated[int | None, typer.Option("--id", help="Get by global id.")] = None,
    registry: Registry = DEFAULT_REGISTRY,
    timeout: Timeout = 10.0,
) -> None:
    """Print a schema (JSON pretty-printed); a header line on stderr says which."""
    if (subject is None) == (schema_id is None):
        fail("give a SUBJECT or --id (one of them)", 2)
    if schema_id is not None:
        answer = _call(registry, "GET", f"/schemas/ids/{schema_id}", timeout)
        head = f"id {schema_id}"
    else:
        answer = _call(registry, "GET", f"/subjects/{_subject(subject or '')}/versions/"
                       f"{quote(version)}", timeout)
        head = f"{subject} version {answer['version']}, id {answer['id']}"
    kind = answer.get("schemaType", "AVRO")
    print(f"# {head}, {kind}", file=sys.stderr)
    text = answer["schema"]
    if kind != "PROTOBUF":
        with contextlib.suppress(ValueError):
            text = json.dumps(json.loads(text), indent=2)
    print(text)


@app.command("delete")
def delete(
    subject: Annotated[str, typer.Argument(help="Subject.")],
    version: Annotated[str | None, typer.Option("--version", "-v",
                                                help="One version (default: all).")] = None,
    permanent: Annotated[bool, typer.Option(
        "--permanent", help="Hard delete (after a soft delete).")] = False,
    registry: Registry = DEFAULT_REGISTRY,
    timeout: Timeout = 10.0,
) -> None:
    """Soft-delete a subject or one version (--permanent: hard delete, after a soft one)."""
    path = f"/subjects/{_subject(subject)}"
    if version is not None:
        path += f"/versions/{quote(version)}"
    answer = _call(registry, "DELETE", f"{path}?permanent={str(permanent).lower()}", timeout)
    versions = answer if isinstance(answer, list) else [answer]
    kind = "permanently deleted" if permanent else "deleted"
    print(f"{kind} {subject} version(s) {', '.join(str(v) for v in versions)}")


@app.command("compat")
def compat(
    subject: Annotated[str, typer.Argument(help="Subject.")],
    set_level: Annotated[str | None, typer.Option(
        "--set", help=f"Set the level: {', '.join(LEVELS)}.")] = None,
    check: Annotated[str | None, typer.Option(
        "--check", help="Schema file (or -) to test against the subject; exit 1 if not "
                        "compatible.")] = None,
    schema_type: Annotated[str | None, typer.Option("--type", "-t")] = None,
    registry: Registry = DEFAULT_REGISTRY,
    timeout: Timeout = 10.0,
) -> None:
    """Show a subject's compatibility level, set it (--set) or test a schema (--check)."""
    if set_level is not None:
        level = set_level.upper()
        if level not in LEVELS:
            fail(f"--set must be one of {', '.join(LEVELS)}, got {set_level!r}", 2)
        _call(registry, "PUT", f"/config/{_subject(subject)}", timeout, {"compatibility": level})
        print(f"{subject}: {level}")
        return
    if check is not None:
        body = {"schema": _read_schema(check), "schemaType": _schema_type(schema_type, check)}
        answer = _call(registry, "POST", f"/compatibility/subjects/{_subject(subject)}"
                       "/versions/latest?verbose=true", timeout, body)
        if answer.get("is_compatible"):
            print(f"compatible with {subject}")
            return
        for msg in answer.get("messages") or ():
            print(msg, file=sys.stderr)
        fail(f"not compatible with {subject}")
    answer = _call(registry, "GET", f"/config/{_subject(subject)}?defaultToGlobal=true", timeout)
    print(f"{subject}: {answer['compatibilityLevel']}")
