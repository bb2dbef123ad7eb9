"""The journal from Python: record a stream, list the recordings, replay them (whole, from/to)
and get back exactly what was published; bad positions and ids are typed errors."""

from __future__ import annotations

import random

import pytest

import shmlog


def record(stream_dir, name, journal, messages):
    """Publishes `messages` with a recorder reading; returns the position after each."""
    positions = []
    pub = shmlog.Publication(name, stream_dir, term_length=1 << 20)
    # Started after the publisher, the recorder joins its session at once.
    with shmlog.Recorder(name, journal, dir=stream_dir, fsync="segment") as rec:
        with pub:
            pub.wait_connected(timeout=5)
            for m in messages:
                while True:
                    try:
                        positions.append(pub.offer(m))
                        break
                    except shmlog.BackPressured:
                        rec.wait(1.0)
                        rec.poll()
            rec.poll()
            assert rec.recording_id is not None
        # The publisher closed: record the rest; the recording stops at the end of the stream.
        while rec.recording_id is not None:
            rec.wait(1.0)
            rec.poll()
    return positions


def test_replay_equals_what_was_recorded(stream_dir, name, tmp_path):
    rng = random.Random(1)
    messages = [rng.randbytes(rng.choice([0, 1, 31, 500, 5000, 70_000, 120_000])) for _ in range(2000)]
    journal = str(tmp_path / "journal")
    positions = record(stream_dir, name, journal, messages)

    recs = shmlog.recordings(journal)
    assert len(recs) == 1
    r = recs[0]
    assert (r.stream, r.state, r.stop_reason) == (name, "stopped", "end-of-stream")
    assert r.stop_position == positions[-1]
    assert r.length == r.stop_position - r.start_position

    assert list(shmlog.Replay(journal, r.id)) == messages
    # From message 10 to the end of message 19.
    with shmlog.Replay(journal, r.id, from_=positions[9], to=positions[19]) as replay:
        assert list(replay) == messages[10:20]
        assert replay.position == positions[19]
    assert list(shmlog.Replay(journal, r.id, from_=positions[-1])) == []


def test_journal_errors(stream_dir, name, tmp_path):
    journal = str(tmp_path / "journal")
    positions = record(stream_dir, name, journal, [b"a" * 100, b"b" * 100])
    rid = shmlog.recordings(journal)[0].id
    with pytest.raises(shmlog.PositionNotAvailable) as e:
        shmlog.Replay(journal, rid, from_=positions[0] + 8)
    assert e.value.nearest == positions[1]
    with pytest.raises(shmlog.NoSuchRecording, match="no recording with id 99"):
        shmlog.Replay(journal, 99)
    with pytest.raises(ValueError):
        shmlog.Replay(journal, -1)
    with pytest.raises(shmlog.ShmlogError):
        shmlog.recordings(str(tmp_path / "nothing-here"))
    with pytest.raises(ValueError, match="fsync"):
        shmlog.Recorder(name, journal, dir=stream_dir, fsync="always")
