"""The layering rules of docs/architecture.md, checked on the source: a layer imports only
layers below it, the broker never imports the gateway, handlers never probe with getattr.

Imports are read with `ast` from every module of `yak/` (including imports inside
functions); imports under `if TYPE_CHECKING:` are annotations only and are not counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

import yak

ROOT = Path(yak.__file__).resolve().parent

# Lower rank = lower layer. A package may import its own modules and lower ranks only;
# the edges (rank 9) reach the cluster over the wire and may use each other.
RANK = {
    "errors": 0, "settings": 0, "clock": 0,
    "protocol": 1,
    # wire/: the one Kafka client connection (framing, pipelining, timeouts) over protocol/
    "wire": 2,
    "storage": 3,
    "tiered": 3.5,  # tiered storage: reads storage's logs, read by partition's fetch path
    "config": 4, "partition": 4,
    # the coordinator runtime (yak/coordinator/): the group and transaction coordinators run on it
    "coordinator": 4.5,
    # The transaction coordinator reuses the group's record helpers
    # (TxnOffsetCommit writes group records); the group coordinator never imports txn.
    "group": 5, "txn": 5.5,
    # share groups (KIP-932): share partitions on the partition layer, membership, sessions
    "share": 5,
    "cluster": 6,
    "security": 7,
    "broker": 8,
    # client/ is the small wire client the Spark connector (and its TLS/SASL) uses: an edge.
    # devcluster/ (the local-cluster harness, the TCP proxy) starts brokers as processes.
    "gateway": 9, "console": 9, "spark": 9, "cli": 9, "bench": 9, "registry": 9, "chaos": 9,
    "client": 9, "devcluster": 9,
}
EDGE = 9


def _package(path: Path) -> str:
    rel = path.relative_to(ROOT)
    return rel.parts[0].removesuffix(".py") if rel.parts else ""


def _imports(path: Path) -> list[tuple[int, str]]:
    return imports_of(path.read_text())


def imports_of(source: str) -> list[tuple[int, str]]:
    """(line, module) of every `yak.` import in `source`, `if TYPE_CHECKING:` ones left out
    (also used by scripts/house.py, so the drawing and this test read imports alike)."""
    tree = ast.parse(source)
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    out = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
    return [(line, name) for line, name in out if name.startswith("yak.")]


def test_a_layer_imports_only_layers_below_it() -> None:
    violations = []
    for path in sorted(ROOT.rglob("*.py")):
        pkg = _package(path)
        if pkg in ("__init__", "__main__"):
            continue
        assert pkg in RANK, f"{pkg} has no place in the layering: add it to RANK and the docs"
        for line, name in _imports(path):
            target = name.split(".")[1]
            if target == pkg:
                continue
            assert target in RANK, f"{path}:{line} imports unknown package {name}"
            if RANK[target] >= RANK[pkg] and not (RANK[pkg] == EDGE and RANK[target] == EDGE):
                violations.append(f"{path.relative_to(ROOT.parent)}:{line} {pkg} -> {name}")
    assert violations == []


def test_broker_never_imports_the_gateway() -> None:
    """Not even for type checking or lazily inside a function."""
    offenders = []
    for path in sorted((ROOT / "broker").rglob("*.py")):
        text = path.read_text()
        if "yak.gateway" in text or "from yak import gateway" in text:
            offenders.append(str(path))
    assert offenders == []


_REQUEST_OBJECTS = {"request", "p", "t", "part", "topic", "m", "mod", "resource", "r", "c"}


def test_handlers_do_not_probe_with_getattr() -> None:
    """`getattr(request, field, default)` on kio request objects (version-dependent fields)
    and on kio schema modules is fine; probing the broker, storage or metadata is not."""
    offenders = []
    for path in sorted((ROOT / "broker" / "handlers").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr":
                target = ast.unparse(node.args[0])
                if target not in _REQUEST_OBJECTS:
                    offenders.append(f"{path.name}:{node.lineno} getattr({target}, ...)")
    assert offenders == []


def test_handlers_never_touch_a_partition_log_or_the_metadata_store() -> None:
    offenders = []
    for path in sorted((ROOT / "broker" / "handlers").glob("*.py")):
        text = path.read_text()
        for needle in ("PartitionLog", "partition_log", ".metadata.", "MetadataStore",
                       "yak.storage", ".log.", "update_high_watermark"):
            if needle in text:
                offenders.append(f"{path.name}: {needle}")
    assert offenders == []
