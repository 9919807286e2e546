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
    assert lines[0] == "query_id,scheduled_ns,sent_ns,done_ns,latency_ns,status"
    assert lines[1] == "0,0,1,10,10,http_503" and lines[2] == "1,1,2,11,10,ok"
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


def test_a_token_run_logs_ttft_and_output_tokens(tmp_path):
    log = QueryLog(tmp_path, origin_ns=100)
    log.add(0, 100, 105, 900, "ok", ttft_ns=250, output_tokens=12)
    log.add(1, 200, 210, 400, "http_500")  # a failed stream: no tokens
    log.add(2, 300, 301, 700, "ok", ttft_ns=-1, output_tokens=0)
    log.close()
    lines = (tmp_path / CSV_FILE).read_text().splitlines()
    assert lines[0] == ("query_id,scheduled_ns,sent_ns,done_ns,latency_ns,status,"
                        "ttft_ns,output_tokens")
    assert lines[1:] == ["0,0,5,800,800,ok,250,12", "1,100,110,300,200,http_500,,",
                         "2,200,201,600,400,ok,,0"]
    rows, _ = read_binary(tmp_path)
    assert rows["ttft_ns"].tolist() == [250, -1, -1]
    assert rows["output_tokens"].tolist() == [12, -1, 0]
