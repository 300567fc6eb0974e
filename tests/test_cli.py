"""The ``sparse-ops`` command line: every subcommand, its exit codes (0 success, 1 failure,
2 usage error) and ``--help``."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import sparse_ops as so
from sparse_ops import cli, plugins
from sparse_ops.cli import main

COMMANDS = ["list", "info", "plugins", "new-plugin", "include-dir", "check", "demo", "bench", "version"]




def write_plugin(path: Path, prefix: str, samples: str | None, kernel: str = "y[...] = 2 * x",
                 extra: str = "") -> Path:
    """A one-op plugin file; ``samples`` is the body of its samples() classmethod (None: none)."""
    method = "" if samples is None else (
        "    @classmethod\n    def samples(cls):\n" + textwrap.indent(textwrap.dedent(samples), " " * 8))
    path.write_text(textwrap.dedent(f"""\
        import numpy as np
        import sparse_ops as so

        @so.register("{prefix}_double")
        class Double(so.Op):
            '''y = 2 x'''
            def infer_storage_type(self, x):
                return [x]
            @so.kernel(device=("cpu", "gpu"))
            def dense(self, ctx, x, y):
                {kernel}
            def gradient(self, out_grads, inputs, outputs):
                return [out_grads[0] * 2.0]
        """) + method + textwrap.dedent(extra))
    return path


# ---- help and usage ------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", [[]] + [[c] for c in COMMANDS])
def test_help_everywhere(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main(command + ["--help"])
    assert exc.value.code == 0
    assert "usage: sparse-ops" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["list", "--bogus"], ["info"], ["check"], ["new-plugin"], ["nonsense"],
                                  ["demo", "--rows", "many"], ["new-plugin", "x", "--lang", "fortran"],
                                  ["include-dir", "extra"]])
def test_usage_errors_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_no_command_prints_help_and_exits_2(capsys):
    assert main([]) == 2
    out = capsys.readouterr().out
    assert all(c in out for c in COMMANDS)


def test_version(capsys):
    assert main(["version"]) == 0
    assert capsys.readouterr().out.strip() == so.__version__


# ---- list / info -----------------------------------------------------------------------------------------
def test_list_shows_plugin_devices_and_storage_variants(capsys):
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["operator", "plugin", "devices"]
    dot = next(line.split() for line in lines if line.startswith("dot "))
    assert dot[:4] == ["dot", "built-in", "cpu,gpu", "dense"] and "csr,default" in dot
    assert lines[-1] == f"{len(so.list_ops())} operators"


def test_list_by_plugin(tmp_path, isolated, capsys):
    so.library.load(write_plugin(tmp_path / "cli_listed.py", "clilisted", None))
    assert main(["list", "--plugin", "cli_listed"]) == 0
    out = capsys.readouterr().out
    assert "clilisted_double  cli_listed  cpu,gpu  dense" in out and "dot" not in out
    assert main(["list", "--plugin", "no_such_plugin"]) == 1


def test_info_shows_signature_parameters_storage_rules_kernels_and_docs(capsys):
    assert main(["info", "dot"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("dot(lhs, rhs, transpose_a=False, transpose_b=False")
    assert "plugin: built-in" in out
    assert "transpose_a: bool, default False" in out
    assert "default,csr -> csr [fcompute_ex]" in out and "default,default -> default [fcompute]" in out
    assert "[fallback]" in out
    assert "cpu  csr,default (fcompute_ex) -> " in out and "cpu  dense (fcompute)" in out
    assert "gradient: yes" in out and "MXNet 1.9" in out  # the docstring


def test_info_on_an_op_with_required_parameters(capsys):
    assert main(["info", "sgd_update"]) == 0
    out = capsys.readouterr().out
    assert "lr: float, required" in out and "with the parameters of the first sample" in out
    assert "default,row_sparse -> default [fcompute_ex]" in out


def test_info_unknown_op_suggests_names(capsys):
    assert main(["info", "dott"]) == 1
    assert "no operator named 'dott'; did you mean dot" in capsys.readouterr().err


# ---- plugins / check ------------------------------------------------------------------------------------
def test_plugins_lists_loaded_and_failed(tmp_path, isolated, capsys):
    so.library.load(write_plugin(tmp_path / "cli_ok.py", "cliok", None))
    broken = tmp_path / "cli_broken.py"
    broken.write_text("raise ImportError('missing dependency xyz')\n")
    with pytest.raises(plugins.PluginError):
        so.library.load(broken)
    assert main(["plugins", "-v"]) == 1  # a plugin failed to load
    out = capsys.readouterr().out
    assert "cli_ok (no version)" in out and "ops: cliok_double" in out
    assert "cli_broken — ImportError: missing dependency xyz" in out and "Traceback" in out


def test_check_runs_opcheck_on_samples(tmp_path, isolated, capsys):
    path = write_plugin(tmp_path / "cli_good.py", "cligood", """\
        x = so.array(np.arange(6.0).reshape(2, 3))
        return [[x], [x.tostype("csr")]]
        """)
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "ok   cligood_double: 2 samples" in out and "1 operators checked (2 samples), 0 whose samples() raised, 0 failed" in out


def test_check_fails_on_a_wrong_op(tmp_path, isolated, capsys):
    # the kernel writes the wrong shape of result: nondeterministic values differ between runs
    path = write_plugin(tmp_path / "cli_bad.py", "clibad", "return [[so.array(np.ones(3))]]",
                        kernel="y[...] = np.random.rand(*y.shape)")
    assert main(["check", str(path)]) == 1
    out = capsys.readouterr().out
    assert "FAIL clibad_double: OpcheckError: clibad_double sample 0 (default): determinism: output 0 differs between two runs" in out


def test_the_command_line_check_catches_a_kernel_writing_past_its_output(tmp_path):
    """``sparse-ops check`` of a plugin runs its checks bounds-checked (a child process with
    SPARSE_OPS_BOUNDSCHECK=1): a numba kernel writing past its output fails its check, named,
    where unchecked it could pass and corrupt memory. Built-ins and --no-boundscheck are
    checked in-process, as they are."""
    path = tmp_path / "cli_oob.py"
    path.write_text(textwrap.dedent("""\
        import numba
        import numpy as np
        import sparse_ops as so


        @numba.njit
        def _fill_past(y):
            for i in range(y.shape[0] + 3):  # three values past the end
                y[i] = 1.0


        @so.register("clioob_fill")
        class Fill(so.Op):
            differentiable = False

            @so.kernel(device="cpu")
            def dense(self, ctx, x, y):
                _fill_past(y.reshape(-1))

            def reference(self, x):
                return [np.ones_like(x)]

            @classmethod
            def samples(cls):
                return [[so.array(np.zeros(4))]]
        """))
    env = {k: v for k, v in os.environ.items() if k != "SPARSE_OPS_BOUNDSCHECK"}
    run = subprocess.run([sys.executable, "-m", "sparse_ops", "check", str(path)], capture_output=True, text=True,
                         env=env, timeout=600)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "FAIL clioob_fill:" in run.stdout and "IndexError" in run.stdout, run.stdout
    assert "kernels bounds-checked (SPARSE_OPS_BOUNDSCHECK=1)" in run.stdout


def test_check_without_samples_or_ops_fails(tmp_path, isolated, capsys):
    assert main(["check", str(write_plugin(tmp_path / "cli_nosamples.py", "clins", None))]) == 1
    out = capsys.readouterr().out
    assert "FAIL clins_double: no samples() classmethod, so nothing was checked" in out
    assert ("0 operators checked (0 samples), 0 whose samples() raised, 0 failed, 1 without samples (a failure: "
            "every operator that ships carries samples that build)") in out
    empty = tmp_path / "cli_empty.py"
    empty.write_text("")
    assert main(["check", str(empty)]) == 1
    assert "registers no operators" in capsys.readouterr().err


def test_check_reports_plugins_that_do_not_load(tmp_path, isolated, capsys):
    assert main(["check", "no_such_plugin_anywhere"]) == 1
    assert "no entry point named 'no_such_plugin_anywhere'" in capsys.readouterr().err
    broken = tmp_path / "cli_syntax.py"
    broken.write_text("def (:\n")
    assert main(["check", str(broken)]) == 1
    assert "cli_syntax" in capsys.readouterr().err and "SyntaxError" in str(plugins._FAILED["cli_syntax"].error)


def test_check_tells_a_raising_samples_from_a_kernel_failure(tmp_path, isolated, capsys):
    path = write_plugin(tmp_path / "cli_badsamples.py", "clibs", "return [[so.array(np.ones(3))]][5]")
    good = write_plugin(tmp_path / "cli_goodsamples.py", "cligs", """\
        x = so.array(np.arange(6.0).reshape(2, 3))
        return [[x], [x.tostype("csr")], [x.tostype("row_sparse")]]
        """)
    so.library.load(good)
    assert main(["check", str(path)]) == 1
    out = capsys.readouterr().out
    assert "FAIL clibs_double: samples() raised IndexError: list index out of range (no kernel ran)" in out
    assert "Traceback" in out and "cli_badsamples.py" in out
    assert "0 operators checked (0 samples), 1 whose samples() raised, 0 failed, 0 without samples" in out
    assert main(["check", str(good)]) == 0
    assert "1 operators checked (3 samples), 0 whose samples() raised, 0 failed" in capsys.readouterr().out


def test_info_shows_the_dispatchers_choice_and_rules_of_ops_with_required_parameters(tmp_path, isolated, capsys):
    assert main(["info", "sgd_update"]) == 0  # lr is required: the first sample's parameters
    assert "default,default -> default [fcompute]" in capsys.readouterr().out
    path = tmp_path / "cli_csronly.py"
    path.write_text(textwrap.dedent("""\
        import sparse_ops as so

        @so.register("clicsr_only")
        class CsrOnly(so.Op):
            def infer_storage_type(self, x):
                return [x]
            @so.kernel(device="cpu", stypes=("csr",))
            def on_csr(self, ctx, x, y):
                ctx.set_csr(y, x.data * 2, x.indices, x.indptr)
        """))
    so.library.load(path)
    assert main(["info", "clicsr_only"]) == 0
    out = capsys.readouterr().out
    assert "default -> default [no cpu kernel]" in out and "csr -> csr [fcompute_ex]" in out
    assert "[fcompute]" not in out


def test_check_says_what_it_compared(tmp_path, isolated, capsys):
    path = write_plugin(tmp_path / "cli_said.py", "clisaid", "return [[so.array(np.arange(1.0, 7.0))]]")
    assert main(["check", str(path)]) == 0
    assert "ok   clisaid_double: 1 samples; compared: determinism, gradient, inference" in capsys.readouterr().out


def test_check_fails_an_op_without_gradient(tmp_path, isolated, capsys):
    """A differentiable op (the default) without a gradient rule compared nothing in the
    gradient check: a failure, with the fix in the message."""
    path = write_plugin(tmp_path / "cli_nograd.py", "clinograd", "return [[so.array(np.ones(2))]]")
    text = path.read_text().replace("    def gradient(self, out_grads, inputs, outputs):\n"
                                    "        return [out_grads[0] * 2.0]\n", "")
    path.write_text(text)
    assert main(["check", str(path)]) == 1
    out = capsys.readouterr().out
    assert "FAIL clinograd_double: OpcheckError: clinograd_double sample 0 (default): gradient: compared nothing" in out
    assert "write gradient() or declare differentiable = False" in out


def _builtin_ops() -> list[str]:
    """The ops sparse_ops itself registers, listed by a fresh process (this one also holds
    the ops other tests register)."""
    code = "import sparse_ops as so; print(' '.join(so.list_ops()))"
    env = {**os.environ, "SPARSE_OPS_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return sorted(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                                 check=True).stdout.split())


@pytest.mark.parametrize("simulated_gpu", [False, True])
def test_check_every_builtin_op(simulated_gpu):
    """Every built-in op carries samples and passes opcheck on them (in a fresh process,
    where the only ops without a plugin are the built-ins); with the CUDA simulator the gpu
    kernels are compared with the cpu ones too."""
    ops = _builtin_ops()
    assert len(ops) >= 80
    env = {**os.environ, "SPARSE_OPS_DISABLE_PLUGIN_AUTOLOAD": "1"}
    env.pop("SPARSE_OPS_CUDA_SIM", None)
    if simulated_gpu:
        env["SPARSE_OPS_CUDA_SIM"] = "1"
    run = subprocess.run([sys.executable, "-m", "sparse_ops", "check", "built-in"], capture_output=True, text=True,
                         env=env, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = run.stdout
    assert f"checking the built-in operators ({len(ops)} operators;" in out
    for op in ops:
        assert f"  ok   {op}: " in out
    summary = out.strip().splitlines()[-1]
    assert summary.startswith(f"{len(ops)} operators checked (") and summary.endswith("0 failed, 0 without samples")
    samples = int(summary.split("(")[1].split()[0])
    assert samples == sum(len(so.get_op(op).cls.samples()) for op in ops)
    dot = "  ok   dot: 13 samples; compared: determinism, format, " + ("gpu, " if simulated_gpu else "")
    assert dot + "gradient, inference, reference\n" in out


def test_check_sparse_ops_is_the_built_ins(capsys):
    assert main(["check", "sparse_ops", "--op", "dot", "--op", "cast_storage"]) == 0
    out = capsys.readouterr().out
    assert "  ok   cast_storage: 9 samples; compared: determinism, format, gradient, inference, reference" in out
    assert "2 operators checked (22 samples), 0 whose samples() raised, 0 failed, 0 without samples" in out


def test_check_the_cookbook(tmp_path, monkeypatch, capsys):
    """Every cookbook recipe carries samples and passes (run from a folder without a
    ``cookbook`` folder in it, so the name is the installed plugin's)."""
    pytest.importorskip("sparse_ops_cookbook")
    monkeypatch.chdir(tmp_path)
    assert main(["check", "cookbook"]) == 0
    out = capsys.readouterr().out
    ops = plugins.plugin_ops("cookbook")
    assert len(ops) == 15
    for op in ops:
        assert f"  ok   {op}: " in out
    assert out.strip().splitlines()[-1].startswith("15 operators checked (")
    assert out.strip().endswith("0 failed, 0 without samples")
    # embedding_bag's per-id weights have their gradient, checked like the weight's
    assert "  ok   embedding_bag: 5 samples; compared: determinism, gradient, inference, reference" in out


def test_check_a_single_op(tmp_path, isolated, capsys):
    path = write_plugin(tmp_path / "cli_two.py", "clitwo", "return [[so.array(np.ones(2))]]")
    assert main(["check", str(path), "--op", "clitwo_double"]) == 0
    assert main(["check", str(path), "--op", "clitwo_other"]) == 1
    assert "has no operator clitwo_other" in capsys.readouterr().err


# ---- new-plugin / bench / demo ---------------------------------------------------------------------------
def test_new_plugin_writes_the_template(tmp_path, capsys):
    assert main(["new-plugin", "cliscaffold", "--dir", str(tmp_path)]) == 0
    root = tmp_path / "cliscaffold"
    assert (root / "pyproject.toml").is_file() and (root / "src" / "cliscaffold" / "__init__.py").is_file()
    assert "created plugin cliscaffold" in capsys.readouterr().out
    assert main(["new-plugin", "cliscaffold", "--dir", str(tmp_path)]) == 1  # never overwrites
    assert "already exists" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["new-plugin", "Bad-Name", "--dir", str(tmp_path)])
    assert exc.value.code == 2 and "lower-case Python identifier" in capsys.readouterr().err


