"""AlterUserScramCredentials in the controller (a table of Kafka's checks), and SCRAM
credentials in the metadata image: replay, removal, and the snapshot round trip."""
from __future__ import annotations

import hashlib

import pytest

from core.controller.common import Working
from core.controller.image import MetadataImage, MetadataImageError, ScramEntry
from core.controller.scram import alter_user_scram_credentials
from core.node.image_records import image_records
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.scram import make_credential, salted_password

Req = m.AlterUserScramCredentialsRequest
SHA256, SHA512 = 1, 2


def upsert(name, mechanism=SHA256, iterations=4096, salt=b"salt", password=b"pw"):
    mech = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}.get(mechanism, "SCRAM-SHA-256")
    return Req.ScramCredentialUpsertion(name=name, mechanism=mechanism, iterations=iterations, salt=salt,
                                        salted_password=salted_password(mech, password, salt, 4096) if password else b"")


def delete(name, mechanism=SHA256):
    return Req.ScramCredentialDeletion(name=name, mechanism=mechanism)


EXISTING = MetadataImage.empty().apply(m.UserScramCredentialRecord(
    name="old", mechanism=SHA512, salt=b"s", stored_key=b"k", server_key=b"v", iterations=4096))


@pytest.mark.parametrize("deletions,upsertions,expected", [
    ([], [upsert("alice")], {"alice": ErrorCode.NONE}),
    ([], [upsert("alice"), upsert("alice", SHA512)], {"alice": ErrorCode.DUPLICATE_RESOURCE}),
    ([delete("old", SHA512)], [upsert("old")], {"old": ErrorCode.DUPLICATE_RESOURCE}),
    ([], [upsert("")], {"": ErrorCode.UNACCEPTABLE_CREDENTIAL}),
    ([], [upsert("alice", mechanism=3)], {"alice": ErrorCode.UNSUPPORTED_SASL_MECHANISM}),
    ([], [upsert("alice", iterations=4095)], {"alice": ErrorCode.UNACCEPTABLE_CREDENTIAL}),
    ([], [upsert("alice", iterations=16385)], {"alice": ErrorCode.UNACCEPTABLE_CREDENTIAL}),
    ([], [upsert("alice", salt=b"")], {"alice": ErrorCode.UNACCEPTABLE_CREDENTIAL}),
    ([], [upsert("alice", password=b"")], {"alice": ErrorCode.UNACCEPTABLE_CREDENTIAL}),
    ([delete("nobody")], [], {"nobody": ErrorCode.RESOURCE_NOT_FOUND}),
    ([delete("old", SHA256)], [], {"old": ErrorCode.RESOURCE_NOT_FOUND}),     # exists for the other mechanism
    ([delete("old", SHA512)], [upsert("bob"), upsert("", SHA512)],
     {"old": ErrorCode.NONE, "bob": ErrorCode.NONE, "": ErrorCode.UNACCEPTABLE_CREDENTIAL}),
])
def test_alterations_are_checked_per_user_as_kafka_does(deletions, upsertions, expected):
    w = Working(EXISTING)
    response = alter_user_scram_credentials(w, Req(deletions=deletions, upsertions=upsertions))
    assert {r.user: r.error_code for r in response.results} == expected
    ok = {user for user, code in expected.items() if code == ErrorCode.NONE}
    # Only the users whose alterations all passed changed anything.
    assert {r.name for r in w.records} == ok
    for r in response.results:
        assert (r.error_message is None) == (r.error_code == ErrorCode.NONE)


def test_an_upsertion_stores_the_keys_a_client_can_authenticate_with():
    w = Working(MetadataImage.empty())
    alter_user_scram_credentials(w, Req(deletions=[], upsertions=[upsert("alice", SHA512, 8192, b"pepper", b"secret")]))
    [record] = w.records
    expected = make_credential("SCRAM-SHA-512", "secret", salt=b"pepper", iterations=4096)
    assert (record.stored_key, record.server_key) == (expected.stored_key, expected.server_key)
    assert record.iterations == 8192 and record.salt == b"pepper"
    entry = w.image.scram[("alice", SHA512)]
    assert entry == ScramEntry(b"pepper", expected.stored_key, expected.server_key, 8192)
    assert b"secret" not in repr(record).encode() and len(hashlib.sha512().digest()) == len(record.stored_key)


def test_removal_of_a_missing_credential_is_a_corrupt_log():
    with pytest.raises(MetadataImageError, match="has no credential"):
        MetadataImage.empty().apply(m.RemoveUserScramCredentialRecord(name="x", mechanism=SHA256))
    image = EXISTING.apply(m.RemoveUserScramCredentialRecord(name="old", mechanism=SHA512))
    assert image.scram == {} and EXISTING.scram   # the old image is untouched


def test_credentials_survive_a_snapshot():
    image = EXISTING.apply(m.UserScramCredentialRecord(name="new", mechanism=SHA256, salt=b"x",
                                                       stored_key=b"a", server_key=b"b", iterations=5000))
    rebuilt = MetadataImage.empty().apply_all(image_records(image))
    assert dict(rebuilt.scram) == dict(image.scram) and len(rebuilt.scram) == 2
