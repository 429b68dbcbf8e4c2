"""Error codes are part of the wire contract: the numbers must be Kafka's."""
from core.protocol.errors import ErrorCode


def test_error_codes_have_kafkas_numbers():
    """Spot checks against Kafka's Errors.java, around a range that was once shifted."""
    expected = {80: "PREFERRED_LEADER_NOT_AVAILABLE", 81: "GROUP_MAX_SIZE_REACHED", 82: "FENCED_INSTANCE_ID",
                83: "ELIGIBLE_LEADERS_NOT_AVAILABLE", 84: "ELECTION_NOT_NEEDED", 85: "NO_REASSIGNMENT_IN_PROGRESS",
                86: "GROUP_SUBSCRIBED_TO_TOPIC", 87: "INVALID_RECORD", 35: "UNSUPPORTED_VERSION", 2: "CORRUPT_MESSAGE",
                45: "OUT_OF_ORDER_SEQUENCE_NUMBER", 47: "INVALID_PRODUCER_EPOCH", 100: "UNKNOWN_TOPIC_ID"}
    assert {code: ErrorCode(code).name for code in expected} == expected
