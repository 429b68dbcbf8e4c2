"""CreateAcls and DeleteAcls in the controller: Kafka's checks of a new ACL (a table), repeats
that write nothing, and deletions by filter."""
from __future__ import annotations

import pytest

from core.controller.acls import create_acls, delete_acls
from core.controller.common import Working
from core.controller.image import MetadataImage
from core.protocol import messages as m
from core.protocol.errors import ErrorCode

C = m.CreateAclsRequest
D = m.DeleteAclsRequest


def creation(rtype=2, name="t", pattern=3, principal="User:alice", host="*", op=3, permission=3):
    return C.AclCreation(resource_type=rtype, resource_name=name, resource_pattern_type=pattern,
                         principal=principal, host=host, operation=op, permission_type=permission)


@pytest.mark.parametrize("kwargs,message", [
    ({}, None),
    ({"rtype": 1}, "Invalid resourceType"),          # ANY
    ({"rtype": 0}, "Invalid resourceType"),          # UNKNOWN
    ({"pattern": 2}, "Invalid patternType"),         # MATCH is for filters
    ({"pattern": 1}, "Invalid patternType"),         # ANY too
    ({"op": 1}, "Invalid operation"),
    ({"permission": 1}, "Invalid permissionType"),
    ({"name": ""}, "Resource name should not be empty"),
    ({"rtype": 4, "name": "other"}, "only valid name for the CLUSTER resource is kafka-cluster"),
    ({"rtype": 4, "name": "kafka-cluster", "op": 9}, None),
    ({"principal": "alice"}, "Could not parse principal"),
    ({"principal": "User:"}, "Could not parse principal"),
    ({"host": ""}, "Invalid host"),
    ({"pattern": 4, "name": "orders-"}, None),
])
def test_a_new_acl_is_checked_as_kafka_does(kwargs, message):
    w = Working(MetadataImage.empty())
    [result] = create_acls(w, C(creations=[creation(**kwargs)])).results
    if message is None:
        assert result.error_code == 0 and len(w.records) == 1
    else:
        assert result.error_code == ErrorCode.INVALID_REQUEST and message in result.error_message
        assert w.records == []


def test_a_repeated_acl_succeeds_without_a_record():
    w = Working(MetadataImage.empty())
    response = create_acls(w, C(creations=[creation(), creation(), creation(op=4)]))
    assert [r.error_code for r in response.results] == [0, 0, 0]
    assert len(w.records) == 2 and len(w.image.acls) == 2
    again = Working(w.image)
    create_acls(again, C(creations=[creation()]))
    assert again.records == []


def delete_filter(rtype=1, name=None, pattern=1, principal=None, host=None, op=1, permission=1):
    return D.DeleteAclsFilter(resource_type_filter=rtype, resource_name_filter=name, pattern_type_filter=pattern,
                              principal_filter=principal, host_filter=host, operation=op, permission_type=permission)


def test_filters_delete_what_they_match_once():
    w = Working(MetadataImage.empty())
    create_acls(w, C(creations=[creation(), creation(op=4), creation(name="u", principal="User:bob")]))
    image = w.image
    d = Working(image)
    response = delete_acls(d, D(filters=[delete_filter(principal="User:alice"), delete_filter(), delete_filter(op=0)]))
    first, second, bad = response.filter_results
    assert sorted(a.operation for a in first.matching_acls) == [3, 4]
    assert [a.resource_name for a in second.matching_acls] == ["u"]    # what the first took is not repeated
    assert bad.error_code == ErrorCode.INVALID_REQUEST and bad.matching_acls == []
    assert d.image.acls == {}
