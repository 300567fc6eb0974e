"""The demo (``sparse-ops demo``): the quick run end to end, its data, AUC, PNG and CLI.

(Named test_cookbook_demo.py, not test_demo.py: tests/test_demo.py exists, and two test
modules with one basename in folders without __init__.py break a combined pytest run.)
"""
import io
import struct
import zlib

import numpy as np
import pytest

import cookbook_helpers  # noqa: F401  (first: puts the cookbook on sys.path when not installed)
import sparse_ops_cookbook.demo as demo
from sparse_ops.cli import main
from sparse_ops_cookbook.demo.data import auc, karate_club, make_click_log, stochastic_block_model
from sparse_ops_cookbook.demo.gcn import train_gcn
from sparse_ops_cookbook.demo.plot import TextBar, _raster_plot


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """One quick demo run (about 3 s warm), its printed lines and its figures."""
    out = tmp_path_factory.mktemp("demo")
    lines = []
    result = demo.run(quick=True, out=str(out), progress=False, log=lines.append)
    return result, "\n".join(lines)


def read_png(path):
    """(width, height, colour type, pixel rows (h, w, 3)) of an 8-bit RGB, unfiltered PNG;
    checks the signature and every chunk's CRC."""
    blob = open(path, "rb").read()
    assert blob[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, []
    while pos < len(blob):
        (length,) = struct.unpack(">I", blob[pos:pos + 4])
        kind, body = blob[pos + 4:pos + 8], blob[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", blob[pos + 8 + length:pos + 12 + length])
        assert crc == zlib.crc32(kind + body), kind
        chunks.append((kind, body))
        pos += 12 + length
    assert chunks[0][0] == b"IHDR" and chunks[-1][0] == b"IEND"
    width, height, depth, colour = struct.unpack(">IIBB", chunks[0][1][:10])
    assert width > 0 and height > 0 and depth == 8
    pixels = None
    if colour == 2:  # ours: RGB; each row a 0 filter byte then the pixels
        raw = zlib.decompress(b"".join(body for kind, body in chunks if kind == b"IDAT"))
        rows = np.frombuffer(raw, np.uint8).reshape(height, 1 + 3 * width)
        assert not rows[:, 0].any()
        pixels = rows[:, 1:].reshape(height, width, 3)
    return width, height, colour, pixels


def test_quick_demo_meets_its_targets(quick):
    result, out = quick
    ctr, gcn = result["ctr"], result["gcn"]
    assert result["ok"] and "every target met" in out
    assert ctr.final_auc >= demo.QUICK.auc_target == 0.70  # chance is 0.5
    assert ctr.final_auc < result["data"].bayes_auc  # nothing beats the hidden model itself
    losses = np.asarray(ctr.batch_losses)
    assert losses[:5].mean() > losses[-5:].mean() + 0.1  # starts at log 2 = 0.693
    assert abs(losses[0] - np.log(2)) < 0.01
    assert gcn.accuracy >= gcn.target and gcn.met
    for figure in ("train loss", "test loss", "test AUC", "examples/s", "sparse step", "dense step",
                   "x faster", "accuracy on the"):
        assert figure in out, figure


def test_sparse_step_beats_dense_and_computes_the_same(quick):
    ctr = quick[0]["ctr"]
    assert ctr.sparse_ms < ctr.dense_ms
    assert ctr.max_weight_diff < 1e-5  # lazy Adagrad on the touched rows = dense Adagrad on all
    assert 0 < ctr.rows_touched < 0.1


def test_the_loss_curve_is_a_valid_png(quick):
    result = quick[0]
    assert result["png"].endswith(demo.PNG_NAME)
    width, height, _, _ = read_png(result["png"])
    assert (width, height) == (640, 400)


def test_numpy_renderer_draws_the_curves(tmp_path):
    path = str(tmp_path / "curve.png")
    train = np.linspace(0.7, 0.4, 50) + 0.01 * np.sin(np.arange(50))
    _raster_plot(path, train, np.array([24, 49]), np.array([0.5, 0.45]))
    width, height, colour, pixels = read_png(path)
    assert (width, height, colour) == (640, 400, 2)
    blue = np.all(pixels == (70, 110, 220), axis=2)
    red = np.all(pixels == (220, 50, 50), axis=2)
    assert blue.sum() > 500 and red.sum() > 50
    # the curve falls: its pixels sit higher (smaller row) on the right than on the left
    rows, cols = np.nonzero(blue[:, 60:600])
    assert rows[cols > 400].mean() > rows[cols < 100].mean()


def test_auc_matches_the_pairwise_definition():
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 6, 200).astype(float)  # many ties
    labels = rng.random(200) < 0.3
    pos, neg = scores[labels], scores[~labels]
    want = ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (len(pos) * len(neg))
    assert auc(scores, labels) == pytest.approx(want, abs=1e-12)
    assert auc([1, 2, 3, 4], [0, 0, 1, 1]) == 1.0 and auc([4, 3, 2, 1], [0, 0, 1, 1]) == 0.0
    assert np.isnan(auc([1, 2], [1, 1]))


def test_click_log_is_deterministic_valid_and_power_law():
    a = make_click_log(n_examples=5000, n_features=1 << 16, seed=3)
    b = make_click_log(n_examples=5000, n_features=1 << 16, seed=3)
    for pa, pb in zip(a.train + a.test, b.train + b.test):
        np.testing.assert_array_equal(pa, pb)
    indptr, indices, data, labels = a.train
    assert indices.dtype == np.int32 and data.dtype == np.float32 and len(indptr) == a.n_train + 1
    assert a.field_sizes.sum() == a.n_features and 0 <= indices.min() and indices.max() < a.n_features
    counts = np.diff(indptr)
    assert counts.min() >= 26 and 28 < counts.mean() < 34  # 26 one-hot fields + a bag of tags
    same_row = np.repeat(np.arange(len(counts)), counts)
    step = np.diff(indices.astype(np.int64))[same_row[1:] == same_row[:-1]]
    assert (step > 0).all()  # sorted, unique column indices in every row
    assert 0.15 < labels.mean() < 0.25 and set(np.unique(labels)) == {0.0, 1.0}
    freq = np.sort(np.bincount(indices, minlength=a.n_features))[::-1]
    assert freq[:a.n_features // 100].sum() > 0.5 * freq.sum()  # 1% of the ids: most occurrences
    assert 0.75 < a.bayes_auc < 0.9
    c = make_click_log(n_examples=5000, n_features=1 << 16, seed=4)
    assert not np.array_equal(a.train[1], c.train[1])


def test_gcn_on_the_block_model_meets_its_target():
    graph = stochastic_block_model(seed=1)
    assert graph.n_nodes == 300 and graph.n_classes == 3 and len(graph.train_nodes) == 15
    indptr, indices, _ = graph.adjacency
    dense = np.zeros((300, 300))
    dense[np.repeat(np.arange(300), np.diff(indptr)), indices] = 1
    assert (dense == dense.T).all() and not dense.diagonal().any()
    report = train_gcn(graph, epochs=100, seed=1)
    assert report.accuracy >= graph.target == 0.9
    assert report.accuracy > report.accuracy_without_graph + 0.2  # the edges do the work
    assert report.final_loss < report.first_loss


def test_karate_club_graph():
    pytest.importorskip("networkx")
    graph = karate_club()
    assert (graph.n_nodes, graph.n_edges, graph.n_classes) == (34, 78, 2)
    assert graph.labels[0] != graph.labels[33]  # the two leaders


def test_text_progress_bar():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    live, piped = Tty(), io.StringIO()
    for stream in (live, piped):
        bar = TextBar(3, "epoch 1/1", width=6, stream=stream)
        for _ in range(3):
            bar.update(10, loss="0.5")
        bar.close()
    assert "\r" in live.getvalue() and live.getvalue().endswith("\n")
    assert piped.getvalue().count("\r") == 1  # not a terminal: the final line only
    assert "|######| 3/3" in piped.getvalue() and "loss 0.5" in piped.getvalue()


def test_cli_runs_the_cookbook_demo(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(demo, "run", lambda **kw: calls.append(kw) or {"ok": True})
    assert main(["demo", "--quick", "--epochs", "2", "--seed", "5", "--out", str(tmp_path), "--graph", "sbm",
                 "--no-progress"]) == 0
    assert calls == [{"quick": True, "epochs": 2, "seed": 5, "out": str(tmp_path), "graph": "sbm",
                      "progress": False}]
    monkeypatch.setattr(demo, "run", lambda **kw: {"ok": False})
    assert main(["demo"]) == 1  # a missed target


def test_cli_without_the_cookbook(monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "sparse_ops_cookbook" else real(name, *a))
    assert main(["demo", "--quick"]) == 1
    assert "pip install -e ./cookbook" in capsys.readouterr().err
    assert main(["demo", "--tour", "--rows", "20", "--cols", "10", "--per-row", "2"]) == 0  # needs no cookbook
    assert "tour finished" in capsys.readouterr().out
