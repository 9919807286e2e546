import numpy as np

from loadgen.record.querylog import BINARY_FILE, CSV_FILE, FLUSH_ROWS, QueryLog, read_binary


def test_rows_stream_to_disk_before_close(tmp_path):
    log = QueryLog(tmp_path, origin_ns=1000)
    for q in range(FLUSH_ROWS + 5):
        log.add(q, 1000 + q, 1001 + q, 1010 + q, "ok" if q % 2 else "http_503")
    rows, kinds = read_binary(tmp_path)  # a crash now keeps every flushed row
    assert len(rows) == FLUSH_ROWS
    assert rows["scheduled_ns"][3] == 3 and rows["done_ns"][3] == 13
    assert kinds == {"ok": 0, "http_503": 1}
    log.close()
    rows, _ = read_binary(tmp_path)
    assert len(rows) == FLUSH_ROWS + 5
    lines = (tmp_path / CSV_FILE).read_text().splitlines()
    assert lines[0] == "query_id,scheduled_ns,sent_ns,done_ns,status"
    assert lines[1] == "0,0,1,10,http_503" and lines[2] == "1,1,2,11,ok"
    assert len(lines) == FLUSH_ROWS + 6


def test_torn_last_record_is_ignored(tmp_path):
    log = QueryLog(tmp_path)
    for q in range(10):
        log.add(q, q, q, q)
    log.close()
    path = tmp_path / BINARY_FILE
    path.write_bytes(path.read_bytes()[:-7])
    rows, _ = read_binary(tmp_path)
    assert len(rows) == 9 and np.array_equal(rows["query_id"], np.arange(9))
