"""``attnum scan`` under real use: paths that cannot fool it, inputs that cannot stall it (issue #13).

Each case reproduces a failure of the scanner before the fix: a package under ``.venv`` read as 0
files and exit 0; one line of ``m = `` and 5,000 spaces took 459 s (cubic backtracking); a 50 MB file
split itself once per finding; ``-torch.finfo(x).max`` and Pallas' ``DEFAULT_MASK_VALUE`` went
unseen; a FIFO, an unreadable file or folder, a link loop or an empty folder passed as "0 files".
"""

import errno
import importlib.util
import json
import os

import _paths
import pytest

from attnum.audit.scan import scanner as scan_mod
from attnum.audit.scan.scanner import scan, scan_text
from attnum.cli import main

SENTINEL_PY = "s = s.masked_fill(~keep, -5e4)\n"
FINFO_PY = "s = s.masked_fill(~keep, torch.finfo(s.dtype).min)\n"


def found(src, python=True):
    return sorted({(f.line, f.rule) for f in scan_text(src, "x", python=python)})


def cli(args, capsys):
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code, err, *words):
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, err


# 1. Skip rules apply below the root only --------------------------------------------------------

@pytest.mark.parametrize("above", [".venv/lib/python3.11/site-packages", "venv/lib/site-packages",
                                   "node_modules/pkg", ".git/checkout", "__pycache__"])
def test_a_root_under_a_skipped_folder_is_read(tmp_path, above):
    pkg = tmp_path / above / "fakekern"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(FINFO_PY)
    (pkg / "attn.cu").write_text("s = masked ? -5e4f : s;\n")
    report = scan([pkg])
    assert report.files_scanned == 2
    assert {f.rule for f in report.findings} == {"finfo-mask-fill", "finite-mask-fill"}


def test_package_in_a_venv_and_skips_below_the_root(tmp_path, monkeypatch, capsys):
    site = tmp_path / ".venv" / "lib" / "python3.11" / "site-packages"
    pkg = site / "fakekern_venv"
    (pkg / ".venv" / "inner").mkdir(parents=True)
    (pkg / "__init__.py").write_text(SENTINEL_PY)
    (pkg / ".venv" / "inner" / "hidden.py").write_text(SENTINEL_PY)  # below the root: skipped, and said so
    monkeypatch.syspath_prepend(str(site))
    code, out, _ = cli(["scan", "--package", "fakekern_venv", "--json"], capsys)
    doc = json.loads(out)
    assert code == 1 and doc["files_scanned"] == 1
    assert [f["line"] for f in doc["findings"]] == [1]
    assert len(doc["skipped"]) == 1 and ".venv" in doc["skipped"][0]


def test_real_transformers_package_is_read():
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed")
    report = scan(scan_mod.package_paths("transformers.models.gpt_neo"))
    assert report.files_scanned >= 2
    fills = [f for f in report.findings if f.rule == "finfo-mask-fill"]
    assert fills and all(f.severity == "low" for f in fills)  # attn_weights = torch.where(..., mask_value)


# 2. Pathological lines and big files: scanned whole, exactly ---------------------------------------
# Linear time (ten such lines cost about ten times one; an 8x larger file about 8x) is a speed figure:
# benchmarks/bench_scan.py measures it (--growth) against its targets. Here: the same inputs, whose
# findings must come out as the sum of their parts (a test that never finishes hits the suite's hang guard).

_spec = importlib.util.spec_from_file_location("bench_scan", _paths.ROOT / "benchmarks" / "bench_scan.py")
bench_scan = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_scan)
PATHOLOGICAL = bench_scan.PATHOLOGICAL


@pytest.mark.parametrize("name", PATHOLOGICAL)
@pytest.mark.parametrize("python", [True, False], ids=["py", "cu"])
def test_pathological_lines_are_scanned_line_by_line(name, python):
    """Ten copies of a pathological line: each copy has the findings of the line alone, on its own line
    (rules that read the lines before may add more: a softcap after a mask)."""
    line = PATHOLOGICAL[name]
    one = {rule for _, rule in found(line, python=python)}
    ten = found("\n".join([line] * 10), python=python)
    assert {n for n, _ in ten} <= set(range(1, 11)), ten
    for n in range(1, 11):
        assert one <= {rule for m, rule in ten if m == n}, (n, one, ten)


def test_a_long_line_is_seen_whole():
    """No length cap: a finding at the far end of a 1 MB line is reported."""
    assert found("x = 1;" + " " * 1_000_000 + "m_i = -1e30;", python=False) == [(1, "finite-running-max-init")]


def test_big_file_with_exact_line_numbers(tmp_path):
    """Every line number of an 8 MB file is exact to the end (the scan's speed on such files:
    benchmarks/bench_scan.py)."""
    unit = bench_scan.UNIT
    reps = 8_000_000 // len(unit) + 1
    path = tmp_path / "big.py"
    path.write_text(unit * reps)
    report = scan([path])
    lines_per_unit = unit.count("\n")
    assert len(report.findings) == 2 * reps
    last = report.findings[-2:]
    assert [(f.line, f.rule) for f in last] == [((reps - 1) * lines_per_unit + 2, "finite-inf-constant"),
                                                ((reps - 1) * lines_per_unit + 5, "finite-mask-fill")]


