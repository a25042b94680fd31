"""The principal of a TLS client certificate: Kafka's DefaultKafkaPrincipalBuilder for SSL.

The subject DN in RFC 2253 form (as Java's `X500Principal.getName()` writes it: most
specific RDN first, `CN`, `OU`, `O`, `L`, `ST`, `C`, `STREET`, `DC`, `UID` by keyword, other
attribute types as dotted OID `=#<hex DER>`), passed through `ssl.principal.mapping.rules`
(`SslPrincipalMapper`), as `User:<name>`. No client certificate: `User:ANONYMOUS`.

Apart from `yak.security.tls` (key material, which needs `cryptography`) so that a broker
without a TLS listener imports neither: the mapping rules are parsed for every listener
config, and `cryptography` is loaded only to read a peer certificate, which exists only on a
TLS listener.
"""

from __future__ import annotations

import re

from yak.security.principal import ANONYMOUS, USER_TYPE, KafkaPrincipal
from yak.settings import ConfigError

__all__ = ["NoMatchingRule", "SslPrincipalMapper", "rfc2253_name", "ssl_principal"]

_KEYWORDS = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.9": "STREET",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
_STRING_TAGS = {
    0x0C: "utf-8",
    0x13: "ascii",
    0x16: "ascii",
    0x14: "latin-1",
    0x1E: "utf-16-be",
    0x1C: "utf-32-be",
}


def _tlv(buf: bytes, pos: int) -> tuple[int, int, int, int]:
    """(tag, start of value, end of value, end of TLV) of the DER element at `pos`."""
    if pos + 2 > len(buf):
        raise ValueError("truncated DER")
    tag = buf[pos]
    length = buf[pos + 1]
    p = pos + 2
    if length & 0x80:
        n = length & 0x7F
        if n == 0 or n > 4 or p + n > len(buf):
            raise ValueError("bad DER length")
        length = int.from_bytes(buf[p : p + n], "big")
        p += n
    end = p + length
    if end > len(buf):
        raise ValueError("truncated DER")
    return tag, p, end, end


