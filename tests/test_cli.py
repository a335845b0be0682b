"""The real ``cpe`` console script, run in a subprocess like a user would."""

from __future__ import annotations

import json
import os
import pathlib
import shlex
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

import cpe
from interop import WITHOUT_ML_DTYPES

SCRIPT = pathlib.Path(sys.executable).parent / ("cpe.exe" if os.name == "nt" else "cpe")


def run(
    *args: str, module: bool = False, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "cpe", *args] if module else [str(SCRIPT), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)


def test_console_script_is_installed():
    assert SCRIPT.exists() or shutil.which("cpe"), (
        "the cpe console script is not installed next to python"
    )


@pytest.mark.parametrize("module", [False, True])
def test_encode_prints_the_encoding(module):
    result = run("encode", "0", "4", module=module)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[0. 1. 0. 1.]"


def test_encode_matches_the_library_in_csv():
    result = run("encode", "998.39", "6", "--convention", "adm", "--format", "csv")
    assert result.returncode == 0, result.stderr
    values = np.array([float(v) for v in result.stdout.strip().split(",")])
    np.testing.assert_array_equal(values, cpe.positional_encoding(998.39, 6, convention="adm"))


def test_encode_several_positions():
    result = run("encode", "0,1,2", "4", "--format", "csv")
    rows = [[float(v) for v in line.split(",")] for line in result.stdout.strip().splitlines()]
    np.testing.assert_array_equal(rows, cpe.positional_encoding([0, 1, 2], 4))


def test_table_csv_and_options():
    result = run(
        "table", "5", "8", "--start", "3", "--base", "100", "--layout", "sin_cos", "--format", "csv"
    )
    assert result.returncode == 0, result.stderr
    rows = np.array(
        [[float(v) for v in line.split(",")] for line in result.stdout.strip().splitlines()]
    )
    np.testing.assert_array_equal(
        rows, cpe.positional_encoding_table(5, 8, start=3, base=100.0, layout="sin_cos")
    )


@pytest.mark.parametrize("suffix", [".npy", ".npz", ".csv", ".txt"])
def test_table_to_files(tmp_path, suffix):
    target = tmp_path / f"pe{suffix}"
    result = run("table", "16", "6", "--dtype", "float32", "--output", str(target))
    assert result.returncode == 0, result.stderr
    expected = cpe.positional_encoding_table(16, 6, dtype=np.float32)
    if suffix == ".npy":
        np.testing.assert_array_equal(np.load(target), expected)
    elif suffix == ".npz":
        np.testing.assert_array_equal(np.load(target)["encoding"], expected)
    elif suffix == ".csv":
        np.testing.assert_array_equal(np.loadtxt(target, delimiter=",", dtype=np.float32), expected)
    else:
        np.testing.assert_array_equal(np.loadtxt(target, dtype=np.float32), expected)


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["encode", "x", "4"], "not a position"),
        # Integers are read exactly, not through a float that would round them.
        (["encode", "9007199254740993", "2"], "got 9007199254740993"),
        (["encode", "0,9007199254740993", "2"], "magnitude <= 2**53"),
        (["encode", "0.5,9007199254740993", "2"], "got 9007199254740993"),
        (["encode", "0", "0"], "D must be >= 1"),
        (["encode", "0", "four"], "invalid int value"),
        (["table", "-1", "4"], "n must be >= 0"),
        (["table", "3", "4", "--dtype", "int8"], "invalid choice"),
        (["table", "3", "4", "--base", "-2"], "base must be > 0"),
        (["table", "3", "8", "--freq-shift", "4"], "freq_shift=4.0 needs D // 2"),
        (["table", "3", "4", "--output", "pe.xlsx"], "--output must end in"),
        (["grid", "2", "2", "6"], "D must be a multiple of 4"),
        (["grid", "2", "2", "8", "--freq-shift", "2"], "D // 4 - freq_shift > 0"),
        (["rope", "3", "7"], "head_dim must be even"),
        (["rope", "3", "8", "--rope-parameters", "{bad"], "not a JSON object or @file.json"),
        (["rope", "3", "8", "--rope-parameters", "[1]"], "not a JSON object"),
        (["rope", "3", "8", "--rope-parameters", "@missing.json"], "not a JSON object"),
        (["rope", "3", "8", "--rope-parameters", '{"rope_type": "ntk"}'], "'llama3'"),
        (["rope", "3", "8", "--axes-dim", "4,x"], "not comma-separated integers"),
        (["rope", "3", "8", "--axes-dim", "4,4"], "n must be an array of positions"),
        (["rope", "missing.npy", "8"], "cannot read 'missing.npy'"),
        (["rope", "empty.npy", "8"], "cannot read 'empty.npy'"),
        (["rope", "archive.npy", "8"], "not a .npy array"),
        (["rope", "3", "8", "--rope-parameters", "[" * 100000], "not a JSON object"),
        (["frobnicate"], "invalid choice"),
        (["bench", "--only", "nope"], "unknown kind"),
        (["bench", "--rounds", "0"], "--rounds must be >= 1"),
        ([], "required"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args, text, tmp_path):
    (tmp_path / "empty.npy").write_bytes(b"")
    with (tmp_path / "archive.npy").open("wb") as file:
        np.savez(file, ids=np.arange(3))
    result = subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert result.returncode == 2
    assert text in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr


