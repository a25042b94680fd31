"""The await audit of issue 21: every await on a pipelined request's path, between reading
the request and changing shared state, is listed in docs/architecture.md ("The order of
effects") with the reason nothing can overtake it. An await added to one of these
functions, or one removed, fails this test until the table says why."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"

# The table's "where" -> (file, class or None, function)
AUDITED = {
    "connection.KafkaConnection._serve": ("yak/broker/connection.py", "KafkaConnection", "_serve"),
    "connection.KafkaConnection._pipelined": ("yak/broker/connection.py", "KafkaConnection",
                                              "_pipelined"),
    "connection.KafkaConnection._handle_frame": ("yak/broker/connection.py", "KafkaConnection",
                                                 "_handle_frame"),
    "handlers.produce.handle": ("yak/broker/handlers/produce.py", None, "handle"),
    "handlers.fetch.handle": ("yak/broker/handlers/fetch.py", None, "handle"),
    # The ReplicaManager's paths are parts it extends (yak/partition/replica_manager.py).
    "ReplicaManager.handle_produce_append": ("yak/partition/produce.py", "AppendPath",
                                             "handle_produce_append"),
    "TxnVerification.verify": ("yak/partition/verification.py", "TxnVerification", "verify"),
    "ReplicaManager.fetch_messages": ("yak/partition/fetch.py", "FetchPath", "fetch_messages"),
}


def _function(path: str, cls: str | None, name: str) -> ast.AsyncFunctionDef:
    tree = ast.parse((ROOT / path).read_text())
    scope: list[ast.stmt] = tree.body
    if cls is not None:
        (c,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
        scope = c.body
    (f,) = [n for n in scope if isinstance(n, ast.AsyncFunctionDef) and n.name == name]
    return f


def _awaited(f: ast.AsyncFunctionDef) -> set[str]:
    """The callables awaited in `f` (by their source text, without arguments), and the
    context managers / iterators of `async with` / `async for`."""
    out: set[str] = set()
    for node in ast.walk(f):
        if isinstance(node, ast.Await):
            target = node.value.func if isinstance(node.value, ast.Call) else node.value
            out.add(ast.unparse(target))
        elif isinstance(node, ast.AsyncWith):
            out.update(ast.unparse(i.context_expr) for i in node.items)
        elif isinstance(node, ast.AsyncFor):
            out.add(ast.unparse(node.iter))
    return out


def _documented() -> dict[str, set[str]]:
    text = DOC.read_text()
    start = text.index("| where | await | why nothing overtakes |")
    rows: dict[str, set[str]] = {}
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        m = re.match(r"\| `([^`]+)` \| `([^`]+)` \| (.+) \|$", line)
        assert m, f"malformed audit row: {line!r}"
        assert m.group(3).strip(), f"an await without its reason: {line!r}"
        rows.setdefault(m.group(1), set()).add(m.group(2))
    return rows


def test_every_await_on_a_pipelined_path_is_documented_with_its_reason() -> None:
    documented = _documented()
    assert set(documented) == set(AUDITED)
    for where, (path, cls, name) in AUDITED.items():
        assert _awaited(_function(path, cls, name)) == documented[where], where


def test_the_audit_notices_a_new_await() -> None:
    """The check itself can fail: an extra await in a function is seen."""
    src = "async def f(turn):\n    await turn.wait()\n    await something.else_()\n"
    f = ast.parse(src).body[0]
    assert isinstance(f, ast.AsyncFunctionDef)
    assert _awaited(f) == {"turn.wait", "something.else_"}
