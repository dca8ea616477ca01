"""benchmarks/report.py: a benchmark run's printed results become the Performance page's table."""

from __future__ import annotations

from benchmarks import report
from benchmarks._harness import Result, format_results


def _log() -> str:
    results = [
        Result("linen", "MLP-100 eager apply", {"jax": 1.0, "flaxen": 1.26, "flax": 9.0}),
        Result("serialization", "to_bytes 1 GiB", {"flax": 2.0, "flaxen": 0.48}, "flax",
               "peak memory 1.1x | weights"),
        Result("nnx", "split+merge", {"flaxen": 1.0, "jax": 0.5}, "flaxen"),
    ]
    return "== bench_linen\n" + format_results(results) + "\nsome log line\n"


def test_parse_reads_what_the_harness_prints():
    rows = report.parse(_log())
    assert [r.case for r in rows] == ["MLP-100 eager apply", "to_bytes 1 GiB", "split+merge"]
    mlp, ser, nnx = rows
    assert mlp.vs_baseline == 1.26 and mlp.baseline == "jax"
    assert mlp.vs_flax == round(1.26 / 9.0, 2)
    assert ser.baseline == "flax" and ser.vs_flax == 0.24 and ser.note.startswith("peak memory")
    assert nnx.vs_baseline is None  # flaxen is that case's baseline: no self-ratio


def test_table_has_one_row_per_case_and_escapes_pipes():
    text = report.table(report.parse(_log()), "a test run")
    lines = text.splitlines()
    assert lines[0] == "Numbers from a test run."
    assert lines[2].startswith("| suite | case |")
    assert len([line for line in lines if line.startswith("| ")]) == 1 + 3
    assert "| linen | MLP-100 eager apply | 1.26 | jax | 0.14 |" in text
    assert "peak memory 1.1x / weights" in text


def test_main_writes_the_page_include(tmp_path, capsys):
    log = tmp_path / "bench.txt"
    log.write_text(_log(), encoding="utf-8")
    out = tmp_path / "table.md"
    assert report.main([str(log), "-o", str(out)]) == 0
    assert "split+merge" in out.read_text(encoding="utf-8")
    assert "3 cases" in capsys.readouterr().out


def test_main_refuses_a_log_without_results(tmp_path, capsys):
    log = tmp_path / "empty.txt"
    log.write_text("== bench_core\nnothing here\n", encoding="utf-8")
    assert report.main([str(log), "-o", str(tmp_path / "t.md")]) == 1
    assert not (tmp_path / "t.md").exists()
    assert "no benchmark result lines" in capsys.readouterr().err
