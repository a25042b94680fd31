"""Confluent Schema Registry's error codes and the one exception that carries them.

Clients (confluent-kafka's SchemaRegistryClient, the Java serializers, kcat) branch on
`error_code`, so the numbers are Confluent's exactly: the HTTP status followed by two digits.
"""

from __future__ import annotations

SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403
SUBJECT_SOFT_DELETED = 40404
SUBJECT_NOT_SOFT_DELETED = 40405
SCHEMA_VERSION_SOFT_DELETED = 40406
SCHEMA_VERSION_NOT_SOFT_DELETED = 40407
SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED = 40408
SUBJECT_LEVEL_MODE_NOT_CONFIGURED = 40409
INCOMPATIBLE_SCHEMA = 409
INVALID_SCHEMA = 42201
INVALID_VERSION = 42202
INVALID_COMPATIBILITY_LEVEL = 42203
INVALID_MODE = 42204
OPERATION_NOT_PERMITTED = 42205
REFERENCE_EXISTS = 42206
STORE_ERROR = 50001
OPERATION_TIMEOUT = 50002
REQUEST_FORWARDING_FAILED = 50003
UNKNOWN_LEADER = 50004


class RegistryError(Exception):
    """An answer the registry gives as `{"error_code", "message"}` with an HTTP status."""

    def __init__(self, status: int, error_code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code
        self.message = message

    def body(self) -> dict[str, object]:
        return {"error_code": self.error_code, "message": self.message}


def invalid_schema(message: str) -> RegistryError:
    return RegistryError(422, INVALID_SCHEMA, f"Invalid schema: {message}")


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")


def version_not_found(subject: str, version: object) -> RegistryError:
    return RegistryError(404, VERSION_NOT_FOUND,
                         f"Version {version} not found for subject '{subject}'.")


def schema_not_found(what: object = None) -> RegistryError:
    msg = "Schema not found" if what is None else f"Schema {what} not found"
    return RegistryError(404, SCHEMA_NOT_FOUND, msg)
