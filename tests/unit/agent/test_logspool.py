"""The output spool: lines read back as written, resumed exactly after a
restart, and a cap that says exactly what it cut."""

from __future__ import annotations

from pathlib import Path

from schedulearn.agent.logspool import LogSpool, SpoolMark, parse
from schedulearn.protocol import LOG_LINE_MAX_CHARS, LogBatch, LogStream


def texts(spool: LogSpool) -> list[str]:
    out, offset = [], 0
    while lines := spool.read(offset, 1000):
        out += [parse(raw)[2] for raw, _ in lines]
        offset = lines[-1][1]
    return out


def test_lines_read_back_in_order_with_stream_and_time(tmp_path: Path) -> None:
    spool = LogSpool(tmp_path / "output.log", cap_bytes=1 << 20)
    spool.add(LogStream.STDOUT, 1.5, "one", 4)
    spool.add(LogStream.STDERR, 2.25, "two words", 10)
    raw = [r for r, _ in spool.read(0, 10)]
    assert [parse(r) for r in raw] == [
        (LogStream.STDOUT, 1.5, "one"),
        (LogStream.STDERR, 2.25, "two words"),
    ]
    assert spool.positions == {"stdout": 4, "stderr": 10}


def test_a_restart_truncates_to_the_checkpoint_and_resumes_from_its_positions(
    tmp_path: Path,
) -> None:
    path = tmp_path / "output.log"
    spool = LogSpool(path, cap_bytes=1 << 20)
    for i in range(5):
        spool.add(LogStream.STDOUT, 0.0, f"line {i}", (i + 1) * 7)
    mark = spool.checkpoint()
    spool.add(LogStream.STDOUT, 0.0, "written after the checkpoint", 99)
    spool.flush()
    spool.close()
    again = LogSpool(path, cap_bytes=1 << 20, mark=mark)
    assert again.positions == {"stdout": 35}
    assert texts(again) == [f"line {i}" for i in range(5)]
    again.add(LogStream.STDOUT, 0.0, "written after the checkpoint", 99)
    assert texts(again)[-1] == "written after the checkpoint"
    assert len(texts(again)) == 6


def test_past_the_cap_lines_are_counted_and_the_count_is_said(tmp_path: Path) -> None:
    spool = LogSpool(tmp_path / "output.log", cap_bytes=100, node="n1")
    for i in range(20):
        spool.add(LogStream.STDOUT, 0.0, f"{i:09d}", i)  # 20 bytes spooled: o0.000000 …\n
    spool.finish(0.0)
    kept = texts(spool)
    assert kept[:5] == [f"{i:09d}" for i in range(5)]
    assert "passed the per-job disk cap of 100 bytes" in kept[5]
    assert len(kept) == 7
    assert kept[6] == (
        "[schedulearn: 300 bytes (15 lines) of output past the per-job disk cap of 100 bytes "
        "on node 'n1' were not kept]"
    )


def test_every_line_of_a_damaged_spool_ships_as_the_server_takes_it(tmp_path: Path) -> None:
    # `wire` builds lines without validating them; whatever a damaged file
    # holds, the line it makes must pass the server's own validation.
    path = tmp_path / "output.log"
    path.write_bytes(
        b"o1.5 fine\n"
        b"e2.0 a NUL \x00 here\n"
        b"oinf a time that JSON cannot carry\n"
        b"xnan an unknown stream \xff\xfe and bad UTF-8\n"
        b"o3.0 " + b"y" * (LOG_LINE_MAX_CHARS + 10) + b"\n"
    )
    # As a restarted agent opens it: its record says how far it is good.
    spool = LogSpool(path, cap_bytes=1 << 30, mark=SpoolMark(path.stat().st_size, {}, 0, 0))
    shipped = [spool.wire(raw, seq) for seq, (raw, _) in enumerate(spool.read(0, 10), 1)]
    assert len(shipped) == 5
    batch = LogBatch.model_validate_json(
        LogBatch.model_construct(attempt=0, node="n1", lines=shipped).model_dump_json()
    )
    assert [line.text[:10] for line in batch.lines] == [
        "fine",
        "a NUL \ufffd he",
        "a time tha",
        "an unknown",
        "yyyyyyyyyy",
    ]
    assert [line.at for line in batch.lines[:3]] == [1.5, 2.0, 0.0]
    assert len(batch.lines[4].text) == LOG_LINE_MAX_CHARS
