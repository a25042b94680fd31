"""Print the house at a git revision: package sizes, the largest modules, the import arrows
between packages and any arrow that runs back up the layers.

    python scripts/house.py 2ccc1c9        # the house before issue 22
    python scripts/house.py HEAD           # the house now

Read from git (`git ls-tree`/`git show`), so a revision is measured without checking it out;
imports are read by the layering test's own `imports_of`.
The layer ranks are tests/broker/test_layering.py's, read at HEAD; a package that the ranks
do not know is shown as `?` (an old revision may have packages since renamed). Imports are
read with `ast`, as the layering test reads them: `if TYPE_CHECKING:` imports are left out.
"""

from __future__ import annotations

import ast
import collections
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIG = 600  # the architecture's bound on a module without a stated reason


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], check=True,
                          capture_output=True, text=True).stdout


def _ranks() -> dict[str, float]:
    tree = ast.parse((REPO / "tests/broker/test_layering.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "RANK":
            return ast.literal_eval(node.value)
    raise SystemExit("tests/broker/test_layering.py has no RANK table")


def _imports(source: str) -> list[str]:
    sys.path.insert(0, str(REPO))
    from tests.broker.test_layering import imports_of
    return [name for _, name in imports_of(source)]


def main(rev: str) -> None:
    ranks = _ranks()
    paths = [p for p in _git("ls-tree", "-r", "--name-only", rev, "yak").split()
             if p.endswith(".py")]
    lines: collections.Counter[str] = collections.Counter()
    files: collections.Counter[str] = collections.Counter()
    arrows: collections.Counter[tuple[str, str]] = collections.Counter()
    big: list[tuple[int, str]] = []
    for path in paths:
        source = _git("show", f"{rev}:{path}")
        parts = Path(path).parts
        pkg = parts[1].removesuffix(".py")
        n = source.count("\n")
        lines[pkg] += n
        files[pkg] += 1
        if n > BIG:
            big.append((n, path))
        for name in _imports(source):
            target = name.split(".")[1]
            if target != pkg:
                arrows[(pkg, target)] += 1
    commit = _git("rev-parse", "--short", rev).strip()
    print(f"# the house at {commit} ({sum(lines.values())} lines of yak/ in {len(paths)} files)")
    print("\n## packages (rank, files, lines)")
    for pkg in sorted(lines, key=lambda p: (ranks.get(p, 99), p)):
        if pkg in ("__init__", "__main__"):
            continue
        print(f"{ranks.get(pkg, '?')!s:>5} {pkg:<12} {files[pkg]:>4} {lines[pkg]:>7}")
    print(f"\n## modules over {BIG} lines")
    for n, path in sorted(big, reverse=True):
        print(f"{n:>7} {path}")
    up = [(a, b, k) for (a, b), k in sorted(arrows.items())
          if a in ranks and b in ranks and ranks[b] >= ranks[a]
          and not (ranks[a] == ranks[b] == 9)]
    print(f"\n## import arrows between packages: {len(arrows)}; running back up: {len(up)}")
    for a, b, k in up:
        print(f"  UP {a} -> {b} ({k} imports)")
    for (a, b), k in sorted(arrows.items(), key=lambda x: (ranks.get(x[0][0], 99), x[0])):
        print(f"  {a} -> {b} ({k})")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "HEAD")