@pytest.mark.parametrize("sep", ["\f", "\v", "\x1c", "\u2028", "\x85"])
def test_line_numbers_count_newlines_only(sep):
    assert found(f"x = 1{sep}y = 2\nMASK_VALUE = -5e4\n") == [(2, "finite-inf-constant")]


def test_crlf_and_cr_line_ends():
    assert found("x = 1\r\ny = 2\rMASK_VALUE = -5e4\r\n") == [(3, "finite-inf-constant")]


# 3. finfo-derived fills and named mask constants -------------------------------------------------

@pytest.mark.parametrize("src,expected", [
    ("s = s.masked_fill(~m, -torch.finfo(s.dtype).max)", [(1, "finfo-mask-fill")]),
    ("s = torch.where(m, s, torch.finfo(dtype).min)", [(1, "finfo-mask-fill")]),
    ("s = jnp.where(m, s, jnp.finfo(s.dtype).min)", [(1, "finfo-mask-fill")]),
    ("s = np.where(m, s, np.finfo(np.float32).min)", [(1, "finfo-mask-fill")]),
    ("x.fill_(torch.finfo(x.dtype).min)", [(1, "finfo-mask-fill")]),
    ("c = torch.full((n, n), fill_value=torch.finfo(dtype).min, dtype=dtype)", [(1, "finfo-mask-fill")]),
    ("m_i = jnp.zeros(n) + -jnp.finfo(jnp.float32).max", [(1, "finfo-running-max-init")]),
    ("s = torch.where(m, s, -torch.finfo(np.dtype(\"float32\")).max)", [(1, "finfo-mask-fill")]),
    # Pallas: a named constant, then its use through a parameter default.
    ("DEFAULT_MASK_VALUE = -0.7 * float(np.finfo(np.dtype(\"float32\")).max)\n"
     "def kernel(q, k, mask_value: float = DEFAULT_MASK_VALUE):\n"
     "    qk = jnp.where(mask, qk, DEFAULT_MASK_VALUE)\n"
     "    s = jnp.where(mask, s, mask_value)\n",
     [(1, "finfo-inf-constant"), (3, "finfo-mask-fill"), (4, "finfo-mask-fill")]),
    # transformers: a local name, then a fill through a keyword argument.
    ("min_dtype = torch.finfo(dtype).min\n"
     "causal_mask = torch.full((n, s), fill_value=min_dtype, dtype=dtype)\n"
     "causal_mask = causal_mask.masked_fill(pad, min_dtype)\n",
     [(2, "finfo-mask-fill"), (3, "finfo-mask-fill")]),
    ("mask_value = torch.finfo(s.dtype).min\n", [(1, "finfo-inf-constant")]),
], ids=lambda x: x if isinstance(x, str) and len(x) < 40 else None)
def test_finfo_derived_fills(src, expected):
    assert found(src) == expected
    assert all(f.severity == "low" for f in scan_text(src, "x", python=True) if f.rule.startswith("finfo-")
               and f.rule != "finfo-min-additive")


@pytest.mark.parametrize("src", [
    "eps = torch.finfo(x.dtype).eps",
    "tiny = np.finfo(np.float32).tiny",
    "x = x.clamp(min=torch.finfo(x.dtype).min)",
    "m = torch.finfo(x.dtype).max",
    "s = torch.where(m, s, float('-inf'))",
    "semantic_infer_token = 129_599",
    "max_inference_chunksize: int = 16384",
])
def test_finfo_and_name_negatives(src):
    assert found(src) == []


def test_c_lowest_and_numeric_limits_max():
    src = "s = m ? s : std::numeric_limits<float>::lowest();\nfloat m = -std::numeric_limits<float>::max();\n"
    assert found(src, python=False) == [(1, "finite-mask-fill"), (2, "finite-running-max-init"),
                                        (2, "flt-max-fill")]


def test_line_comment_holding_block_opener_hides_nothing():
    """``// see /*`` is a line comment; the next line is code."""
    assert found("// see /* below\nfloat m_i = -1e30f;\n", python=False) == [(2, "finite-running-max-init")]


# 4. An unreadable path is an error, never "0 files" ----------------------------------------------

def test_missing_path_and_empty_string(tmp_path, capsys):
    assert_one_line_error(*cli(["scan", str(tmp_path / "nope")], capsys)[::2], "does not exist")
    assert_one_line_error(*cli(["scan", ""], capsys)[::2], "path=''")


def test_fifo_is_refused_without_blocking(tmp_path, capsys):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    os.mkfifo(tmp_path / "pipe.py")
    assert_one_line_error(*cli(["scan", str(tmp_path / "pipe.py")], capsys)[::2], "pipe.py", "FIFO")
    (tmp_path / "ok.py").write_text("x = 1\n")
    assert_one_line_error(*cli(["scan", str(tmp_path)], capsys)[::2], "pipe.py", "FIFO")


