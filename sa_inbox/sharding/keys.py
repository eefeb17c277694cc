"""Shard keys: which shard a key belongs to, and the digest a claim stores of its key.

**Assignment** (:func:`rendezvous_shard`): highest-random-weight ("rendezvous") hashing
(Thaler and Ravishankar, "Using Name-Based Mappings to Increase Hit Rates", IEEE/ACM
Transactions on Networking 6(1), 1998). Each shard's weight for a key is the SHA-256 digest
of ``shard name, NUL, shard key`` (both UTF-8); the shard with the greatest digest (compared
as bytes, i.e. as a 256-bit big-endian number) wins. It is:

* stable across processes, machines and Python versions: SHA-256, never Python's
  :func:`hash`, which is randomised per process for ``str`` (``PYTHONHASHSEED``);
* independent of the order of the shard map;
* minimal on resharding: adding a shard moves only the keys the new shard wins (about
  ``1/(N+1)`` of them), removing one moves only that shard's keys.

Resharding moves keys all the same, and a message whose key moves between two deliveries
is a message whose second delivery reaches a shard without its claim: drain the consumers
(every delivered message acked) and keep the old map for the dedup window of any message
still in flight, or move the claims with the data.

**The claim's digest** (:func:`claim_digest`): the 32-byte SHA-256 digest of
``"sa-inbox/shard-key", NUL, shard key``, followed by the message's payload digest when one
is given (at most 32 bytes, e.g. :func:`sa_inbox.collision.payload_hash`), stored in the
inbox table's ``payload_hash`` column (64 bytes) with the claim, in the same single
INSERT. A redelivery compares it on the duplicate path only
(:meth:`sa_inbox.sharding.ShardInbox.claim`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from ..exc import InvalidMessageId, InvalidShardKey
from ..validation import validate_key

__all__ = [
    "KEY_DIGEST_BYTES",
    "MAX_PAYLOAD_DIGEST_BYTES",
    "claim_digest",
    "rendezvous_shard",
    "shard_key_digest",
    "split_digest",
    "validate_shard_key",
]

#: Length of the shard key's digest at the start of the stored ``payload_hash``.
KEY_DIGEST_BYTES = 32
#: The payload digest that fits after it in the 64-byte ``payload_hash`` column.
MAX_PAYLOAD_DIGEST_BYTES = 32
_KEY_DOMAIN = b"sa-inbox/shard-key\x00"
MAX_SHARD_KEY_LENGTH = 255


def validate_shard_key(value: object) -> str:
    """``value`` if it is a valid shard key: the rules of a message id
    (:func:`sa_inbox.validation.validate_key`), at most 255 characters. Ints are not
    coerced (pass ``str(tenant_id)``), so ``42`` and ``"42"`` cannot be routed apart by
    accident.

    :raises InvalidShardKey: otherwise.
    """
    try:
        return validate_key(value, "shard_key", MAX_SHARD_KEY_LENGTH)
    except InvalidMessageId as exc:
        raise InvalidShardKey(str(exc)) from None


def rendezvous_shard(shard_key: str, names: Sequence[str]) -> str:
    """The shard of ``names`` that ``shard_key`` belongs to (see the module's rule).

    :param shard_key: a valid shard key (see :func:`validate_shard_key`).
    :param names: the shard names, at least one, in any order.
    :returns: one of ``names``.
    """
    key = shard_key.encode("utf-8")

    def weight(name: str) -> bytes:
        return hashlib.sha256(name.encode("utf-8") + b"\x00" + key).digest()

    return max(names, key=weight)


def shard_key_digest(shard_key: str) -> bytes:
    """The 32-byte digest of a shard key stored with its claims (see the module's rule)."""
    return hashlib.sha256(_KEY_DOMAIN + shard_key.encode("utf-8")).digest()


def claim_digest(shard_key: str, payload_hash: bytes | None) -> bytes:
    """The ``payload_hash`` value a sharded claim stores: :func:`shard_key_digest`, then
    ``payload_hash`` if given.

    :raises InvalidMessageId: if ``payload_hash`` is not bytes or is longer than 32 bytes
        (it would not fit in the 64-byte column after the key's digest).
    """
    if payload_hash is None:
        return shard_key_digest(shard_key)
    if not isinstance(payload_hash, bytes):
        raise InvalidMessageId(f"payload_hash must be bytes, not {type(payload_hash).__name__}")
    if len(payload_hash) > MAX_PAYLOAD_DIGEST_BYTES:
        raise InvalidMessageId(
            f"payload_hash is {len(payload_hash)} bytes; a sharded claim stores at most "
            f"{MAX_PAYLOAD_DIGEST_BYTES} after the shard key's digest (use "
            "sa_inbox.collision.payload_hash, 32 bytes)"
        )
    return shard_key_digest(shard_key) + payload_hash


def split_digest(stored: bytes | None) -> tuple[bytes | None, bytes | None]:
    """``(shard key digest, payload digest)`` of a stored ``payload_hash``; ``(None, None)``
    for a value no sharded claim wrote (NULL or shorter than the key's digest: a claim made
    by a plain :class:`~sa_inbox.Inbox`), whose key is then unknown."""
    if stored is None or len(stored) < KEY_DIGEST_BYTES:
        return None, None
    payload = stored[KEY_DIGEST_BYTES:]
    return stored[:KEY_DIGEST_BYTES], payload or None