def _oid(der: bytes) -> str:
    nums: list[int] = []
    v = 0
    for b in der:
        v = (v << 7) | (b & 0x7F)
        if not b & 0x80:
            nums.append(v)
            v = 0
    first = nums[0]
    head = [min(first // 40, 2), first - 40 * min(first // 40, 2)]
    return ".".join(str(n) for n in head + nums[1:])


def _escape(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (i == 0 and ch in "# ") or (i == len(value) - 1 and ch == " "):
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\{ord(ch):02X}")
        else:
            out.append(ch)
    return "".join(out)


def rfc2253_name(name_der: bytes) -> str:
    """An X.501 Name (DER) as Java's `X500Principal.getName()` (RFC 2253) writes it."""
    tag, p, end, _ = _tlv(name_der, 0)
    if tag != 0x30:
        raise ValueError("not a Name")
    rdns: list[str] = []
    while p < end:
        stag, sp, send, p = _tlv(name_der, p)
        if stag != 0x31:
            raise ValueError("bad RDN")
        avas: list[str] = []
        while sp < send:
            _, ap, aend, sp = _tlv(name_der, sp)
            otag, op, oend, vpos = _tlv(name_der, ap)
            if otag != 0x06:
                raise ValueError("bad attribute type")
            oid = _oid(name_der[op:oend])
            vtag, vp, vend, vnext = _tlv(name_der, vpos)
            keyword = _KEYWORDS.get(oid)
            enc = _STRING_TAGS.get(vtag)
            if keyword is not None and enc is not None:
                avas.append(f"{keyword}={_escape(name_der[vp:vend].decode(enc))}")
            else:
                avas.append(f"{keyword or oid}=#{name_der[vpos:vnext].hex()}")
        rdns.append("+".join(avas))
    return ",".join(reversed(rdns))


class NoMatchingRule(ValueError):
    pass


class SslPrincipalMapper:
    """`ssl.principal.mapping.rules`: comma-separated `RULE:pattern/replacement/[LU]` and
    `DEFAULT`, tried in order; the first whose (Java) regex matches the whole DN gives the
    name (`$n` back-references, /L lower-case, /U upper-case). No rule matches: login fails."""

    _RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
    _SPLIT = re.compile(r"\s*(" + _RULE + r")\s*(?:,\s*|$)")
    _PARSE = re.compile(_RULE)

    def __init__(self, rules: list[tuple[re.Pattern[str], str, str] | None]) -> None:
        self.rules = rules  # None = DEFAULT

    @classmethod
    def from_rules(cls, text: str | None) -> SslPrincipalMapper:
        text = "DEFAULT" if text is None else text
        rules: list[tuple[re.Pattern[str], str, str] | None] = []
        for m in cls._SPLIT.finditer(text.strip()):
            rule = m.group(1)
            if not rule:
                continue  # empty rules are ignored (Kafka)
            pm = cls._PARSE.match(rule)
            if pm is None or pm.end() != len(rule):
                raise ConfigError(
                    f"invalid value for ssl.principal.mapping.rules: Invalid rule: {rule}"
                )
            if pm.group(1):
                rules.append(None)
            elif pm.group(2) is not None:
                try:
                    pattern = re.compile(pm.group(2))
                except re.error as e:
                    raise ConfigError(
                        f"invalid value for ssl.principal.mapping.rules: bad pattern in {rule}: {e}"
                    ) from None
                rules.append((pattern, pm.group(3), pm.group(4)))
            elif pm.group(5):
                raise ConfigError(
                    f"invalid value for ssl.principal.mapping.rules: Invalid rule: {rule}"
                )
        return cls(rules)

    def name(self, dn: str) -> str:
        for rule in self.rules:
            if rule is None:
                return dn
            pattern, replacement, case = rule
            if pattern.fullmatch(dn) is None:
                continue
            result = pattern.sub(_java_replacement(replacement, pattern.groups), dn)
            if case == "L":
                result = result.lower()
            elif case == "U":
                result = result.upper()
            return result
        raise NoMatchingRule(f"No rules apply to {dn}")


def _java_replacement(template: str, groups: int):  # noqa: ANN202
    """Java's `Matcher.replaceAll` template: `$n` (the longest group number that exists),
    `\\x` a literal x; a `$n` beyond the groups is literal text (Kafka's escaping)."""

    def repl(m: re.Match[str]) -> str:
        out: list[str] = []
        i = 0
        while i < len(template):
            c = template[i]
            if c == "\\" and i + 1 < len(template):
                out.append(template[i + 1])
                i += 2
            elif c == "$" and i + 1 < len(template) and template[i + 1].isdigit():
                j = i + 1
                ref = int(template[j])
                if ref > groups:
                    out.append("$")
                    i += 1
                    continue
                j += 1
                while (
                    j < len(template)
                    and template[j].isdigit()
                    and ref * 10 + int(template[j]) <= groups
                ):
                    ref = ref * 10 + int(template[j])
                    j += 1
                out.append(m.group(ref) or "")
                i = j
            else:
                out.append(c)
                i += 1
        return "".join(out)

    return repl


def ssl_principal(cert_der: bytes | None, mapper: SslPrincipalMapper) -> KafkaPrincipal:
    """The principal of a TLS connection from the peer certificate (DER, as
    `SSLObject.getpeercert(binary_form=True)` gives it); None -> User:ANONYMOUS."""
    if not cert_der:
        return ANONYMOUS
    from cryptography import x509  # a peer certificate: a TLS listener, which loaded it

    cert = x509.load_der_x509_certificate(cert_der)
    return KafkaPrincipal(USER_TYPE, mapper.name(rfc2253_name(cert.subject.public_bytes())))
