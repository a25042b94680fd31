"""Share sessions (KIP-932, Kafka's ShareSessionCache): one per (group, member) on the
partition leader, holding the partitions the member fetches, so a ShareFetch can name
only what changed.

Epoch rules (Kafka's ShareRequestMetadata):
- 0 opens a session (a ShareFetch; replaces this member's old one, whose acquired
  records are released); the next request must carry 1;
- -1 is the final request: it may acknowledge, must not fetch, and closes the session;
- any other epoch must be the session's next one (INVALID_SHARE_SESSION_EPOCH), with a
  session present (SHARE_SESSION_NOT_FOUND); epochs wrap from 2^31-1 to 1.
At most `max_sessions` sessions (SHARE_SESSION_LIMIT_REACHED), as Kafka's
`group.share.max.share.sessions`. In memory only.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from yak.errors import ErrorCode

__all__ = ["FINAL_EPOCH", "INITIAL_EPOCH", "ShareSession", "ShareSessionCache"]

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_EPOCH = 2**31 - 1

TopicPartition = tuple[uuid.UUID, int]


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    epoch: int = 1  # the epoch the next request must carry
    partitions: dict[TopicPartition, None] = field(default_factory=dict)  # ordered set


class ShareSessionError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class ShareSessionCache:
    def __init__(self, max_sessions: int = 2000) -> None:
        self.max_sessions = max_sessions
        self.sessions: dict[tuple[str, str], ShareSession] = {}

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.get((group_id, member_id))

    def open(self, group_id: str, member_id: str) -> tuple[ShareSession, ShareSession | None]:
        """Epoch 0: a new session; returns it and the one it replaced (if any)."""
        key = (group_id, member_id)
        old = self.sessions.pop(key, None)
        if len(self.sessions) >= self.max_sessions:
            if old is not None:
                self.sessions[key] = old
            raise ShareSessionError(ErrorCode.share_session_limit_reached,
                                    "too many share sessions on this broker")
        s = self.sessions[key] = ShareSession(group_id, member_id)
        return s, old

    def advance(self, group_id: str, member_id: str, epoch: int) -> ShareSession | None:
        """A request with epoch > 0 (or -1): the session it continues. A positive epoch
        must be the expected one and moves the session on; -1 is accepted as is, and
        without a session (None: the member's acknowledgements still count, each checked
        against the records it holds)."""
        s = self.sessions.get((group_id, member_id))
        if s is None and epoch == FINAL_EPOCH:
            return None
        if s is None:
            raise ShareSessionError(ErrorCode.share_session_not_found,
                                    "no share session for this member")
        if epoch == FINAL_EPOCH:
            return s
        if epoch != s.epoch:
            raise ShareSessionError(ErrorCode.invalid_share_session_epoch,
                                    f"expected share session epoch {s.epoch}, got {epoch}")
        s.epoch = 1 if s.epoch == _MAX_EPOCH else s.epoch + 1
        return s

    def close(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.pop((group_id, member_id), None)

    def close_member(self, group_id: str, member_id: str) -> None:
        self.sessions.pop((group_id, member_id), None)
