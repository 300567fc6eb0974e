"""``benchmarks/gpu_check.py``, the one-run check of a lent GPU, works before a GPU is lent:
every section runs in smoke mode in numba's CUDA simulator (``SPARSE_OPS_CUDA_SIM=1``) and
gives rows without a failure; without a gpu every section is a skipped row; a section that
raises is a FAIL row and the run goes on."""
from __future__ import annotations

import pytest

import sparse_ops as so
from benchmarks import gpu_check

needs_gpu = pytest.mark.skipif(so.num_gpus() == 0, reason="no gpu (set SPARSE_OPS_CUDA_SIM=1 to simulate one)")


@pytest.mark.gpu
@needs_gpu
def test_every_section_runs_in_smoke_mode():
    rows = gpu_check.run(smoke=True)
    assert {r.section for r in rows} == set(gpu_check.SECTIONS)
    failed = [r for r in rows if r.status.startswith("FAIL")]
    assert not failed, failed
    assert all(r.status == "ok" or r.status.startswith("skipped: ") for r in rows)
    lines = gpu_check.table(rows).splitlines()
    assert lines[0] == "| " + " | ".join(gpu_check.HEADER) + " |"
    assert len(lines) == 2 + len(rows)
    summary = next(r for r in rows if r.section == "ops")
    assert int(summary.measurement.split()[0]) >= 10, summary
    # the speed sections ran against an anchor (cuSPARSE, or SciPy in the simulator without CuPy)
    for section in ("dot", "spgemm", "rows", "embedding"):
        assert any(r.section == section and r.status == "ok" for r in rows), section


@pytest.mark.gpu
@needs_gpu
def test_main_prints_one_table_and_the_counts(capsys):
    assert gpu_check.main(["--smoke", "--sections", "torch", "jax"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("| section |") and len(out) == 2 + 2 + 1
    assert out[-1].startswith("0 ok, 0 failed, 2 skipped")


@pytest.mark.skipif(so.num_gpus() != 0, reason="a gpu (or the simulator) is present")
def test_without_a_gpu_every_section_is_skipped(capsys):
    assert gpu_check.main(["--smoke"]) == 0
    out = capsys.readouterr().out.splitlines()
    body = out[2:-1]
    assert len(body) == len(gpu_check.SECTIONS)
    assert all(line.endswith("| skipped: no gpu |") for line in body), body
    assert out[-1].startswith(f"0 ok, 0 failed, {len(gpu_check.SECTIONS)} skipped")


def test_a_section_that_raises_is_a_fail_row_and_the_run_goes_on():
    setup = gpu_check.Setup(smoke=True, real=False, cupy=None, anchor=None, repeat=1)

    def broken(_):
        yield gpu_check.Row("broken", "first case")
        raise RuntimeError("kernel exploded\nsecond line")

    rows: list = []
    gpu_check.run_section("broken", broken, setup, rows)
    gpu_check.run_section("fine", lambda _: [gpu_check.Row("fine", "a case")], setup, rows)
    assert [r.status for r in rows] == ["ok", "FAIL: RuntimeError: kernel exploded", "ok"]
    assert gpu_check.counts(rows) == (2, 1, 0)


def test_the_row_generators_keep_their_promises():
    """Power-law and uniform rows hold the same number of values in canonical csr."""
    uni, pl = gpu_check.row_pair(500, 300, 6, seed=1)
    assert uni.nnz == pl.nnz and uni.shape == pl.shape == (500, 300)
    lengths = [m.indptr[1:] - m.indptr[:-1] for m in (uni, pl)]
    assert lengths[0].max() - lengths[0].min() <= 1 and lengths[1].max() > 10 * lengths[1].mean()
    for m in (uni, pl):
        assert m.has_canonical_format and m.indices.max() < 300