def _csv(text: str, dtype: type = np.float64) -> np.ndarray:
    return np.array([[dtype(v) for v in line.split(",")] for line in text.strip().splitlines()])


def test_grid_matches_the_library():
    result = run("grid", "3", "2", "16", "--freq-shift", "1", "--extra-tokens", "1",
                 "--format", "csv")  # fmt: skip
    assert result.returncode == 0, result.stderr
    np.testing.assert_array_equal(
        _csv(result.stdout), cpe.sincos_2d(3, 2, 16, freq_shift=1, extra_tokens=1)
    )


def test_rope_prints_cos_then_sin_as_the_library_computes_them():
    yarn = '{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}'
    result = run("rope", "5", "8", "--start", "1000", "--rope-parameters", yarn,
                 "--dtype", "float32", "--format", "csv")  # fmt: skip
    assert result.returncode == 0, result.stderr
    cos, sin = cpe.rope_cos_sin(
        5, 8, start=1000, dtype=np.float32, rope_parameters=json.loads(yarn)
    )
    np.testing.assert_array_equal(_csv(result.stdout, np.float32), np.concatenate([cos, sin]))
    text = run("rope", "0,2", "4", "--layout", "interleaved").stdout
    assert text.startswith("cos =\n")
    assert "\nsin =\n" in text


