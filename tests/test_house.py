"""The house (issue 22): arrows that must not run back up, checked on the source.

- `yak.devcluster` (the local-cluster harness, the TCP proxy) is an edge over the cluster:
  neither `yak/cluster/` nor any other layer below the edges imports it.
- `yak.registry` imports nothing of `yak.gateway`: the gateway composes the two and owns
  the registry's record formats (`yak/gateway/core/registry_formats.py`).

Every import counts here, also lazy ones inside functions and those under
`if TYPE_CHECKING:`; `tests/broker/test_layering.py` checks the general rule.
"""

from __future__ import annotations

import ast
from pathlib import Path

import yak

ROOT = Path(yak.__file__).resolve().parent

# The edges (rank 9 in tests/broker/test_layering.py) may use the harness.
EDGES = {"gateway", "console", "spark", "cli", "bench", "registry", "chaos", "client",
         "devcluster"}


def _imported_modules(path: Path, root: Path) -> list[tuple[int, str]]:
    """Every `yak...` module `path` imports, with its line (relative imports resolved)."""
    pkg_parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if pkg_parts[-1] == "__init__":
        pkg_parts.pop()
    else:
        pkg_parts.pop()  # the module's own package
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg_parts[:len(pkg_parts) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out.append((node.lineno, module))
            # `from yak import gateway` names the package in the alias
            out += [(node.lineno, f"{module}.{a.name}") for a in node.names]
    return [(line, m) for line, m in out if m == "yak" or m.startswith("yak.")]


def _offenders(packages: set[str] | None, forbidden: str, root: Path = ROOT) -> list[str]:
    """Modules under `packages` (None: every package not in EDGES) importing `forbidden`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        top = path.relative_to(root).parts[0].removesuffix(".py")
        if packages is None and top in EDGES or packages is not None and top not in packages:
            continue
        lines = sorted({line for line, module in _imported_modules(path, root)
                        if module == forbidden or module.startswith(forbidden + ".")})
        found += [f"{path.relative_to(root.parent)}:{line} imports {forbidden}" for line in lines]
    return found


def test_the_cluster_never_imports_the_dev_cluster_harness() -> None:
    assert _offenders({"cluster"}, "yak.devcluster") == []


def test_no_layer_below_the_edges_imports_the_dev_cluster_harness() -> None:
    assert _offenders(None, "yak.devcluster") == []


def test_the_harness_and_proxy_left_the_cluster_package() -> None:
    assert not (ROOT / "cluster" / "local.py").exists()
    assert not (ROOT / "cluster" / "netproxy.py").exists()
    assert (ROOT / "devcluster" / "local.py").exists()
    assert (ROOT / "devcluster" / "netproxy.py").exists()


def test_the_registry_never_imports_the_gateway() -> None:
    assert _offenders({"registry"}, "yak.gateway") == []


def test_the_checks_see_a_forbidden_import(tmp_path: Path) -> None:
    """The scanner itself: absolute, relative, lazy and TYPE_CHECKING imports all count."""
    root = tmp_path / "yak"
    (root / "registry").mkdir(parents=True)
    (root / "cluster").mkdir()
    (root / "registry" / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from yak.gateway.core import GatewayCore\n")
    (root / "registry" / "b.py").write_text("def f():\n    from yak import gateway\n")
    (root / "cluster" / "c.py").write_text("from ..devcluster.local import free_ports\n")
    assert len(_offenders({"registry"}, "yak.gateway", root)) == 2
    assert len(_offenders({"cluster"}, "yak.devcluster", root)) == 1
    assert _offenders({"cluster"}, "yak.gateway", root) == []
