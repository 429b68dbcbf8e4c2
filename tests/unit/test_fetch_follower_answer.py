"""A leader's answer to a follower's Fetch, as the wire carries it (handlers/fetch.py)."""
from __future__ import annotations

import pytest

from core.broker.handlers.fetch import R, _follower_data, _Read
from core.broker.replication import DivergingEpoch, FetchAnswer, FollowerFetch
from core.protocol import messages
from core.protocol.errors import ErrorCode


def _read(answer: FetchAnswer, chunks=()) -> _Read:
    r = _Read(("t", 0), 0, None, None, 1 << 20, 5, ErrorCode.NONE)
    r.follower = FollowerFetch(2, 7, 3, 5, 3)
    r.answer = answer
    r.chunks = list(chunks)
    return r


@pytest.mark.parametrize("version", [12, 13, 15, 17])
def test_a_diverging_epoch_reaches_the_follower(version):
    pd = _follower_data(_read(FetchAnswer(ErrorCode.NONE, 40, 0, 50, DivergingEpoch(2, 30))))
    response = R(throttle_time_ms=0, error_code=0, session_id=0, responses=[R.FetchableTopicResponse(
        topic="t", topic_id=bytes(16), partitions=[pd])])
    api = messages.API[1].response
    back = api.decode(version, api.encode(version, response)).responses[0].partitions[0]
    assert (back.diverging_epoch.epoch, back.diverging_epoch.end_offset) == (2, 30)
    assert (back.high_watermark, back.log_start_offset, back.records) == (40, 0, b"")


def test_without_divergence_the_records_and_the_leaders_offsets_go():
    pd = _follower_data(_read(FetchAnswer(ErrorCode.NONE, 40, 3, 50, read_offset=5), [b"batch"]))
    assert (pd.high_watermark, pd.last_stable_offset, pd.log_start_offset) == (40, 40, 3)
    assert pd.records == [b"batch"]
    assert pd.diverging_epoch is None or pd.diverging_epoch.epoch == -1