def test_fifo_swapped_in_after_listing_is_refused_by_fstat(tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    os.mkfifo(tmp_path / "late.py")
    with pytest.raises(scan_mod.AttnumInputError, match="FIFO"):
        scan_mod.read_source(tmp_path / "late.py")


def test_unreadable_file(tmp_path, monkeypatch, capsys):
    bad = tmp_path / "secret.py"
    bad.write_text(SENTINEL_PY)
    (tmp_path / "fine.py").write_text(SENTINEL_PY)
    real_open = os.open

    def refuse(path, *a, **k):  # CI runs as root: chmod cannot make a file unreadable
        if os.fspath(path) == str(bad):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *a, **k)

    monkeypatch.setattr(os, "open", refuse)
    assert_one_line_error(*cli(["scan", str(tmp_path)], capsys)[::2], "secret.py", "permission denied")


def test_folder_that_cannot_be_listed(tmp_path, monkeypatch, capsys):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "k.py").write_text(SENTINEL_PY)
    (tmp_path / "top.py").write_text("x = 1\n")
    real_scandir = os.scandir

    def refuse(path="."):
        if os.fspath(path) == str(tmp_path / "sub"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", refuse)
    assert_one_line_error(*cli(["scan", str(tmp_path)], capsys)[::2], "list folder", "sub", "permission denied")


def test_symlink_loops(tmp_path, capsys):
    os.symlink("loop.py", tmp_path / "loop.py")
    assert_one_line_error(*cli(["scan", str(tmp_path / "loop.py")], capsys)[::2], "loop.py", "symbolic-link loop")
    assert_one_line_error(*cli(["scan", str(tmp_path)], capsys)[::2], "loop.py", "symbolic-link loop")


def test_link_back_up_the_tree_is_read_once(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "k.py").write_text(SENTINEL_PY)
    os.symlink(tmp_path, tmp_path / "a" / "up")
    report = scan([tmp_path])
    assert report.files_scanned == 1 and len(report.findings) == 1
    assert any("already scanned" in s for s in report.skipped)


def test_broken_link_named_as_source_is_an_error(tmp_path, capsys):
    os.symlink(tmp_path / "gone.py", tmp_path / "k.py")
    assert_one_line_error(*cli(["scan", str(tmp_path)], capsys)[::2], "k.py", "broken symbolic link")


def test_undecodable_bytes_are_replaced_and_scanned(tmp_path, capsys):
    (tmp_path / "latin1.cu").write_bytes(b"// caf\xe9 \xff\xfe\nfloat m_i = -1e30f;\n")
    code, out, _ = cli(["scan", str(tmp_path)], capsys)
    assert code == 1 and "latin1.cu:2" in out


@pytest.mark.parametrize("layout", ["empty", "no-sources", "only-skipped"])
def test_a_scan_that_reads_nothing_exits_2(tmp_path, layout, capsys):
    if layout == "no-sources":
        (tmp_path / "README.md").write_text("MASK_VALUE = -5e4\n")
    elif layout == "only-skipped":
        (tmp_path / "node_modules").mkdir()
        (tmp_path / "node_modules" / "k.py").write_text(SENTINEL_PY)
    assert_one_line_error(*cli(["scan", str(tmp_path)], capsys)[::2], "no source files under")


def test_a_non_source_file_named_directly_is_refused(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text(SENTINEL_PY)
    assert_one_line_error(*cli(["scan", str(tmp_path / "notes.txt")], capsys)[::2], "not a source file")


@pytest.mark.parametrize("name,word", [("no_such_package_xyz", "not installed"), ("sys", "built-in"),
                                       ("a b", "package name")])
def test_package_that_cannot_be_scanned(name, word, capsys):
    assert_one_line_error(*cli(["scan", "--package", name], capsys)[::2], word)


def test_package_whose_parent_raises_on_import(tmp_path, monkeypatch, capsys):
    (tmp_path / "boompkg").mkdir()
    (tmp_path / "boompkg" / "__init__.py").write_text("raise RuntimeError('no GPU here')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert_one_line_error(*cli(["scan", "--package", "boompkg.sub"], capsys)[::2], "boompkg.sub", "no GPU here")


# 5. Strict JSON and checked flags ----------------------------------------------------------------

def test_json_is_strict_and_flags_are_checked(tmp_path, capsys):
    (tmp_path / "k.py").write_text(FINFO_PY + SENTINEL_PY)

    def no_constants(word):
        raise AssertionError(f"non-JSON constant {word}")

    code, out, _ = cli(["scan", str(tmp_path), "--json"], capsys)
    doc = json.loads(out, parse_constant=no_constants)
    assert code == 1 and doc["files_scanned"] == 1 and doc["skipped"] == []
    assert [(f["line"], f["rule"], f["severity"]) for f in doc["findings"]] == [
        (1, "finfo-mask-fill", "low"), (2, "finite-mask-fill", "high")]
    assert cli(["scan", str(tmp_path), "--min-severity", "medium"], capsys)[0] == 1
    assert_one_line_error(*cli(["scan", str(tmp_path), "--min-severity", "HIGH"], capsys)[::2], "--min-severity")
