"""The committed gRPC code is what the pinned grpcio-tools generates from the .proto.

CI runs this: a .proto edited without regenerating (scripts/gen_grpc.py), or a
grpcio-tools/protobuf bump without regenerating, fails here instead of at import.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from google.protobuf import __version__ as protobuf_version

REPO = Path(__file__).resolve().parents[2]
GENERATED = REPO / "yak" / "gateway" / "grpc_api"


def _generator():  # scripts/ is not a package
    spec = importlib.util.spec_from_file_location("gen_grpc", REPO / "scripts" / "gen_grpc.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_generated_code_matches_the_proto(tmp_path: Path) -> None:
    for fresh in _generator().generate(tmp_path):
        committed = GENERATED / fresh.name
        assert committed.read_bytes() == fresh.read_bytes(), (
            f"{committed.relative_to(REPO)} is stale: run .venv/bin/python scripts/gen_grpc.py"
        )


def test_the_protobuf_runtime_accepts_the_generated_code() -> None:
    text = (GENERATED / "gateway_pb2.py").read_text()
    gen = next(line for line in text.splitlines() if line.startswith("# Protobuf Python Version"))
    gen_version = tuple(int(x) for x in gen.rsplit(":", 1)[1].strip().split("."))
    runtime = tuple(int(x) for x in protobuf_version.split(".")[:3])
    assert runtime >= gen_version, (gen_version, runtime)
    from yak.gateway.grpc_api import gateway_pb2, gateway_pb2_grpc  # noqa: F401  (imports check)