def test_rope_position_ids_from_a_file(tmp_path):
    ids = np.random.default_rng(0).integers(0, 100, (3, 2, 5))
    np.save(tmp_path / "ids.npy", ids)
    (tmp_path / "rope.json").write_text('{"mrope_section": [1, 1, 2]}')
    result = subprocess.run(
        [str(SCRIPT), "rope", "ids.npy", "8", "--rope-parameters", "@rope.json",
         "--output", "cs.npz"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    saved = np.load(tmp_path / "cs.npz")
    cos, sin = cpe.rope_cos_sin(ids, 8, rope_parameters={"mrope_section": [1, 1, 2]})
    np.testing.assert_array_equal(saved["cos"], cos)
    np.testing.assert_array_equal(saved["sin"], sin)
    flux = np.array([[0, 1, 2], [0, 3, 4]])
    np.save(tmp_path / "flux.npy", flux)
    result = subprocess.run(
        [str(SCRIPT), "rope", "flux.npy", "8", "--axes-dim", "2,2,4", "--output", "both.npy"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    want = cpe.rope_cos_sin(flux, 8, axes_dim=(2, 2, 4))
    np.testing.assert_array_equal(np.load(tmp_path / "both.npy"), np.stack(want))


def test_help_and_version():
    for command in ([], ["encode"], ["table"], ["plot"], ["grid"], ["rope"], ["bench"]):
        result = run(*command, "--help")
        assert result.returncode == 0
        assert "usage: cpe" in result.stdout
    result = run("--version")
    assert result.stdout.strip() == f"cpe {cpe.__version__}"


def png_size(path: pathlib.Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


@pytest.mark.parametrize("curves", [None, "0,1,6,7"])
def test_plot_writes_a_png_of_the_requested_size(tmp_path, curves):
    pytest.importorskip("matplotlib")
    target = tmp_path / "pe.png"
    extra = ["--curves", curves] if curves else []
    result = run("plot", "64", "32", "--output", str(target), "--size", "640x480", *extra)
    assert result.returncode == 0, result.stderr
    assert png_size(target) == (640, 480)


def test_plot_without_matplotlib_says_what_to_install(tmp_path):
    # A stand-in package that fails to import, first on the path: the command
    # must behave as if matplotlib were not installed.
    blocker = tmp_path / "blocker" / "matplotlib"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('blocked for this test')\n")
    env = {**os.environ, "PYTHONPATH": str(blocker.parent)}
    result = run("plot", "8", "8", "--output", str(tmp_path / "pe.png"), env=env)
    assert result.returncode == 1
    assert "pip install matplotlib" in result.stderr
    assert "Traceback" not in result.stderr


README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


@pytest.mark.skipif(
    not README.exists(), reason="README.md is not beside the tests (installed elsewhere)"
)
def test_readme_command_lines_run(tmp_path):
    pytest.importorskip("matplotlib")
    section = README.read_text().split("## Command line", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    # As a shell reads them (quoted JSON included); comments start at " #".
    commands = [shlex.split(line.split(" #", 1)[0]) for line in block.splitlines() if line.strip()]
    assert commands
    assert all(command[0] == "cpe" for command in commands)
    ran = 0
    for command in commands:
        if command[1] == "bench":
            continue  # minutes long; .ci/stages/40-benchmark-smoke.sh runs it
        result = subprocess.run(
            [str(SCRIPT), *command[1:]], capture_output=True, text=True, cwd=tmp_path, timeout=120
        )
        assert result.returncode == 0, (command, result.stderr)
        ran += 1
    assert ran >= 5
    assert run("encode", "0", "4").stdout.strip() == "[0. 1. 0. 1.]"


def test_a_closed_pipe_ends_the_command_quietly():
    # `cpe table ... | head -1`: the reader goes away after one line.
    process = subprocess.Popen(
        [str(SCRIPT), "table", "5000", "8"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None
    assert process.stderr is not None
    process.stdout.readline()
    process.stdout.close()
    stderr = process.stderr.read().decode()
    process.stderr.close()
    process.wait(timeout=120)
    assert "Traceback" not in stderr
    assert "error" not in stderr
    assert process.returncode == 1


def test_txt_output_reads_back(tmp_path):
    target = tmp_path / "pe.txt"
    assert run("table", "5", "6", "--output", str(target)).returncode == 0
    np.testing.assert_array_equal(np.loadtxt(target), cpe.positional_encoding_table(5, 6))


@pytest.mark.parametrize("command", [["table", "9", "6", "--start", "5"], ["rope", "9", "6"]])
def test_bfloat16_text_reads_back_exactly(tmp_path, command):
    bf16 = pytest.importorskip("ml_dtypes").bfloat16
    target = tmp_path / "pe.txt"
    result = run(*command, "--dtype", "bfloat16", "--output", str(target))
    assert result.returncode == 0, result.stderr
    if command[0] == "table":
        expected = cpe.positional_encoding_table(9, 6, start=5, dtype="bfloat16")
    else:
        expected = np.concatenate(cpe.rope_cos_sin(9, 6, dtype="bfloat16"))
    assert np.loadtxt(target).astype(bf16).tobytes() == expected.tobytes()


@pytest.mark.parametrize("suffix", [".npy", ".npz"])
def test_bfloat16_is_refused_where_npy_would_lose_it(tmp_path, suffix):
    pytest.importorskip("ml_dtypes")
    target = tmp_path / f"pe{suffix}"
    result = run("table", "4", "8", "--dtype", "bfloat16", "--output", str(target))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert f"a {suffix} file cannot hold bfloat16" in result.stderr
    assert not target.exists()


def test_bfloat16_without_ml_dtypes_is_a_one_line_error():
    script = (
        WITHOUT_ML_DTYPES
        + """from cpe._cli import main
sys.exit(main(["encode", "3", "8", "--dtype", "bfloat16"]))
"""
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr == (
        "cpe encode: error: dtype='bfloat16' needs the ml_dtypes package, which gives NumPy "
        "its bfloat16 dtype: pip install ml_dtypes\n"
    )


def one_line_error(result: subprocess.CompletedProcess[str], text: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert text in result.stderr


def test_positions_of_too_many_dimensions_are_a_one_line_error(tmp_path):
    # cos and sin of 63-dimensional ids are 64-dimensional each: stacked, one
    # more than NumPy allows (an IndexError's traceback).
    ids = tmp_path / "deep.npy"
    most = 64 if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else 32  # NumPy's limit
    np.save(ids, np.zeros((1,) * (most - 1)))
    one_line_error(run("rope", str(ids), "8"), "cos and sin together")


@pytest.mark.parametrize(
    ("options", "text"),
    [
        (["--seed", "-1"], "a seed is an integer >= 0"),
        (["--tables", "99999998x99999998"], "tables of at most"),
    ],
)
def test_bench_options_out_of_range_are_one_line_errors(options, text):
    one_line_error(run("bench", *options), text)


def test_bench_json_into_a_missing_folder_is_refused_before_running(tmp_path):
    # It was created, folders and all, after the run.
    target = tmp_path / "new" / "dir" / "results.json"
    one_line_error(run("bench", "--quick", "--json", str(target)), "does not exist")
    assert not (tmp_path / "new").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is Linux's")
def test_rope_parameters_too_large_to_read_are_a_one_line_error(tmp_path):
    # A MemoryError's traceback under a memory limit.
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (64 << 20))
    script = (
        "import os, resource, sys\n"
        "from cpe._cli import main\n"
        "held = int(open('/proc/self/statm').read().split()[0]) * os.sysconf('SC_PAGE_SIZE')\n"
        "resource.setrlimit(resource.RLIMIT_AS, (held + (32 << 20), resource.RLIM_INFINITY))\n"
        f"sys.exit(main(['rope', '4', '8', '--rope-parameters', '@{big}']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    one_line_error(result, "--rope-parameters: not a JSON object or @file.json")
