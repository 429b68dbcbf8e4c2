"""SCRAM credentials: AlterUserScramCredentials (KIP-554), Kafka's ScramControlManager.

Each upsertion carries the salt, the iteration count and SaltedPassword (the client does the
PBKDF2); the controller derives StoredKey and ServerKey and writes a UserScramCredentialRecord.
Each deletion writes a RemoveUserScramCredentialRecord. The answer has one result per user,
and a user's result carries the first error among its alterations, in Kafka's order of checks:

* a user named more than once in the request (deletions and upsertions together):
  DUPLICATE_RESOURCE, and none of its alterations is made;
* an empty user name: UNACCEPTABLE_CREDENTIAL;
* a mechanism other than 1 (SCRAM-SHA-256) or 2 (SCRAM-SHA-512): UNSUPPORTED_SASL_MECHANISM;
* an upsertion with fewer than 4096 or more than 16384 iterations, or an empty salt or salted
  password: UNACCEPTABLE_CREDENTIAL;
* a deletion of a credential that does not exist: RESOURCE_NOT_FOUND.

A user whose alterations all pass has every one of them written, in request order.
"""
from __future__ import annotations

from collections import Counter

from core.protocol import messages as m
from core.protocol.codegen import Message
from core.protocol.errors import ErrorCode
from core.security.scram import MAX_ITERATIONS, MIN_ITERATIONS, keys_from_salted_password

from .common import Working
from .image import SCRAM_MECHANISM_TYPES

R = m.AlterUserScramCredentialsResponse


def _check(w: Working, name: str, mechanism: int,
           upsertion: m.AlterUserScramCredentialsRequest.ScramCredentialUpsertion | None = None,
           ) -> tuple[ErrorCode, str | None]:
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism not in SCRAM_MECHANISM_TYPES:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"Unknown SCRAM mechanism {mechanism}"
    if upsertion is not None:
        if upsertion.iterations < MIN_ITERATIONS:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, f"Too few iterations: at least {MIN_ITERATIONS}"
        if upsertion.iterations > MAX_ITERATIONS:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, f"Too many iterations: at most {MAX_ITERATIONS}"
        if not upsertion.salt:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt must not be empty"
        if not upsertion.salted_password:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, "SaltedPassword must not be empty"
    elif (name, mechanism) not in w.image.scram:
        return ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
    return ErrorCode.NONE, None


def alter_user_scram_credentials(w: Working, request: m.AlterUserScramCredentialsRequest) -> R:
    times = Counter([d.name for d in request.deletions] + [u.name for u in request.upsertions])
    users = list(dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions]))
    errors: dict[str, tuple[ErrorCode, str | None]] = {}
    for user in users:
        if times[user] > 1:
            errors[user] = (ErrorCode.DUPLICATE_RESOURCE,
                            "A user credential cannot be altered twice in the same request")
    for d in request.deletions:
        if d.name not in errors:
            error = _check(w, d.name, d.mechanism)
            if error[0]:
                errors[d.name] = error
    for u in request.upsertions:
        if u.name not in errors:
            error = _check(w, u.name, u.mechanism, u)
            if error[0]:
                errors[u.name] = error
    records: list[Message] = []
    for d in request.deletions:
        if d.name not in errors:
            records.append(m.RemoveUserScramCredentialRecord(name=d.name, mechanism=d.mechanism))
    for u in request.upsertions:
        if u.name not in errors:
            stored, server = keys_from_salted_password(SCRAM_MECHANISM_TYPES[u.mechanism], bytes(u.salted_password))
            records.append(m.UserScramCredentialRecord(name=u.name, mechanism=u.mechanism, salt=bytes(u.salt),
                                                       stored_key=stored, server_key=server,
                                                       iterations=u.iterations))
    w.add(records)
    return R(throttle_time_ms=0, results=[
        R.AlterUserScramCredentialsResult(user=user, error_code=errors.get(user, (ErrorCode.NONE, None))[0],
                                          error_message=errors.get(user, (ErrorCode.NONE, None))[1])
        for user in users])


def error_response(request: m.AlterUserScramCredentialsRequest, code: ErrorCode, message: str | None) -> R:
    """Every user of the request answered with one error (NOT_CONTROLLER and the like)."""
    users = dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions])
    return R(throttle_time_ms=0, results=[R.AlterUserScramCredentialsResult(user=user, error_code=code,
                                                                            error_message=message)
                                          for user in users])
