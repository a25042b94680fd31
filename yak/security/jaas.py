"""Kafka's JAAS config strings (`sasl.jaas.config`), parsed as Kafka's JaasConfig does.

    org.apache.kafka.common.security.plain.PlainLoginModule required
        user_admin="admin-secret" user_alice="alice-secret";

One entry is `<login module class> <control flag> (<option>=<value>)* ;` -- values are
double- or single-quoted strings (backslash escapes) or bare words; `//` and `/* */`
comments are skipped. A broker's `listener.name.<l>.<mechanism>.sasl.jaas.config` holds
exactly one entry (Kafka's rule). Error messages name the setting but never echo its value:
it holds passwords.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from yak.settings import ConfigError

__all__ = [
    "PLAIN_LOGIN_MODULE",
    "SCRAM_LOGIN_MODULE",
    "JaasEntry",
    "parse_jaas_config",
    "plain_users",
]

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTHBEARER_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_FLAGS = ("required", "requisite", "sufficient", "optional")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}


@dataclass(frozen=True)
class JaasEntry:
    login_module: str
    control_flag: str  # lower case
    options: dict[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:  # options hold passwords: never print them
        return f"JaasEntry({self.login_module} {self.control_flag}, {len(self.options)} options)"


def _tokens(text: str, key: str) -> list[tuple[str, str]]:
    """('word'|'str'|'sym', value) tokens."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise ConfigError(f"invalid value for {key}: unterminated /* comment")
            i = j + 2
        elif c in "=;":
            out.append(("sym", c))
            i += 1
        elif c in "\"'":
            buf: list[str] = []
            i += 1
            while True:
                if i >= n:
                    raise ConfigError(f"invalid value for {key}: unterminated quoted value")
                ch = text[i]
                if ch == c:
                    i += 1
                    break
                if ch == "\\" and i + 1 < n:
                    nxt = text[i + 1]
                    buf.append(_ESCAPES.get(nxt, nxt))
                    i += 2
                    continue
                buf.append(ch)
                i += 1
            out.append(("str", "".join(buf)))
        elif c.isalnum() or c in "._-$":
            j = i
            while j < n and (text[j].isalnum() or text[j] in "._-$"):
                j += 1
            out.append(("word", text[i:j]))
            i = j
        else:
            raise ConfigError(f"invalid value for {key}: unexpected character {c!r}")
    return out


def parse_jaas_config(text: str, key: str = "sasl.jaas.config") -> list[JaasEntry]:
    """All entries of a JAAS config string; ConfigError (naming `key`) if malformed."""
    toks = _tokens(text or "", key)
    entries: list[JaasEntry] = []
    i = 0
    while i < len(toks):
        kind, module = toks[i]
        if kind != "word":
            raise ConfigError(f"invalid value for {key}: expected a login module class name")
        if i + 1 >= len(toks) or toks[i + 1][0] != "word":
            raise ConfigError(f"invalid value for {key}: Login module control flag not specified")
        flag = toks[i + 1][1].lower()
        if flag not in _FLAGS:
            raise ConfigError(
                f"invalid value for {key}: Invalid login module control flag '{toks[i + 1][1]}'"
            )
        i += 2
        options: dict[str, str] = {}
        while i < len(toks) and toks[i] != ("sym", ";"):
            kind, name = toks[i]
            if kind != "word":
                raise ConfigError(f"invalid value for {key}: expected an option name")
            if (
                i + 2 >= len(toks) + 0
                or toks[i + 1] != ("sym", "=")
                or toks[i + 2][0] not in ("word", "str")
            ):
                raise ConfigError(f"invalid value for {key}: Value not specified for key '{name}'")
            options[name] = toks[i + 2][1]
            i += 3
        if i >= len(toks):
            raise ConfigError(
                f"invalid value for {key}: JAAS config entry not terminated by semi-colon"
            )
        i += 1  # the ';'
        entries.append(JaasEntry(module, flag, options))
    if not entries:
        raise ConfigError(f"invalid value for {key}: Login module not specified in JAAS config")
    return entries


def single_entry(text: str, key: str, expected_module: str) -> JaasEntry:
    """The one login module a broker's per-mechanism JAAS setting must hold."""
    entries = parse_jaas_config(text, key)
    if len(entries) != 1:
        raise ConfigError(
            f"invalid value for {key}: JAAS config property contains {len(entries)} login "
            "modules, should be 1 module"
        )
    entry = entries[0]
    if entry.login_module != expected_module:
        raise ConfigError(
            f"invalid value for {key}: expected login module {expected_module}, "
            f"got {entry.login_module}"
        )
    return entry


def plain_users(entry: JaasEntry) -> dict[str, str]:
    """PlainLoginModule's `user_<name>="<password>"` options -> {name: password}."""
    return {k[len("user_") :]: v for k, v in entry.options.items() if k.startswith("user_")}


__all__ += ["OAUTHBEARER_LOGIN_MODULE", "single_entry"]
