"""The main job (the container tour) runs and checks itself; the CLI answers as a CLI should."""
import subprocess
import sys

from sparse_ops.cli import main


def test_demo_runs_small(capsys):
    assert main(["demo", "--rows", "60", "--cols", "40", "--per-row", "3"]) == 0
    out = capsys.readouterr().out
    assert "tour finished" in out and "refused: csr column indices must be sorted" in out


def test_cli_help_and_unknown_command():
    assert main([]) == 2
    out = subprocess.run([sys.executable, "-m", "sparse_ops", "nonsense"], capture_output=True, text=True)
    assert out.returncode == 2 and "invalid choice" in out.stderr
    out = subprocess.run([sys.executable, "-m", "sparse_ops", "version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "0.1.0"