def test_new_plugin_in_c_and_cuda(tmp_path, capsys):
    """--lang c / cuda write a C or CUDA library project (tests/test_clib_template.py builds them)."""
    for lang, name, source in (("c", "clione", "csrc/clione.c"), ("cuda", "clitwo", "csrc/clitwo.cu")):
        assert main(["new-plugin", name, "--lang", lang, "--dir", str(tmp_path)]) == 0
        out = capsys.readouterr().out
        assert f"created plugin {name} ({lang})" in out and f"  {source}\n" in out and "  setup.py\n" in out
        assert "next: python -m pip install --no-build-isolation -e " in out
        assert (tmp_path / name / source).is_file()


def test_include_dir_prints_the_folder_of_the_header(capsys):
    assert main(["include-dir"]) == 0
    folder = capsys.readouterr().out.strip()
    assert folder == so.sdk.include_dir() and os.path.isfile(os.path.join(folder, "sparse_ops.h"))
    # what build systems run: the installed command, in a shell substitution
    out = subprocess.run([sys.executable, "-m", "sparse_ops", "include-dir"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout == folder + "\n"


def test_bench_runs_the_benchmarks_from_a_source_checkout(monkeypatch):
    calls = []
    monkeypatch.setattr(cli.subprocess, "call", lambda cmd, cwd: calls.append((cmd, cwd)) or 0)
    assert main(["bench", "--quick"]) == 0
    root = Path(cli.__file__).resolve().parent.parent
    assert calls == [([sys.executable, "-m", "benchmarks", "--quick"], root)]
    monkeypatch.setattr(cli.subprocess, "call", lambda cmd, cwd: 3)
    assert main(["bench"]) == 1


def test_bench_without_a_source_checkout(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(cli, "__file__", str(tmp_path / "site-packages" / "sparse_ops" / "cli.py"))
    assert main(["bench"]) == 1
    assert "needs a source checkout" in capsys.readouterr().err


def test_demo_still_runs(capsys):
    assert main(["demo", "--rows", "30", "--cols", "20", "--per-row", "2"]) == 0
    assert "tour finished" in capsys.readouterr().out


def test_console_entry_as_a_module():
    env = {k: v for k, v in os.environ.items() if k not in ("SPARSE_OPS_CUDA_SIM", "NUMBA_ENABLE_CUDASIM")}
    out = subprocess.run([sys.executable, "-m", "sparse_ops", "info", "elemwise_mul"], capture_output=True,
                         text=True, env=env, timeout=120)
    assert out.returncode == 0 and "csr,csr -> csr [fcompute_ex]" in out.stdout
    out = subprocess.run([sys.executable, "-m", "sparse_ops", "plugins"], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith(("loaded (", "note:"))
