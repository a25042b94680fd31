"""`yak profile`: named connection profiles, as rpk's profiles.

A profile holds a bootstrap address, client settings (`-X` security settings), a schema
registry URL and a console URL. Every client command takes `--profile NAME` (or
`$YAK_PROFILE`, else the profile chosen by `yak profile use`); its values are defaults
that explicit flags and environment variables override.

Profiles live in `$YAK_CONFIG_DIR/profiles.json` (default `~/.config/yak/`), mode 0600
since client settings may hold passwords.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from yak.cli.common import fail, parse_pairs

app = typer.Typer(
    help="Connection profiles (as rpk profile): bootstrap, client settings, registry, "
    "console, used by every client command through --profile.",
    no_args_is_help=True,
)

_SECRET_WORDS = ("password", "secret", "token", "key.pem")


def profiles_path() -> Path:
    base = os.environ.get("YAK_CONFIG_DIR")
    root = Path(base) if base else Path.home() / ".config" / "yak"
    return root / "profiles.json"


def load() -> dict[str, Any]:
    """The profiles file as {"current": name|None, "profiles": {name: {...}}}; a malformed
    file is a usage error (exit 2)."""
    path = profiles_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {"current": None, "profiles": {}}
    except OSError as e:
        fail(f"cannot read profiles file {path}: {e.strerror or e}", exit_code=2)
    try:
        data = json.loads(text)
    except ValueError as e:
        fail(f"malformed profiles file {path}: {e}", exit_code=2)
    profiles = data.get("profiles") if isinstance(data, dict) else None
    current = data.get("current") if isinstance(data, dict) else None
    if not isinstance(profiles, dict) or not all(
        isinstance(p, dict) for p in profiles.values()
    ) or not (current is None or isinstance(current, str)):
        fail(f"malformed profiles file {path}: expected "
             '{"current": NAME, "profiles": {NAME: {...}}}', exit_code=2)
    for name, p in profiles.items():
        settings = p.get("client_settings", {})
        if not isinstance(settings, dict) or not all(
            isinstance(v, str) for v in settings.values()
        ) or not all(isinstance(p.get(k), str | None) for k in ("bootstrap", "registry",
                                                                   "console")):
            fail(f"malformed profiles file {path}: profile {name!r} has invalid values",
                 exit_code=2)
    return {"current": current, "profiles": profiles}


def save(data: dict[str, Any]) -> None:
    path = profiles_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.write("\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except OSError as e:
        fail(f"cannot write profiles file {path}: {e.strerror or e}")


def resolve(name: str | None) -> dict[str, Any] | None:
    """The profile named (by --profile / $YAK_PROFILE), else the current one, else None.
    An unknown name is a usage error (exit 2)."""
    data = load()
    if name is None:
        name = data["current"]
        if name is None:
            return None
    profile = data["profiles"].get(name)
    if profile is None:
        known = ", ".join(sorted(data["profiles"])) or "none"
        fail(f"unknown profile {name!r} (profiles: {known})", exit_code=2)
    return profile


def _redact(settings: dict[str, str]) -> dict[str, str]:
    return {k: ("[redacted]" if any(w in k.lower() for w in _SECRET_WORDS) else v)
            for k, v in settings.items()}


def _check_format(fmt: str) -> None:
    if fmt not in ("text", "json"):
        fail(f"invalid --format {fmt!r}: expected text or json", exit_code=2)


def _check_name(name: str) -> None:
    if not name or not name.strip() or name != name.strip():
        fail(f"invalid profile name {name!r}", exit_code=2)


Format = Annotated[str, typer.Option("--format", help="Output format: text or json.")]


@app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="Profile name.")],
    bootstrap: Annotated[str | None, typer.Option(
        "--bootstrap", "-b", help="Broker HOST:PORT for this profile.")] = None,
    client_setting: Annotated[list[str] | None, typer.Option(
        "-X", "--client-setting",
        help="Client setting KEY=VALUE (security.protocol, sasl.*, ssl.*); repeatable.")] = None,
    registry: Annotated[str | None, typer.Option(
        "--registry", help="Schema registry URL for this profile.")] = None,
    console: Annotated[str | None, typer.Option(
        "--console", help="Console URL for this profile.")] = None,
    no_use: Annotated[bool, typer.Option(
        "--no-use", help="Do not make the new profile the current one.")] = False,
) -> None:
    """Create a profile and (as rpk) make it the current one."""
    _check_name(name)
    settings = dict(parse_pairs(client_setting, "client setting"))
    data = load()
    if name in data["profiles"]:
        fail(f"profile {name!r} already exists", exit_code=2)
    profile: dict[str, Any] = {"client_settings": settings}
    for key, value in (("bootstrap", bootstrap), ("registry", registry),
                       ("console", console)):
        if value is not None:
            profile[key] = value
    data["profiles"][name] = profile
    if not no_use:
        data["current"] = name
    save(data)
    print(f"created profile {name}" + ("" if no_use else " (now current)"))


@app.command("list")
def list_profiles(fmt: Format = "text") -> None:
    """List profiles; the current one is marked."""
    _check_format(fmt)
    data = load()
    rows = [{"name": n, "current": n == data["current"],
             "bootstrap": p.get("bootstrap")} for n, p in sorted(data["profiles"].items())]
    if fmt == "json":
        print(json.dumps(rows))
        return
    print(f"{'NAME':<20} {'CURRENT':<8} BOOTSTRAP")
    for r in rows:
        print(f"{r['name']:<20} {'*' if r['current'] else '':<8} {r['bootstrap'] or ''}")


@app.command("use")
def use(name: Annotated[str, typer.Argument(help="Profile name.")]) -> None:
    """Make a profile the current one (used when no --profile is given)."""
    data = load()
    if name not in data["profiles"]:
        fail(f"unknown profile {name!r}", exit_code=2)
    data["current"] = name
    save(data)
    print(f"using profile {name}")


@app.command("delete")
def delete(name: Annotated[str, typer.Argument(help="Profile name.")]) -> None:
    """Delete a profile."""
    data = load()
    if name not in data["profiles"]:
        fail(f"unknown profile {name!r}", exit_code=2)
    del data["profiles"][name]
    if data["current"] == name:
        data["current"] = None
    save(data)
    print(f"deleted profile {name}")


@app.command("show")
def show(
    name: Annotated[str | None, typer.Argument(
        help="Profile name (default: the current one).")] = None,
    fmt: Format = "text",
) -> None:
    """Show a profile; secrets (passwords, tokens) are redacted."""
    _check_format(fmt)
    data = load()
    if name is None:
        name = data["current"]
        if name is None:
            fail("no current profile: name one, or pick one with 'yak profile use'",
                 exit_code=2)
    p = data["profiles"].get(name)
    if p is None:
        fail(f"unknown profile {name!r}", exit_code=2)
    out = {"name": name, "current": name == data["current"],
           "bootstrap": p.get("bootstrap"), "registry": p.get("registry"),
           "console": p.get("console"),
           "client_settings": _redact(p.get("client_settings", {}))}
    if fmt == "json":
        print(json.dumps(out))
        return
    for key in ("name", "current", "bootstrap", "registry", "console"):
        value = out[key]
        print(f"{key}: {'' if value is None else str(value).lower() if key == 'current' else value}")
    for k, v in sorted(out["client_settings"].items()):
        print(f"{k}={v}")
