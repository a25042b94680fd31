"""`yak profile` (connection profiles, as rpk's) and `--profile` on client commands, against
a real broker subprocess; and the shell completion script of the root command."""

from __future__ import annotations

import json
import os
import stat

import pytest

from tests.cli.test_cli import ok, one_line_error, yak
from tests.conftest import free_port


def _clean_env(tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("YAK_PROFILE", "YAK_BOOTSTRAP")}
    env["YAK_CONFIG_DIR"] = str(tmp_path / "cfg")
    return env


def run(env: dict[str, str], *args: str, stdin: str | None = None):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "yak.cli.main", *args], input=stdin,
                          capture_output=True, text=True, timeout=60, env=env)


def okr(env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    r = run(env, *args, stdin=stdin)
    assert r.returncode == 0, f"yak {' '.join(args)} failed: {r.stderr}"
    return r.stdout


@pytest.mark.slow  # 21-39 s of CLI processes; CI keeps under 30 min (make test-slow runs it)
def test_profile_lifecycle_and_use_against_broker(broker, tmp_path) -> None:
    env = _clean_env(tmp_path)
    dead = f"127.0.0.1:{free_port()}"
    out = okr(env, "profile", "create", "p", "--bootstrap", broker.bootstrap,
              "-X", "sasl.password=hunter2", "--registry", "http://127.0.0.1:1",
              "--console", "http://127.0.0.1:2", "--no-use")
    assert "created profile p" in out
    path = tmp_path / "cfg" / "profiles.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    stored = json.loads(path.read_text())
    assert stored["profiles"]["p"]["client_settings"] == {"sasl.password": "hunter2"}
    assert stored["current"] is None

    # Fix the stored password away: this broker is PLAINTEXT and needs no settings.
    okr(env, "profile", "delete", "p")
    okr(env, "profile", "create", "p", "--bootstrap", broker.bootstrap,
        "--registry", "http://127.0.0.1:1", "--console", "http://127.0.0.1:2", "--no-use")
    okr(env, "profile", "create", "dead", "-b", dead, "-X", "sasl.password=hunter2")

    listed = json.loads(okr(env, "profile", "list", "--format", "json"))
    assert listed == [
        {"name": "dead", "current": True, "bootstrap": dead},
        {"name": "p", "current": False, "bootstrap": broker.bootstrap},
    ]
    table = okr(env, "profile", "list")
    assert "NAME" in table and "dead" in table and broker.bootstrap in table

    shown = json.loads(okr(env, "profile", "show", "p", "--format", "json"))
    assert shown == {"name": "p", "current": False, "bootstrap": broker.bootstrap,
                     "registry": "http://127.0.0.1:1", "console": "http://127.0.0.1:2",
                     "client_settings": {}}
    cur = json.loads(okr(env, "profile", "show", "--format", "json"))
    assert cur["name"] == "dead"
    assert cur["client_settings"] == {"sasl.password": "[redacted]"}
    assert "hunter2" not in okr(env, "profile", "show")

    # --profile: the profile's bootstrap, without --bootstrap.
    okr(env, "topic", "create", "prof-t", "--profile", "p")
    names = {t["name"] for t in json.loads(
        okr(env, "topic", "list", "--profile", "p", "--format", "json"))}
    assert "prof-t" in names
    # $YAK_PROFILE too.
    assert "prof-t" in okr({**env, "YAK_PROFILE": "p"}, "topic", "list")
    # The current profile (dead) when none is named: its broker is unreachable.
    r = run(env, "topic", "list", "--timeout", "1")
    one_line_error(r, dead)
    assert r.returncode == 1
    # Explicit --bootstrap (and $YAK_BOOTSTRAP) win over the profile's.
    assert "prof-t" in okr(env, "topic", "list", "--bootstrap", broker.bootstrap)
    assert "prof-t" in okr({**env, "YAK_BOOTSTRAP": broker.bootstrap}, "topic", "list",
                           "--profile", "dead")
    r = run(env, "topic", "list", "--profile", "p", "--bootstrap", dead, "--timeout", "1")
    one_line_error(r, dead)

    # `use` switches the current profile; produce/consume take it too.
    assert "using profile p" in okr(env, "profile", "use", "p")
    okr(env, "produce", "prof-t", stdin="hello\n")
    out = okr(env, "consume", "prof-t", "--from-beginning", "--max-messages", "1")
    assert out.strip() == "hello"

    # The profile's registry is the default --registry; an explicit one wins.
    r = run(env, "produce", "prof-t", "--schema-subject", "s", stdin="{}\n")
    one_line_error(r, "127.0.0.1:1")
    reg = f"http://127.0.0.1:{free_port()}"
    r = run(env, "produce", "prof-t", "--schema-subject", "s", "--registry", reg,
            stdin="{}\n")
    one_line_error(r, reg)


def test_profile_client_settings_are_defaults_that_flags_override(broker, tmp_path) -> None:
    env = _clean_env(tmp_path)
    okr(env, "profile", "create", "sasl", "-b", broker.bootstrap,
        "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=PLAIN",
        "-X", "sasl.username=u", "-X", "sasl.password=p")
    # The profile's SASL settings reach the client: a PLAINTEXT broker refuses them.
    r = run(env, "topic", "list", "--timeout", "2")
    assert r.returncode == 1, r.stderr
    one_line_error(r)
    # An explicit -X wins over the profile's setting, merged with the profile's others.
    r = run(env, "topic", "list", "-X", "security.protocol=PLAINTEXT")
    one_line_error(r, "sasl.mechanism is set but security.protocol is PLAINTEXT")
    assert r.returncode == 2
    okr(env, "profile", "create", "tls", "-b", broker.bootstrap,
        "-X", "security.protocol=SSL")
    r = run(env, "topic", "list", "--timeout", "2")
    assert r.returncode == 1, r.stderr
    one_line_error(r)
    assert "PARTITIONS" in okr(env, "topic", "list", "-X", "security.protocol=PLAINTEXT")


@pytest.mark.slow  # 21-39 s of CLI processes; CI keeps under 30 min (make test-slow runs it)
def test_profile_bad_input_exits_2(broker, tmp_path) -> None:
    env = _clean_env(tmp_path)
    r = run(env, "topic", "list", "--profile", "nope", "-b", broker.bootstrap)
    one_line_error(r, "unknown profile 'nope'")
    assert r.returncode == 2
    r = run({**env, "YAK_PROFILE": "nope"}, "topic", "list", "-b", broker.bootstrap)
    one_line_error(r, "unknown profile 'nope'")
    assert r.returncode == 2

    okr(env, "profile", "create", "p", "-b", broker.bootstrap)
    for args, frag in [
        (("profile", "create", "p", "-b", broker.bootstrap), "already exists"),
        (("profile", "create", "q", "-X", "novalue"), "KEY=VALUE"),
        (("profile", "use", "nope"), "unknown profile"),
        (("profile", "delete", "nope"), "unknown profile"),
        (("profile", "show", "nope"), "unknown profile"),
        (("profile", "list", "--format", "yaml"), "--format"),
    ]:
        r = run(env, *args)
        one_line_error(r, frag)
        assert r.returncode == 2, args
    okr(env, "profile", "delete", "p")
    r = run(env, "profile", "show")
    one_line_error(r, "no current profile")
    assert r.returncode == 2

    path = tmp_path / "cfg" / "profiles.json"
    for text in ("{not json", '{"profiles": []}', '{"profiles": {"p": {"bootstrap": 5}}}'):
        path.write_text(text)
        for args in (("profile", "list"), ("topic", "list", "-b", broker.bootstrap)):
            r = run(env, *args)
            one_line_error(r, "malformed profiles file")
            assert r.returncode == 2, (text, args)


def test_show_completion_prints_a_bash_script() -> None:
    r = yak("--show-completion", "bash",
            env={"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "True"})
    assert r.returncode == 0, r.stderr
    assert "_yak_completion" in r.stdout
    assert "complete -o default -F _yak_completion yak" in r.stdout
    # The script's protocol answers: subcommands, and --profile on client commands.
    r = yak(env={"_YAK_COMPLETE": "complete_bash", "COMP_WORDS": "yak pro",
                 "COMP_CWORD": "1"})
    assert set(r.stdout.split()) == {"produce", "profile"}
    r = yak(env={"_YAK_COMPLETE": "complete_bash", "COMP_WORDS": "yak topic list --pro",
                 "COMP_CWORD": "3"})
    assert "--profile" in r.stdout.split()
    assert ok("--help").count("--show-completion") == 1
