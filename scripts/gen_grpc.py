"""Regenerate the gRPC gateway's Python code from its .proto (committed; CI diffs it).

    .venv/bin/python scripts/gen_grpc.py            # rewrite yak/gateway/grpc_api/*_pb2*
    .venv/bin/python scripts/gen_grpc.py --out DIR  # write the generated files under DIR

grpcio-tools (pinned in pyproject's dev extra) carries protoc; the generated code checks
at import that the protobuf runtime is at least the version it was generated for, so
grpcio-tools and protobuf are bumped together, then this is rerun and the result committed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROTO = "yak/gateway/grpc_api/gateway.proto"
GENERATED = ("gateway_pb2.py", "gateway_pb2.pyi", "gateway_pb2_grpc.py")


def generate(out: Path) -> list[Path]:
    from grpc_tools import protoc

    out.mkdir(parents=True, exist_ok=True)
    args = ["protoc", f"-I{REPO}", f"--python_out={out}", f"--pyi_out={out}",
            f"--grpc_python_out={out}", str(REPO / PROTO)]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed on {PROTO}")
    where = out / Path(PROTO).parent
    return [where / name for name in GENERATED]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO, help="root to write the files under")
    files = generate(ap.parse_args().out)
    print("\n".join(str(f) for f in files), file=sys.stderr)


if __name__ == "__main__":
    main()
