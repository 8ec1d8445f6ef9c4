"""Replay every attack of issue 13 ("Trustworthy under real use"), issue 19 ("Nothing lost, nothing
forged, round 3"), issue 32 ("Nothing forged, round 4") and issue 42 ("Nothing forged, round 5") against
this checkout's CLI.

Each attack is one thing a new user, a hostile kernel or a bad machine does; each has the behaviour
the issue asks for. The script runs them all in fresh processes (``python -m attnum ...``, the
command a user types), prints one line per attack (``ok`` or ``BAD`` with what was seen) and the
count, and exits 1 if any misbehaved. It is the closing note's count, and it runs from a fresh
clone: ``. .venv/bin/activate && python scripts/replay_attacks.py`` (about 14 minutes on 2 loaded cores;
``python scripts/replay_attacks.py round3`` runs issue 19's first 22 alone, about 4 minutes, and
``python scripts/replay_attacks.py kserver`` the 17 on the kernel server, about 5 minutes;
``python scripts/replay_attacks.py round4`` issue 32's cases; ``python scripts/replay_attacks.py round7``
issue 42's cases of the tensor-core model, the CLI's stdout, built-in targets, ``sum_decode`` and the
report, the fingerprint's, and the attacks on the surfaces of that turn; ``... surfaces`` those last alone:
the bug corpus, versioned targets, the address checks and the fingerprint's families).

The pytest suite covers the same ground case by case (tests/robust/test_robust_*.py, and for issue 42
tests/robust/test_robust_round5_forged.py and tests/numerics/mma/test_mma_mixed_operands.py); this is
the end-to-end view of the issue's list, in its order.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from _sweep_helpers import TINY_SPEC as _TWO_SEEDS  # noqa: E402 - the test suite's tiny spec
from _sweep_helpers import descendants  # noqa: E402 - every live process below a pid

TINY_SPEC = _TWO_SEEDS.replace("seed = [0, 1]", "seed = [0, 1, 2, 3]")  # 64 points, ~7 s
KILL_SPEC = TINY_SPEC.replace("seq_len = [48, 80]", "seq_len = [1024, 2048, 4096]").replace(
    "seed = [0, 1, 2, 3]", "seed = [0, 1, 2, 3, 4, 5, 6, 7]")  # long enough to be killed mid-run
CHEAP = ["--dtype", "bf16", "--probes", "odd-lengths,scale-argument"]
ATTACKS: list[tuple[str, str, Callable[[Path], tuple[bool, str]]]] = []


def attack(section: str, name: str):
    def register(fn):
        ATTACKS.append((section, name, fn))
        return fn
    return register


def env() -> dict[str, str]:
    e = dict(os.environ, OMP_NUM_THREADS="1", ATTNUM_PROGRESS_INTERVAL="1")
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), e.get("PYTHONPATH")]))
    return e


def cli(*args: str, cwd: Path, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "attnum", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, **{"env": env(), **kw})


def popen(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "attnum", *map(str, args)], cwd=cwd, env=env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def one_line_error(p: subprocess.CompletedProcess, code: int = 2, *must: str, after_progress: bool = False
                   ) -> tuple[bool, str]:
    """Exit ``code``, exactly one stderr line, no traceback, and each of ``must`` in that line.
    ``after_progress``: a run that had started may have printed progress lines before its error."""
    lines = p.stderr.strip().splitlines()
    if after_progress:
        lines = [ln for ln in lines if ln.startswith("attnum: error:")] if lines and lines[-1].startswith("attnum: error:") else lines
    ok = (p.returncode == code and len(lines) == 1 and "Traceback" not in p.stderr + p.stdout
          and all(m in lines[0] for m in must))
    return ok, f"exit {p.returncode}: {lines[-1] if lines else '(no stderr)'}"[:160]


def strict_json(text: str) -> object:
    def refuse(c):
        raise ValueError(f"bare {c} in JSON")
    return json.loads(text, parse_constant=refuse)


def target(tmp: Path, name: str, body: str) -> str:
    path = tmp / f"{name}.py"
    path.write_text("import torch\nimport torch.nn.functional as F\n" + body)
    return f"{path}:attention"


SDPA = "def attention(q, k, v, **kw):\n    return F.scaled_dot_product_attention(q, k, v, **kw)\n"


# -- 1. the auditor ---------------------------------------------------------------------------------

@attack("audit", "target calls sys.exit(0) at import (with --json)")
def _(tmp):
    t = target(tmp, "exit_import", "import sys\nsys.exit(0)\n" + SDPA)
    p = cli("audit", t, *CHEAP, "--json", cwd=tmp)
    try:
        doc = strict_json(p.stdout)
        statuses = {r["verdict"] for r in doc["probes"]}
    except (ValueError, KeyError, TypeError) as why:
        return False, f"exit {p.returncode}, stdout not strict JSON: {why}"
    return p.returncode == 1 and "exited" in statuses, f"exit {p.returncode}, statuses {sorted(statuses)}"


@attack("audit", "target calls sys.exit(0) inside a probe")
def _(tmp):
    t = target(tmp, "exit_probe", "import sys\ndef attention(q, k, v, **kw):\n    sys.exit(0)\n")
    p = cli("audit", t, *CHEAP, cwd=tmp)
    return p.returncode == 1 and "exited" in p.stdout, f"exit {p.returncode}"


@attack("audit", "target calls os._exit(0) inside a probe")
def _(tmp):
    t = target(tmp, "os_exit", "import os\ndef attention(q, k, v, **kw):\n    os._exit(0)\n")
    p = cli("audit", t, *CHEAP, cwd=tmp)
    return p.returncode == 1 and "exited" in p.stdout, f"exit {p.returncode}"


@attack("audit", "target segfaults; the audit continues to the next probe")
def _(tmp):
    t = target(tmp, "segv", "import ctypes\ndef attention(q, k, v, **kw):\n"
                            "    if q.shape[-2] == 2:\n        ctypes.string_at(0)\n"
                            "    return F.scaled_dot_product_attention(q, k, v, **kw)\n")
    p = cli("audit", t, *CHEAP, "--json", cwd=tmp)
    try:
        rows = {r["name"]: r["verdict"] for r in strict_json(p.stdout)["probes"]}
    except (ValueError, KeyError, TypeError) as why:
        return False, f"exit {p.returncode}: {why}"
    ok = p.returncode == 1 and rows.get("odd-lengths") == "crashed" and rows.get("scale-argument") == "pass"
    return ok, f"exit {p.returncode}, rows {rows}"


@attack("audit", "target hangs: a per-case timeout, then the next probe")
def _(tmp):
    t = target(tmp, "hang", "import time\ndef attention(q, k, v, **kw):\n"
                            "    if q.shape[-2] == 2:\n        time.sleep(3600)\n"
                            "    return F.scaled_dot_product_attention(q, k, v, **kw)\n")
    t0 = time.perf_counter()
    p = cli("audit", t, *CHEAP, "--timeout", "5", "--json", cwd=tmp)
    rows = {r["name"]: r["verdict"] for r in strict_json(p.stdout)["probes"]} if p.stdout.strip() else {}
    wall = time.perf_counter() - t0
    return p.returncode == 1 and rows.get("odd-lengths") == "timed out" and wall < 120, f"exit {p.returncode}, {rows}, {wall:.0f}s"


@attack("audit", "target refuses every case: nothing tested (exit 3), never PASSED")
def _(tmp):
    t = target(tmp, "refuse", "def attention(q, k, v, **kw):\n    raise NotImplementedError('no')\n")
    p = cli("audit", t, *CHEAP, cwd=tmp)
    return p.returncode == 3 and "PASSED" not in p.stdout, f"exit {p.returncode}"


@attack("audit", "target returns float64 for bf16 inputs")
def _(tmp):
    t = target(tmp, "f64", "def attention(q, k, v, **kw):\n"
                           "    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), **kw)\n")
    p = cli("audit", t, *CHEAP, cwd=tmp)
    return p.returncode == 1 and "dtype" in p.stdout, f"exit {p.returncode}"


DECODE_F64 = """
from attnum.kernels.registry import resolve
from attnum.kernels.serving import ServingTarget
_ref = resolve("decode:fa2").fn
def _decode(*a, **kw):
    res = _ref.decode(*a, **kw)
    return (res[0].double(), res[1]) if isinstance(res, tuple) else res.double()
attention = ServingTarget("decode-f64", merge_state=_ref.merge_state, decode=_decode)
"""


@attack("audit", "a decode kernel returns float64 for bf16 inputs (the serving entry points are checked too)")
def _(tmp):
    t = target(tmp, "decode_f64", DECODE_F64)
    p = cli("audit", t, "--dtype", "bf16", "--probes", "page-padding-leak", "--json", cwd=tmp)
    rows = {r["name"]: r for r in strict_json(p.stdout)["probes"]} if p.stdout.strip() else {}
    row = rows.get("page-padding-leak", {})
    ok = p.returncode == 1 and row.get("verdict") == "fail" and "decode output dtype torch.float64" in row.get("note", "")
    return ok, f"exit {p.returncode}, {row.get('verdict')}: {row.get('note', '')[:80]}"


BOTTOM_RIGHT = """
import attnum
def attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    out = attnum.golden_attention(q, k, v, is_causal=is_causal, scale=scale,
                                  causal_alignment="bottom_right" if is_causal else "top_left")
    return out.to(q.dtype)
attention.attnum_causal_alignment = "bottom_right"
"""


@attack("audit", "batch-invariance: a correct bottom-right kernel (declared) is not a false alarm")
def _(tmp):
    p = cli("audit", target(tmp, "br", BOTTOM_RIGHT), "--dtype", "fp32", "--probes", "batch-invariance", cwd=tmp)
    return p.returncode == 0, f"exit {p.returncode}"


@attack("audit", "moderate float bias: a kernel adding the bias before the scale fails")
def _(tmp):
    t = target(tmp, "bias_first", "import math\ndef attention(q, k, v, attn_mask=None, is_causal=False, scale=None, **kw):\n"
                                   "    s = scale if scale is not None else 1 / math.sqrt(q.shape[-1])\n"
                                   "    x = q.float() @ k.float().transpose(-1, -2)\n"
                                   "    if attn_mask is not None and attn_mask.dtype != torch.bool:\n"
                                   "        x = x + attn_mask.float()\n"
                                   "    elif attn_mask is not None:\n"
                                   "        x = x.masked_fill(~attn_mask, -math.inf)\n"
                                   "    return (torch.softmax(x * s, -1) @ v.float()).to(q.dtype)\n")
    p = cli("audit", t, "--dtype", "fp32", "--probes", "float-bias", cwd=tmp)
    return p.returncode == 1 and "fail" in p.stdout, f"exit {p.returncode}"


@attack("audit", "extreme-value probes run at N = S = a tile multiple; gradient probes at N % 128 == 0")
def _(tmp):
    p = cli("audit", "torch-sdpa-math", "--dtype", "bf16", "--probes", "qk-overflow,grad-tile-tail", "--json", cwd=tmp)
    labels = {r["name"]: " ".join(c["label"] for c in r.get("cases", [])) for r in strict_json(p.stdout)["probes"]}
    ok = p.returncode == 0 and "128" in labels.get("qk-overflow", "") and "128" in labels.get("grad-tile-tail", "")
    return ok, f"exit {p.returncode}, labels: {labels}"[:160]


# -- 2. the scanner ---------------------------------------------------------------------------------

@attack("scan", "a folder under .venv/ is scanned (skip rules apply only below the root)")
def _(tmp):
    pkg = tmp / ".venv" / "lib" / "site-packages" / "kern"
    pkg.mkdir(parents=True)
    (pkg / "k.py").write_text("MASK_VALUE = -5e4\n")
    p = cli("scan", pkg, cwd=tmp)
    return p.returncode == 1 and "k.py:1" in p.stdout, f"exit {p.returncode}: {p.stdout.strip().splitlines()[-1:]}"


@attack("scan", "a pathological line ('m = ' + 5,000 spaces) in linear time")
def _(tmp):
    (tmp / "p.py").write_text("m = " + " " * 5000 + "\n" + "x = (" * 2000 + "\n" + "-" * 20000 + "1e\n")
    t0 = time.perf_counter()
    p = cli("scan", tmp / "p.py", cwd=tmp, timeout=120)
    wall = time.perf_counter() - t0
    return p.returncode in (0, 1) and wall < 20, f"exit {p.returncode} in {wall:.1f}s (was 459 s)"


@attack("scan", "a 50 MB file in bounded time, line numbers right")
def _(tmp):
    line = "    x = torch.where(mask, scores, scores)  # plain\n"
    n = 50_000_000 // len(line)
    (tmp / "big.py").write_text(line * n + "neg = -50000.0\ns = s.masked_fill(m, neg)\n")
    t0 = time.perf_counter()
    p = cli("scan", tmp / "big.py", cwd=tmp, timeout=600)
    wall = time.perf_counter() - t0
    ok = p.returncode == 1 and f"big.py:{n + 2}:" in p.stdout and wall < 120
    return ok, f"exit {p.returncode} in {wall:.1f}s (was 157 s)"


@attack("scan", "finfo-derived fills and named mask constants are found")
def _(tmp):
    (tmp / "f.py").write_text("import numpy as np, torch\n"
                              "s = s.masked_fill(~m, -torch.finfo(s.dtype).max)\n"
                              "DEFAULT_MASK_VALUE = -0.7 * float(np.finfo(np.dtype('float32')).max)\n")
    p = cli("scan", tmp / "f.py", cwd=tmp)
    return p.returncode == 1 and "f.py:2:" in p.stdout and "f.py:3:" in p.stdout, f"exit {p.returncode}"


@attack("scan", "a mask constant behind a conditional expression (NEG_INF = -1e4 if half else -1e9)")
def _(tmp):
    (tmp / "c.py").write_text("NEG_INF = -1e4 if half else -1e9\ns = s.masked_fill(~m, NEG_INF)\n")
    p = cli("scan", tmp / "c.py", cwd=tmp)
    return p.returncode == 1 and "c.py:1:" in p.stdout and "c.py:2:" in p.stdout, f"exit {p.returncode}"


@attack("scan", "an unreadable (missing) path is exit 2, never '0 files'")
def _(tmp):
    return one_line_error(cli("scan", tmp / "nope", cwd=tmp), 2, "nope")


@attack("scan", "a folder with no source files is exit 2, never '0 files, exit 0'")
def _(tmp):
    (tmp / "empty").mkdir()
    return one_line_error(cli("scan", tmp / "empty", cwd=tmp), 2)


@attack("scan", "--package transformers from inside a venv reads files")
def _(tmp):
    p = cli("scan", "--package", "transformers", "--json", cwd=tmp, timeout=600)
    if p.returncode == 2 and "not installed" in p.stderr:
        return True, "transformers not installed here (exit 2, one line)"
    try:
        n = strict_json(p.stdout)["files_scanned"]
    except (ValueError, KeyError) as why:
        return False, f"exit {p.returncode}: {why}"
    return p.returncode in (0, 1) and n > 100, f"exit {p.returncode}, {n} files"


# -- 3. the store and processes -----------------------------------------------------------------

def _spec(tmp: Path, text: str = TINY_SPEC) -> Path:
    (tmp / "spec.toml").write_text(text)
    return tmp / "spec.toml"


def _wait_rows(db: Path, n: int, limit: float = 120) -> None:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit:
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
                if c.execute("SELECT count(*) FROM points WHERE status='done'").fetchone()[0] >= n:
                    return
        except sqlite3.Error:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"fewer than {n} rows after {limit}s")


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid or int(fields[2]) == pid:  # parent, or process group
                out.append(int(d.name))
    return out


@attack("store", "two sweeps on one --out: the second is refused, naming the first")
def _(tmp):
    first = popen("sweep", _spec(tmp), "--out", "o", "--jobs", "2", cwd=tmp)
    try:
        _wait_rows(tmp / "o" / "attnum.sqlite", 1)
        second = cli("sweep", tmp / "spec.toml", "--out", "o", cwd=tmp)
        return one_line_error(second, 2, str(first.pid))
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=120)


@attack("store", "SIGTERM to a sweep on a local Ray instance: exit 130, run interrupted, Ray's processes gone")
def _(tmp):
    try:
        import ray  # noqa: F401 - only whether the extra is here
    except ImportError:
        return True, "skipped: the ray extra is not installed"
    p = popen("sweep", _spec(tmp, KILL_SPEC), "--out", "o", "--jobs", "2", "--executor", "ray", cwd=tmp)
    _wait_rows(tmp / "o" / "attnum.sqlite", 1)
    kids = descendants(p.pid)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    deadline = time.time() + 30
    alive = kids
    while alive and time.time() < deadline:
        alive = [k for k in kids if Path(f"/proc/{k}").exists()
                 and "Z" not in Path(f"/proc/{k}/stat").read_text().rsplit(")", 1)[1][:3]]
        time.sleep(0.5)
    for k in alive:
        os.kill(k, signal.SIGKILL)
    with sqlite3.connect(f"file:{tmp / 'o' / 'attnum.sqlite'}?mode=ro", uri=True) as c:
        statuses = [r[0] for r in c.execute("SELECT status FROM runs")]
    ok = p.returncode == 130 and statuses == ["interrupted"] and not alive and "Traceback" not in err
    return ok, f"exit {p.returncode}; runs {statuses}; {len(kids)} processes below, {len(alive)} alive 30 s later"


@attack("store", "two diverges on one --out: the second is refused, naming the first")
def _(tmp):
    first = popen("diverge", "--steps", "5000", "--ckpt-every", "2500", "--seeds", "0,1", "--out", "d", cwd=tmp)
    try:
        deadline = time.time() + 120
        while not (tmp / "d" / "attnum.lock").exists() and first.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        second = cli("diverge", "--steps", "2", "--ckpt-every", "1", "--seeds", "0,1", "--out", "d", cwd=tmp)
        return one_line_error(second, 2, "in use by", str(first.pid))
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=120)


@attack("store", "SIGKILL with --jobs 2: no worker survives, attnum.sqlite alone has the rows, run shows killed")
def _(tmp):
    p = popen("sweep", _spec(tmp, KILL_SPEC), "--out", "o", "--jobs", "2", cwd=tmp)
    db = tmp / "o" / "attnum.sqlite"
    _wait_rows(db, 4)
    time.sleep(11)  # past one periodic checkpoint
    if p.poll() is not None:
        return False, "the sweep finished before it could be killed: make KILL_SPEC larger"
    kids = _children(p.pid)
    os.kill(p.pid, signal.SIGKILL)
    p.communicate(timeout=30)
    deadline = time.time() + 10
    alive = kids
    while alive and time.time() < deadline:
        alive = [k for k in kids if Path(f"/proc/{k}").exists() and "Z" not in Path(f"/proc/{k}/stat").read_text().rsplit(")", 1)[1][:3]]
        time.sleep(0.2)
    (tmp / "copy").mkdir()
    (tmp / "copy" / "attnum.sqlite").write_bytes(db.read_bytes())  # the main file alone, no -wal
    with sqlite3.connect(tmp / "copy" / "attnum.sqlite") as c:
        rows = c.execute("SELECT count(*) FROM points").fetchone()[0]
    runs = cli("runs", "o", cwd=tmp)
    ok = not alive and rows > 0 and "killed" in runs.stdout
    return ok, f"{len(kids)} workers, {len(alive)} alive after kill; copied file has {rows} rows; runs says killed: {'killed' in runs.stdout}"


@attack("store", "a failed point never replaces a finished one")
def _(tmp):
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from attnum.store.db import Store\n"
            "s = Store(sys.argv[2]); s.bind_spec(name='t', spec_hash='h', canonical={}, source='')\n"
            "s.plan([('k', 'compare', (), {})]); r = s.begin_run(command='t', n_todo=1, executor='x', jobs=1)\n"
            "s.write({'key': 'k', 'status': 'done', 'metrics': {'a': 1.0}}, r)\n"
            "s.write({'key': 'k', 'status': 'failed', 'error': 'boom'}, r)\n"
            "print([x['status'] for x in s.rows(status=None)])\n")
    (tmp / "o").mkdir()
    p = subprocess.run([sys.executable, "-c", code, str(ROOT / "src"), str(tmp / "o")], capture_output=True, text=True)
    return p.returncode == 0 and p.stdout.strip() == "['done']", f"exit {p.returncode}: {(p.stdout + p.stderr).strip()[-150:]}"


@attack("store", "--out x.sqlite is refused (a folder is required)")
def _(tmp):
    return one_line_error(cli("sweep", _spec(tmp), "--out", "x.sqlite", cwd=tmp), 2, "x.sqlite")


@attack("store", "another program's SQLite file is never touched")
def _(tmp):
    (tmp / "other").mkdir()
    db = tmp / "other" / "attnum.sqlite"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE accounts (id INTEGER, owner TEXT)")
    before = db.read_bytes(), db.stat().st_mtime_ns
    ok, seen = one_line_error(cli("sweep", _spec(tmp), "--out", "other", cwd=tmp), 2)
    return ok and (db.read_bytes(), db.stat().st_mtime_ns) == before and not (tmp / "other" / "attnum.lock").exists(), seen


@attack("store", "read-only commands (runs, export, report) leave the store's bytes and mtime alone")
def _(tmp):
    p = cli("sweep", _spec(tmp), "--out", "o", cwd=tmp)
    db = tmp / "o" / "attnum.sqlite"
    before = db.read_bytes(), db.stat().st_mtime_ns
    codes = [cli(*a, cwd=tmp).returncode for a in (("runs", "o"), ("export", "o", "-o", tmp / "x.csv"), ("report", "o"))]
    return p.returncode == 0 and codes == [0, 0, 0] and (db.read_bytes(), db.stat().st_mtime_ns) == before, f"exits {codes}"


# -- 4. tracebacks and unclear messages --------------------------------------------------------

@attack("cli", "--out is an existing file (sweep, reproduce, diverge)")
def _(tmp):
    (tmp / "f").write_text("x")
    res = [one_line_error(cli(*a, cwd=tmp), 2) for a in (("sweep", _spec(tmp), "--out", "f"),
                                                          ("reproduce", "--profile", "quick", "--out", "f"),
                                                          ("diverge", "--out", "f"))]
    return all(r[0] for r in res), "; ".join(r[1] for r in res)[:160]


@attack("cli", "-o names a directory (export writes into it; audit --html refuses)")
def _(tmp):
    cli("sweep", _spec(tmp), "--out", "o", cwd=tmp)
    (tmp / "d").mkdir()
    e = cli("export", "o", "-o", "d", cwd=tmp)
    a = cli("audit", "torch-sdpa-math", *CHEAP, "--html", "d", cwd=tmp)
    ok_a, seen = one_line_error(a, 2, "d")
    return e.returncode == 0 and (tmp / "d" / "points.csv").is_file() and ok_a, f"export exit {e.returncode}; audit {seen}"


@attack("cli", "a corrupt store: one line naming the file, for every command that opens one")
def _(tmp):
    (tmp / "bad").mkdir()
    (tmp / "bad" / "attnum.sqlite").write_bytes(b"this is not a database" * 100)
    cmds = (("runs", "bad"), ("export", "bad"), ("report", "bad"), ("sweep", _spec(tmp), "--out", "bad"),
            ("reproduce", "--profile", "quick", "--out", "bad"))
    res = [one_line_error(cli(*a, cwd=tmp), 2, "attnum.sqlite") for a in cmds]
    return all(r[0] for r in res), f"{sum(r[0] for r in res)}/{len(res)}: " + "; ".join(r[1] for r in res if not r[0])[:120]


@attack("cli", "a full disk (-o /dev/full) and a read-only one (/proc): one line")
def _(tmp):
    cli("sweep", _spec(tmp), "--out", "o", cwd=tmp)
    full = one_line_error(cli("export", "o", "-o", "/dev/full", cwd=tmp), 2)
    ro = one_line_error(cli("export", "o", "-o", "/proc/attnum.csv", cwd=tmp), 2)
    return full[0] and ro[0], f"{full[1]} | {ro[1]}"[:160]


def _mount_tmpfs(where: Path, options: str) -> bool:
    """A real small or read-only filesystem (root only; False where mounting is not permitted)."""
    where.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
                          capture_output=True).returncode == 0


def _umount(where: Path) -> None:
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


@attack("cli", "a real read-only filesystem (tmpfs remounted ro): readers work, a writer gets one line")
def _(tmp):
    mnt = tmp / "ro"
    if not _mount_tmpfs(mnt, "size=16m"):
        return True, "not run: mount is not permitted here (the /dev/full and monkeypatched tests stand)"
    try:
        first = cli("sweep", _spec(tmp), "--out", mnt / "o", cwd=tmp)
        if subprocess.run(["mount", "-o", "remount,ro", str(mnt)], capture_output=True).returncode:
            return False, "could not remount read-only"
        runs = cli("runs", mnt / "o", cwd=tmp)
        export = cli("export", mnt / "o", "-o", tmp / "x.csv", cwd=tmp)
        (tmp / "more.toml").write_text(TINY_SPEC.replace("seed = [0, 1, 2, 3]", "seed = [0, 1, 2, 3, 4]"))
        write = one_line_error(cli("sweep", tmp / "more.toml", "--out", mnt / "o", cwd=tmp), 2)
        ok = first.returncode == 0 and runs.returncode == 0 and export.returncode == 0 and write[0]
        return ok, f"runs exit {runs.returncode}, export exit {export.returncode}; sweep {write[1]}"
    finally:
        _umount(mnt)


@attack("cli", "a real full filesystem (a 1 MB tmpfs): one line, finished rows kept")
def _(tmp):
    mnt = tmp / "full"
    if not _mount_tmpfs(mnt, "size=1m"):
        return True, "not run: mount is not permitted here (the /dev/full and monkeypatched tests stand)"
    try:
        (tmp / "big.toml").write_text(TINY_SPEC.replace("seed = [0, 1, 2, 3]", f"seed = {list(range(64))}"))
        p = cli("sweep", tmp / "big.toml", "--out", mnt / "o", cwd=tmp)
        ok, seen = one_line_error(p, 2, "disk is full", after_progress=True)
        with sqlite3.connect(f"file:{mnt / 'o' / 'attnum.sqlite'}?mode=ro", uri=True) as c:
            rows = c.execute("SELECT count(*) FROM points WHERE status='done'").fetchone()[0]
        return ok and rows > 0, f"{seen}; {rows} done rows readable"
    finally:
        _umount(mnt)


@attack("cli", "compare --seq-len 10000000 is refused before allocating")
def _(tmp):
    t0 = time.perf_counter()
    ok, seen = one_line_error(cli("compare", "--seq-len", "10000000", cwd=tmp), 2, "memory")
    return ok and time.perf_counter() - t0 < 30, seen


@attack("cli", "--seed 99999999999999999999")
def _(tmp):
    return one_line_error(cli("compare", "--seed", "99999999999999999999", cwd=tmp), 2, "seed")


@attack("cli", "audit --k inf")
def _(tmp):
    return one_line_error(cli("audit", "torch-sdpa-math", "--k", "inf", cwd=tmp), 2, "k")


@attack("cli", "logit_scale = 1e308 (golden is non-finite): an error, not a result")
def _(tmp):
    return one_line_error(cli("compare", "--seq-len", "32", "--logit-scale", "1e308", cwd=tmp), 2, "logit_scale")


@attack("cli", "--json never prints bare NaN (audit of a kernel returning NaN)")
def _(tmp):
    t = target(tmp, "nan", "def attention(q, k, v, **kw):\n    return torch.full_like(q, float('nan'))\n")
    p = cli("audit", t, *CHEAP, "--json", cwd=tmp)
    try:
        doc = strict_json(p.stdout)
    except ValueError as why:
        return False, str(why)
    return p.returncode == 1 and "nonfinite" in json.dumps(doc), f"exit {p.returncode}"


@attack("cli", "diverge --checkpoints with an all-NaN tensor does not report max|dW| 0")
def _(tmp):
    code = ("import sys, torch; from safetensors.torch import save_file\n"
            "for name, fill in (('a', 1.0), ('b', float('nan'))):\n"
            "    import os; os.makedirs(name, exist_ok=True)\n"
            "    save_file({'w': torch.full((4, 4), fill), 'u': torch.ones(3)}, f'{name}/step_000001.safetensors')\n")
    subprocess.run([sys.executable, "-c", code], cwd=tmp, check=True)
    p = cli("diverge", "--checkpoints", "a", "b", "--out", "d", "--json", cwd=tmp)
    try:
        text = json.dumps(strict_json(p.stdout))
    except ValueError as why:
        return False, f"exit {p.returncode}: {why}"
    pair = json.loads(text)["pairs"][0]
    ok = p.returncode == 0 and pair["max_abs"] is None and pair["nonfinite"]["max_abs"] == "nan"
    return ok, f"exit {p.returncode}: max_abs {pair['max_abs']}, nonfinite {pair.get('nonfinite')}"


# -- 5. everyday use ----------------------------------------------------------------------------

@attack("everyday", "a long command off a terminal prints progress lines")
def _(tmp):
    p = cli("sweep", _spec(tmp), "--out", "o", cwd=tmp)  # ~7 s; ATTNUM_PROGRESS_INTERVAL=1 here
    lines = [ln for ln in p.stderr.splitlines() if "elapsed" in ln]
    return p.returncode == 0 and len(lines) >= 1, f"exit {p.returncode}, {len(lines)} progress line(s)"


@attack("everyday", "attnum --version")
def _(tmp):
    p = cli("--version", cwd=tmp)
    return p.returncode == 0 and p.stdout.startswith("attnum "), p.stdout.strip()


@attack("everyday", "--help in under 1 s (best of 3), without torch")
def _(tmp):
    walls = []
    for _ in range(3):
        t0 = time.perf_counter()
        p = cli("--help", cwd=tmp)
        walls.append(time.perf_counter() - t0)
    return p.returncode == 0 and min(walls) < 1.0, f"best {min(walls):.2f}s"


@attack("everyday", "conventional metavars (no <bool>, <list[...]>) in every sub-command's help")
def _(tmp):
    bad = []
    for sub in ("compare", "attribute", "validate", "sweep", "reproduce", "runs", "export", "report", "diverge",
                "decode", "audit", "scan", "spec", "spec-audit", "ring", "fp8-table"):
        out = cli(sub, "--help", cwd=tmp).stdout
        if "<bool>" in out or "<list" in out or "<float>" in out or "<int>" in out:
            bad.append(sub)
    return not bad, f"bad: {bad}" if bad else "all conventional"


# -- 6. round 3 (issue 19): nothing lost, nothing forged -------------------------------------------

def _store_folder(tmp: Path, name: str = "o") -> Path:
    """A finished tiny sweep's folder (4 points, ~4 s)."""
    small = TINY_SPEC.replace('format = ["bf16", "fp16", "e5m4"]', 'format = ["e5m4"]').replace(
        "seq_len = [48, 80]", "seq_len = [48]").replace("seed = [0, 1, 2, 3]", "seed = [0, 1]")
    (tmp / "small.toml").write_text(small)
    p = cli("sweep", tmp / "small.toml", "--out", tmp / name, "--quiet", cwd=tmp)
    assert p.returncode == 0, p.stderr[-300:]
    return tmp / name


@attack("round3", "export -o out/attnum.sqlite (and -wal, -shm, attnum.lock) is refused; the store is intact")
def _(tmp):
    out = _store_folder(tmp)
    before = (out / "attnum.sqlite").read_bytes()
    seen = [one_line_error(cli("export", out, "-o", out / n, cwd=tmp), 2, "bookkeeping")
            for n in ("attnum.sqlite", "attnum.sqlite-wal", "attnum.sqlite-shm", "attnum.lock")]
    runs = cli("runs", out, cwd=tmp)
    ok = all(o for o, _ in seen) and (out / "attnum.sqlite").read_bytes() == before and runs.returncode == 0
    return ok, seen[0][1]


@attack("round3", "a planted attnum.lock -> victim symlink: the sweep refuses, the victim keeps its bytes")
def _(tmp):
    (tmp / "victim.txt").write_text("21 bytes of user data")
    (tmp / "o").mkdir()
    (tmp / "o" / "attnum.lock").symlink_to(tmp / "victim.txt")
    ok, seen = one_line_error(cli("sweep", _spec(tmp), "--out", tmp / "o", cwd=tmp), 2, "symbolic link")
    return ok and (tmp / "victim.txt").read_text() == "21 bytes of user data", seen


@attack("round3", "kill -9 during export -o target.csv: target.csv is the old file or the new one, never cut")
def _(tmp):
    out = _store_folder(tmp)
    target = tmp / "target.csv"
    target.write_text("old,export\n")
    cuts = 0
    for delay in (0.5, 1.0, 1.5, 2.0, 3.0):
        p = popen("export", out, "-o", target, cwd=tmp)
        time.sleep(delay)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        text = target.read_text()
        cuts += not (text == "old,export\n" or (text.startswith("key,") and text.count("\n") == 5))
    left = [p.name for p in tmp.iterdir() if p.name.startswith(".target.csv.")]
    return cuts == 0, f"{cuts} cut file(s) in 5 kills; {len(left)} temp file(s) left by the kills"


@attack("round3", "--out '' / -o '' are refused (never the current folder)")
def _(tmp):
    a = one_line_error(cli("sweep", _spec(tmp), "--out", "", cwd=tmp), 2, "--out=''")
    b = one_line_error(cli("export", tmp, "-o", "", cwd=tmp), 2, "''")
    return a[0] and b[0] and not (tmp / "attnum.sqlite").exists(), f"{a[1]} | {b[1]}"


@attack("round3", "report where figures is a file: one line")
def _(tmp):
    out = _store_folder(tmp)
    (out / "figures").write_text("a file")
    return one_line_error(cli("report", out, cwd=tmp), 2, "figures")


def _sampler(tmp: Path, at_import: str = "", in_call: str = "pass") -> str:
    (tmp / "s.py").write_text(f"import os, sys, time\nfrom attnum.sampling import reference_sampler\n{at_import}\n"
                              f"def sampler(p, q, d, generator=None):\n    {in_call}\n"
                              "    return reference_sampler(p, q, d, generator=generator)\n")
    return f"{tmp / 's.py'}:sampler"


def _spec_audit(tmp: Path, target: str) -> tuple[int, dict | None]:
    p = cli("spec-audit", target, "--cases", "dirichlet", "--samples", "2000", "--timeout", "3", "--json", cwd=tmp)
    try:
        return p.returncode, strict_json(p.stdout)
    except ValueError:
        return p.returncode, None


for _what, _imp, _call, _want in (
        ("calls sys.exit(0) at import", "sys.exit(0)", "pass", "exited"),
        ("calls sys.exit(0) in a call", "", "sys.exit(0)", "sys.exit(0)"),
        ("segfaults in a call", "", "import ctypes; ctypes.string_at(0)", "SIGSEGV"),
        ("hangs in a call", "", "time.sleep(600)", "timed out")):
    @attack("round3", f"spec-audit: a sampler that {_what} fails (exit 1, strict JSON), never exit 0")
    def _(tmp, _imp=_imp, _call=_call, _want=_want):
        code, doc = _spec_audit(tmp, _sampler(tmp, _imp, _call))
        ok = code == 1 and doc is not None and doc["verdict"] == "fail" and _want in json.dumps(doc["cases"])
        return ok, f"exit {code}: {json.dumps(doc['cases'][0])[:120] if doc else 'no JSON'}"


@attack("round3", "a target whose child calls setsid(): no escape, no 'no answer within', nothing outlives the audit")
def _(tmp):
    pidfile = tmp / "gc.pid"
    t = target(tmp, "setsid", "import os, time\ndef attention(q, k, v, **kw):\n"
                              "    if os.fork() == 0:\n        os.setsid()\n"
                              f"        open({str(pidfile)!r}, 'w').write(str(os.getpid()))\n"
                              "        time.sleep(600)\n    time.sleep(1)\n    os._exit(3)\n")
    t0 = time.perf_counter()
    p = cli("audit", t, *CHEAP, "--timeout", "60", cwd=tmp)
    wall = time.perf_counter() - t0
    pid = int(pidfile.read_text()) if pidfile.exists() else None
    alive = pid is not None and Path(f"/proc/{pid}").exists() and \
        Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    ok = p.returncode == 1 and "exited" in p.stdout and "no answer" not in p.stdout and not alive and wall < 55
    return ok, f"exit {p.returncode}, {wall:.0f}s, grandchild {'ALIVE' if alive else 'gone'}"


@attack("round3", "a 10**7-point spec (30 KB) is refused at once")
def _(tmp):
    (tmp / "big.toml").write_text(f'name = "big"\n[axes]\nformat = ["bf16", "fp16"]\n'
                                  f"seq_len = {list(range(16, 1016))}\nseed = {list(range(5000))}\n")
    t0 = time.perf_counter()
    ok, seen = one_line_error(cli("sweep", tmp / "big.toml", "--out", "o", cwd=tmp), 2, "200000")
    return ok and time.perf_counter() - t0 < 30, f"{time.perf_counter() - t0:.1f}s; {seen}"


@attack("round3", "crafted torch checkpoints (shared dicts, a cycle, depth 200, a stride-0 1e9 view): one line")
def _(tmp):
    code = ("import torch, os\nd = {'t': torch.ones(1)}\nfor _ in range(60): d = {'a': d, 'b': d}\n"
            "c = {'t': torch.ones(1)}; c['self'] = c\nx = torch.ones(1)\nfor _ in range(200): x = {'k': x}\n"
            "for n, o in (('a', {'w': torch.ones(3)}), ('shared', d), ('cyclic', c), ('deep', x),"
            " ('stride0', {'w': torch.ones(1).expand(10**9)})):\n"
            "    os.makedirs(n, exist_ok=True); torch.save(o, f'{n}/step_1.pt')\n")
    subprocess.run([sys.executable, "-c", code], cwd=tmp, check=True, env=env())
    seen = [one_line_error(cli("diverge", "--checkpoints", "a", n, "--out", f"d_{n}", cwd=tmp, timeout=120), 2,
                           "cannot read checkpoint") for n in ("shared", "cyclic", "deep", "stride0")]
    return all(o for o, _ in seen), " | ".join(s[-50:] for _, s in seen)


@attack("round3", "rich markup in user strings: runs 'run[/tmp]', spec 't[/]iny', --out 'results[v2]', k[/]ern.py")
def _(tmp):
    (tmp / "t.toml").write_text(TINY_SPEC.replace('name = "tiny"', 'name = "t[/]iny"').replace(
        'format = ["bf16", "fp16", "e5m4"]', 'format = ["e5m4"]'))
    sweep = cli("sweep", tmp / "t.toml", "--out", "results[v2]", cwd=tmp)
    runs = cli("runs", "results[v2]", cwd=tmp, env=dict(env(), COLUMNS="300"))
    (tmp / "k[").mkdir()
    (tmp / "k[" / "]ern.py").write_text("import torch.nn.functional as F\n" + SDPA)
    audit = cli("audit", f"{tmp / 'k[' / ']ern.py'}:attention", *CHEAP, cwd=tmp)
    ok = sweep.returncode == 0 and runs.returncode == 0 and "t[/]iny" in runs.stdout and \
        "results[v2]" in runs.stdout and audit.returncode == 0 and "internal error" not in audit.stderr
    return ok, f"sweep {sweep.returncode}, runs {runs.returncode}, audit {audit.returncode}"


@attack("round3", "a store of a newer schema version is refused (read and resume), naming both versions")
def _(tmp):
    out = _store_folder(tmp)
    with sqlite3.connect(out / "attnum.sqlite") as c:
        c.execute("UPDATE meta SET value = '99' WHERE key = 'schema'")
    a = one_line_error(cli("runs", out, cwd=tmp), 2, "schema version 99", "(1)")
    b = one_line_error(cli("sweep", tmp / "small.toml", "--out", out, cwd=tmp), 2, "schema version 99")
    return a[0] and b[0], a[1]


@attack("round3", "rows of the wrong shape (config '[]', a metric that is a string): reported and skipped")
def _(tmp):
    out = _store_folder(tmp)
    with sqlite3.connect(out / "attnum.sqlite") as c:
        # two different points (a sweep runs its points in a shuffled order: rowids do not say which)
        keys = [k for (k,) in c.execute("SELECT key FROM points ORDER BY rowid LIMIT 2")]
        c.execute("UPDATE planned SET config = '[]' WHERE key = ?", (keys[0],))
        c.execute("UPDATE points SET metrics = '\"x\"' WHERE key = ?", (keys[1],))
        row = c.execute("SELECT rowid FROM planned WHERE key = ?", (keys[0],)).fetchone()[0]
    e = cli("export", out, "-o", tmp / "e.csv", cwd=tmp)
    r = cli("report", out, cwd=tmp)
    ok = e.returncode == 0 and r.returncode == 0 and f"row {row} " in e.stderr and "field config" in e.stderr \
        and "field metrics" in e.stderr and "Traceback" not in e.stderr + r.stderr
    return ok, f"export {e.returncode}, report {r.returncode}: {e.stderr.splitlines()[0][-90:] if e.stderr else ''}"


@attack("round3", "API edge shapes: N=0 everywhere (and under shadow), d=0, 5-D mask, huge window, is_causal='no'")
def _(tmp):
    code = r"""
import torch, torch.nn.functional as F, attnum
from attnum.errors import AttnumInputError
from attnum.attention.golden import golden_attention as g
from attnum.attention.baseline import baseline_attention as b
from attnum.attention.flash import flash_attention as f
q, k, v = torch.randn(1, 1, 4, 8), torch.randn(1, 1, 5, 8), torch.randn(1, 1, 5, 8)
bad = []
for fn in (g, b, f):
    if fn(torch.randn(1, 1, 0, 8), k, v).shape != (1, 1, 0, 8): bad.append(f"{fn.__name__} N=0")
    for kw, name in (({"attn_mask": torch.zeros(1, 1, 1, 4, 5)}, "attn_mask"), ({"window": (10**30, 0)}, "window"),
                     ({"is_causal": "no"}, "is_causal"), ({"scale": "a"}, "scale")):
        try:
            fn(q, k, v, **kw); bad.append(f"{fn.__name__} {name} accepted")
        except AttnumInputError as e:
            if name not in str(e): bad.append(f"{fn.__name__} {name}: {e}")
        except Exception as e:
            bad.append(f"{fn.__name__} {name}: {type(e).__name__}")
    try:
        fn(torch.randn(1, 1, 4, 0), torch.randn(1, 1, 5, 0), v); bad.append("d=0 accepted")
    except AttnumInputError:
        pass
with attnum.shadow(candidate="baseline:uniform:bf16", reference="golden"):
    F.scaled_dot_product_attention(torch.randn(1, 1, 0, 8), k, v)
print(bad)
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(), cwd=tmp)
    return p.returncode == 0 and p.stdout.strip() == "[]", (p.stdout.strip() or p.stderr.strip()[-150:])


@attack("round3", "a policy axis in another order is the same spec; acc=fp16,acc=fp32 is refused")
def _(tmp):
    base = 'name = "p"\n[axes]\nformat = ["bf16"]\nseq_len = [32]\npolicy = ["{}"]\n'
    (tmp / "a.toml").write_text(base.format("fa2,acc=fp32,out=fp32"))
    (tmp / "b.toml").write_text(base.format("fa2,out=fp32,acc=fp32"))
    (tmp / "c.toml").write_text(base.format("fa2,acc=fp16,acc=fp32"))
    a = cli("sweep", tmp / "a.toml", "--out", "o", "--quiet", cwd=tmp)
    b = cli("sweep", tmp / "b.toml", "--out", "o", "--quiet", cwd=tmp)
    c = one_line_error(cli("sweep", tmp / "c.toml", "--out", "o2", cwd=tmp), 2, "acc=fp16,acc=fp32")
    ok = a.returncode == 0 and b.returncode == 0 and "already done" in b.stdout + b.stderr and c[0]
    return ok, f"a {a.returncode}, b {b.returncode}; {c[1]}"


@attack("round3", "a rejected command (diverge --workload digits --profile bias) leaves no folder, no attnum.lock")
def _(tmp):
    ok, seen = one_line_error(cli("diverge", "--workload", "digits", "--profile", "bias", "--out", "d", cwd=tmp), 2)
    left = sorted(p.name for p in tmp.iterdir())
    return ok and "d" not in left and not (tmp / "runs").exists(), f"{seen}; left {left}"


@attack("round3", "export -o /dev/full and -o /dev/null: written in place, the device nodes stay devices")
def _(tmp):
    import stat as st

    out = _store_folder(tmp)
    full = one_line_error(cli("export", out, "-o", "/dev/full", cwd=tmp), 2, "disk is full")
    null = cli("export", out, "-o", "/dev/null", cwd=tmp)
    devices = all(st.S_ISCHR(os.stat(d).st_mode) for d in ("/dev/full", "/dev/null"))
    return full[0] and null.returncode == 0 and devices, f"{full[1]}; devices intact: {devices}"


@attack("round3", "report.html and diverge's checkpoints.json planted as links to a victim: the victim is untouched")
def _(tmp):
    out = _store_folder(tmp)
    (tmp / "victim.txt").write_text("keep")
    (out / "report.html").symlink_to(tmp / "victim.txt")
    r = cli("report", out, cwd=tmp)
    code = ("import os, torch\nfor n in 'ab':\n    os.makedirs(n, exist_ok=True); torch.save({'w': torch.ones(2)}, f'{n}/m.pt')\n")
    subprocess.run([sys.executable, "-c", code], cwd=tmp, check=True, env=env())
    (tmp / "d").mkdir()
    (tmp / "d" / "checkpoints.json").symlink_to(tmp / "victim.txt")
    d = cli("diverge", "--checkpoints", "a", "b", "--out", "d", cwd=tmp)
    ok = r.returncode == 0 and d.returncode == 0 and (tmp / "victim.txt").read_text() == "keep"
    return ok, f"report {r.returncode}, diverge {d.returncode}, victim {(tmp / 'victim.txt').read_text()!r}"


@attack("round3", "spec-audit: a sampler that SIGSTOPs or SIGKILLs itself fails its case (timed out / crashed)")
def _(tmp):
    seen = []
    for call, want in (("os.kill(os.getpid(), 19)", "timed out"), ("os.kill(os.getpid(), 9)", "SIGKILL")):
        code, doc = _spec_audit(tmp, _sampler(tmp, "", call))
        seen.append(code == 1 and doc is not None and want in json.dumps(doc["cases"]))
    return all(seen), f"{seen}"


@attack("round3", "a lock that is a folder or a FIFO: one line, nothing written")
def _(tmp):
    (tmp / "a" / "attnum.lock").mkdir(parents=True)
    (tmp / "b").mkdir()
    os.mkfifo(tmp / "b" / "attnum.lock")
    a = one_line_error(cli("sweep", _spec(tmp), "--out", tmp / "a", cwd=tmp), 2, "attnum.lock")
    b = one_line_error(cli("sweep", _spec(tmp), "--out", tmp / "b", cwd=tmp, timeout=60), 2, "attnum.lock")
    return a[0] and b[0] and not (tmp / "a" / "attnum.sqlite").exists(), f"{a[1]} | {b[1]}"


# -- the kernel server (issue 19, second part): user code only computes, the parent judges ------------

from _forgery import PATCH_AUDIT, PATCH_SPEC, ZEROS, forge  # noqa: E402 - shared with the tests

DIVERGE = ["--workload", "digits", "--steps", "3", "--ckpt-every", "3", "--seeds", "0,1"]


@attack("kserver", "audit: a target writes forged frames (a pickle that runs code, 'done', a 'pass') to every pipe")
def _(tmp):
    t = target(tmp, "forge", forge(str(tmp / "PWNED")) + "def attention(q, k, v, **kw):\n    forge_frames()\n" + ZEROS)
    p = cli("audit", t, *CHEAP, cwd=tmp)
    pwned = (tmp / "PWNED").exists()
    return p.returncode == 1 and not pwned and "PASSED" not in p.stdout, f"exit {p.returncode}, code ran here: {pwned}"


@attack("kserver", "audit: a wrong target monkeypatches the verdict, engine and report code in its process")
def _(tmp):
    t = target(tmp, "patch", PATCH_AUDIT + "def attention(q, k, v, **kw):\n" + ZEROS)
    p = cli("audit", t, *CHEAP, cwd=tmp)
    return p.returncode == 1 and "FAILED" in p.stdout, f"exit {p.returncode}: {p.stdout.strip().splitlines()[-1][:80]}"


@attack("kserver", "audit: a target that hangs in a call is 'timed out' (per call), killed, the next probe runs")
def _(tmp):
    t = target(tmp, "hang", "import time\ndef attention(q, k, v, **kw):\n    if q.shape[-2] == 2:\n"
                            "        time.sleep(600)\n    return F.scaled_dot_product_attention(q, k, v, **kw)\n")
    p = cli("audit", t, *CHEAP, "--timeout", "3", "--json", cwd=tmp)
    try:
        rows = {r["name"]: r["verdict"] for r in strict_json(p.stdout)["probes"]}
    except (ValueError, KeyError, TypeError) as why:
        return False, f"exit {p.returncode}: {why}"
    ok = p.returncode == 1 and rows.get("odd-lengths") == "timed out" and rows.get("scale-argument") == "pass"
    return ok, f"exit {p.returncode}, rows {rows}"


@attack("kserver", "audit: a target that trickles bytes to the channel never completing a frame still times out")
def _(tmp):
    t = target(tmp, "trickle", "import os, stat, time\ndef attention(q, k, v, **kw):\n"
                               "    fds = [fd for fd in range(3, 64) if os.path.exists(f'/proc/self/fd/{fd}')]\n"
                               "    for _ in range(2000):\n        for fd in fds:\n"
                               "            try: os.write(fd, b'\\x00')\n            except OSError: pass\n"
                               "        time.sleep(0.1)\n")
    p = cli("audit", t, "--dtype", "bf16", "--probes", "scale-argument", "--timeout", "3", "--json", cwd=tmp)
    try:
        rows = {r["name"]: r["verdict"] for r in strict_json(p.stdout)["probes"]}
    except (ValueError, KeyError, TypeError) as why:
        return False, f"exit {p.returncode}: {why}"
    return p.returncode == 1 and rows.get("scale-argument") in ("timed out", "crashed"), f"exit {p.returncode}, {rows}"


@attack("kserver", "spec-audit: a sampler writes forged frames (a pickle that runs code) to every pipe")
def _(tmp):
    (tmp / "s.py").write_text("import torch\n" + forge(str(tmp / "PWNED")) + "def sampler(p, q, d, generator=None):\n"
                              "    forge_frames()\n    return torch.zeros(p.shape[0], p.shape[1], dtype=torch.long)\n")
    code, doc = _spec_audit(tmp, f"{tmp / 's.py'}:sampler")
    pwned = (tmp / "PWNED").exists()
    return code == 1 and doc is not None and doc["verdict"] == "fail" and not pwned, f"exit {code}, code ran: {pwned}"


@attack("kserver", "spec-audit: a wrong sampler monkeypatches run_case/summary in its process to say pass")
def _(tmp):
    (tmp / "s.py").write_text("import torch\n" + PATCH_SPEC + "def sampler(p, q, d, generator=None):\n"
                              "    return torch.zeros(p.shape[0], p.shape[1], dtype=torch.long)\n")
    code, doc = _spec_audit(tmp, f"{tmp / 's.py'}:sampler")
    return code == 1 and doc is not None and doc["verdict"] == "fail", f"exit {code}"


@attack("kserver", "spec-audit: a sampler whose child calls setsid(): the grandchild is killed with the tree")
def _(tmp):
    pidfile = tmp / "gc.pid"
    code, doc = _spec_audit(tmp, _sampler(tmp, "", f"if os.fork() == 0: os.setsid(); open({str(pidfile)!r}, 'w')"
                                               ".write(str(os.getpid())); time.sleep(600)"))
    alive = pidfile.exists() and Path(f"/proc/{pidfile.read_text()}").exists() and \
        Path(f"/proc/{pidfile.read_text()}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return code in (0, 1) and not alive, f"exit {code}, grandchild {'ALIVE' if alive else 'gone'}"

@attack("kserver", "audit: a target opens the auditor's stdout through /proc/PPID/fd/1 and writes a forged pass")
def _(tmp):
    import shutil

    t = target(tmp, "procfd", "import os\ndef attention(q, k, v, **kw):\n    try:\n"
                              "        open(f'/proc/{os.getppid()}/fd/1', 'w').write('FORGED {\"passed\": true}')\n"
                              "    except OSError:\n        pass\n" + ZEROS)
    # root holds CAP_SYS_PTRACE, which opens any process's fds: drop it to be the user this defends
    drop = ["setpriv", "--bounding-set=-sys_ptrace", "--inh-caps=-sys_ptrace"] \
        if os.geteuid() == 0 and shutil.which("setpriv") else []
    p = subprocess.run([*drop, sys.executable, "-m", "attnum", "audit", t, *CHEAP], cwd=tmp, capture_output=True,
                       text=True, timeout=300, env=env())
    return p.returncode == 1 and "FORGED" not in p.stdout, f"exit {p.returncode}, forged on stdout: {'FORGED' in p.stdout}"


def _diverge_target(tmp: Path, call: str, at_import: str = "") -> str:
    (tmp / "att.py").write_text(f"import os, sys, time, gc, ctypes\nimport torch\nimport torch.nn.functional as F\n"
                                f"{at_import}\ndef attention(q, k, v, **kw):\n    {call}\n"
                                "    return F.scaled_dot_product_attention(q, k, v, **kw)\n")
    return f"{tmp / 'att.py'}:attention"


for _what, _imp, _call, _want in (
        ("calls sys.exit(0) at import", "sys.exit(0)", "pass", "exited"),
        ("calls sys.exit(0) in a call", "", "sys.exit(0)", "sys.exit(0)"),
        ("calls os._exit(0) in a call", "", "os._exit(0)", "exited with code 0"),
        ("segfaults in a call", "", "ctypes.string_at(0)", "SIGSEGV"),
        ("hangs in a call (--timeout 3)", "", "time.sleep(600)", "timed out"),
        ("raises in a call", "", "raise ValueError('boom')", "ValueError: boom"),
        ("returns the wrong shape", "", "return q[..., :1]", "expected a tensor"),
        ("starts a setsid() grandchild, then hangs", "",
         "os.fork() == 0 and (os.setsid(), open('gc.pid', 'w').write(str(os.getpid())), time.sleep(600)); "
         "time.sleep(600)", "timed out")):
    @attack("kserver", f"diverge --attention file.py:fn that {_what}: exit 1, one line, nothing left running")
    def _(tmp, _imp=_imp, _call=_call, _want=_want):
        p = cli("diverge", *DIVERGE, "--attention", _diverge_target(tmp, _call, _imp), "--timeout", "3", "--out", "d",
                cwd=tmp, timeout=240)
        ok, seen = one_line_error(p, 1, _want, after_progress=True)
        pid = (tmp / "gc.pid").read_text() if (tmp / "gc.pid").exists() else None
        alive = pid is not None and Path(f"/proc/{pid}").exists() and \
            Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        return ok and not alive, f"{seen}{'; grandchild ALIVE' if alive else ''}"


@attack("kserver", "diverge: an attention that zeroes the model's weights and stubs AdamW.step trains as plain SDPA")
def _(tmp):
    tamper = ("torch.optim.AdamW.step = lambda self, *a, **k: None\n"
              "    [p.data.zero_() for p in gc.get_objects() if isinstance(p, torch.nn.Parameter)]")
    a = cli("diverge", *DIVERGE, "--attention", _diverge_target(tmp, tamper), "--out", "a", "--json", cwd=tmp,
            timeout=300)
    b = cli("diverge", *DIVERGE, "--attention", "torch-sdpa", "--out", "b", "--json", cwd=tmp, timeout=300)
    if a.returncode or b.returncode:
        return False, f"exit {a.returncode} / {b.returncode}: {a.stderr[-120:]}"
    la = json.loads((tmp / "a" / "results.json").read_text())["runs"]["flash-s0"]["losses"]
    lb = json.loads((tmp / "b" / "results.json").read_text())["runs"]["flash-s0"]["losses"]
    return la == lb, f"losses {la} vs plain SDPA {lb}"


# -- round 4 (issue 32): lies a target can tell, caches it can poison, runs that ask for the machine --

def _audit_json(tmp: Path, target_spec: str, *flags: str, env_extra: dict | None = None):
    p = cli("audit", target_spec, *flags, "--json", cwd=tmp, env={**env(), **(env_extra or {})})
    try:
        return p, strict_json(p.stdout)
    except ValueError:
        return p, None


FRESH = '''
from attnum.kernels.serving import reference
REF = reference("fa2")
class Fresh:
    accepts_out = True
    @staticmethod
    def decode(q, k, v, *, cache_seqlens, out=None, lse_out=None, return_lse=False, **kw):
        return REF.decode(q, k, v, cache_seqlens=cache_seqlens, return_lse=return_lse, **kw)
'''

MOVES = '''
import torch
from attnum.kernels.serving import reference
REF = reference("fa2")
class Moves:
    attnum_batch_invariant = True
    @staticmethod
    def decode(q, k, v, *, cache_seqlens, **kw):
        o = REF.decode(q, k, v, cache_seqlens=cache_seqlens, **kw)
        return torch.nextafter(o, torch.full_like(o, float("inf"))) if q.shape[0] > 1 else o
'''

E4M3 = '''
from attnum.attention.flash import flash_attention
def attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return flash_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale,
                           policy="uniform:e4m3fn").to(q.dtype)
attention.attnum_emulation = "uniform:e4m3fn"
'''


@attack("round4", "1. accepts_out adapter never writes the poisoned out and returns a fresh tensor: unwritten")
def _(tmp):
    (tmp / "fresh.py").write_text(FRESH)
    p, doc = _audit_json(tmp, f"{tmp / 'fresh.py'}:Fresh", "--dtype", "fp32", "--probes", "empty-sequence")
    verdicts = [r["verdict"] for r in doc["probes"]] if doc else []
    return p.returncode == 1 and verdicts == ["unwritten"], f"exit {p.returncode}, verdicts {verdicts}"


@attack("round4", "2. attnum_batch_invariant on a class adapter is read: a one-ulp move with B > 1 fails")
def _(tmp):
    (tmp / "moves.py").write_text(MOVES)
    p, doc = _audit_json(tmp, f"{tmp / 'moves.py'}:Moves", "--dtype", "fp32", "--probes", "decode-batch-invariance")
    rows = [(r["verdict"], r["note"]) for r in doc["probes"]] if doc else []
    ok = p.returncode == 1 and rows and rows[0][0] == "fail" and "claims attnum_batch_invariant" in rows[0][1]
    return bool(ok), f"exit {p.returncode}, {[(v, n[-70:]) for v, n in rows]}"


@attack("round4", "3. an e4m3 kernel declaring uniform:e4m3fn is not a bf16 PASS; the verdict names the arithmetic")
def _(tmp):
    (tmp / "e4.py").write_text(E4M3)
    p, doc = _audit_json(tmp, f"{tmp / 'e4.py'}:attention", "--dtype", "bf16", "--probes", "odd-lengths")
    rows = [(r["verdict"], r["note"]) for r in doc["probes"]] if doc else []
    ok = rows and rows[0][0] != "pass" and "declared arithmetic uniform:e4m3fn" in rows[0][1] \
        and "only against the declared arithmetic" in rows[0][1]
    return bool(ok), f"exit {p.returncode}, {[(v, n[:80]) for v, n in rows]}"


@attack("round4", "4. consistency --policy sage1:fp16: refused (decode paths cannot run it), not run as fa2")
def _(tmp):
    return one_line_error(cli("consistency", "--policy", "sage1:fp16", cwd=tmp), 2, "one-pass prefill")


@attack("round4", "5. a foreign 3 x 5 file at the LM activation cache path is not used (compare --dist lm)")
def _(tmp):
    import torch

    cache = tmp / "cache"
    cache.mkdir()
    (cache / "lm_qkv_0_1_s60_n128.pt").write_bytes(b"")
    torch.save([torch.zeros(3, 5, dtype=torch.float64)] * 3, cache / "lm_qkv_0_1_s60_n128.pt")
    p = cli("compare", "--dist", "lm", "--seq-len", "128", "--head-dim", "64", "--heads", "2", "--batch", "1",
            "--json", cwd=tmp, env={**env(), "ATTNUM_CACHE": str(cache)}, timeout=600)
    loaded = torch.load(cache / "lm_qkv_0_1_s60_n128.pt", weights_only=True)
    shape = tuple(loaded[0].shape) if isinstance(loaded, list) else None
    return p.returncode == 0 and shape == (1, 2, 128, 64), f"exit {p.returncode}, cache now {shape}"


@attack("round4", "6. TRITON_INTERPRET=1 and no prefix: the verdict names the interpreter's model, not raw")
def _(tmp):
    try:
        import triton  # noqa: F401
    except ImportError:
        return True, "skipped: triton is not installed"
    kernel = ROOT / "tests" / "_interp_triton_attention.py"
    p, doc = _audit_json(tmp, f"{kernel}:attention_tf32", "--dtype", "bf16", "--probes", "scale-argument",
                         env_extra={"TRITON_INTERPRET": "1"})
    numerics = doc.get("numerics") if doc else None
    return p.returncode == 0 and str(numerics).startswith("triton-interp:nvidia"), f"exit {p.returncode}, {numerics}"


def _fake_sage_wheel(path: Path, body: str) -> None:
    """A zip holding every kernel file attnum extracts from sageattention's wheel, each ``body``."""
    code = ("import sys, zipfile\nfrom attnum.kernels import wheels\n"
            "with zipfile.ZipFile(sys.argv[1], 'w') as z:\n"
            "    [z.writestr(f, sys.argv[2]) for f in wheels.FILES['sageattention']]\n")
    subprocess.run([sys.executable, "-c", code, str(path), body], check=True, env=env(), timeout=120)


SAGE_WHL = "sageattention-1.0.6-py3-none-any.whl"


@attack("round4", "7. kernels fetch: a forged zip under the pinned wheel name is refused by its sha256, never run")
def _(tmp):
    cache = tmp / "cache"
    (cache / "wheels").mkdir(parents=True)
    _fake_sage_wheel(cache / "wheels" / SAGE_WHL, f"open({str(tmp / 'PWNED')!r}, 'w')\n")
    p = cli("kernels", "fetch", "sageattention", cwd=tmp, env={**env(), "ATTNUM_CACHE": str(cache)})
    ok, seen = one_line_error(p, 3, "sha256", "rm ")
    a = cli("audit", "sage1-triton", *CHEAP, cwd=tmp, env={**env(), "ATTNUM_CACHE": str(cache), "TRITON_INTERPRET": "1"})
    pwned = (tmp / "PWNED").exists()
    return ok and not pwned and a.returncode != 0, f"{seen}; audit exit {a.returncode}; code ran: {pwned}"


@attack("round4", "7. kernels fetch: a decoy ...-zzz.whl beside the real wheel is never picked")
def _(tmp):
    import shutil

    real = Path.home() / ".cache" / "attnum" / "wheels" / SAGE_WHL
    cache = tmp / "cache"
    (cache / "wheels").mkdir(parents=True)
    if real.is_file():
        shutil.copy(real, cache / "wheels" / SAGE_WHL)
    _fake_sage_wheel(cache / "wheels" / "sageattention-1.0.6-zzz.whl", "raise SystemExit('decoy')\n")
    p = cli("kernels", "fetch", "sageattention", cwd=tmp, env={**env(), "ATTNUM_CACHE": str(cache)})
    core = cache / "src" / "sageattention-1.0.6" / "sageattention" / "core.py"
    decoy = core.is_file() and "decoy" in core.read_text()
    return p.returncode in (0, 3) and not decoy, f"exit {p.returncode}, decoy extracted: {decoy}"


@attack("round4", "8. a symlink inside the extracted cache is not written through; a truncated wheel is one line")
def _(tmp):
    import shutil

    real = Path.home() / ".cache" / "attnum" / "wheels" / SAGE_WHL
    cache = tmp / "cache"
    (cache / "wheels").mkdir(parents=True)
    victim = tmp / "victim.txt"
    victim.write_text("keep")
    core = cache / "src" / "sageattention-1.0.6" / "sageattention" / "core.py"
    core.parent.mkdir(parents=True)
    core.symlink_to(victim)
    data = real.read_bytes() if real.is_file() else b"PK\x03\x04" + b"x" * 1000
    (cache / "wheels" / SAGE_WHL).write_bytes(data[: len(data) // 2])
    p = cli("kernels", "fetch", "sageattention", cwd=tmp, env={**env(), "ATTNUM_CACHE": str(cache)})
    ok, seen = one_line_error(p, 3, SAGE_WHL, "attnum kernels fetch sageattention")
    if real.is_file():
        shutil.copy(real, cache / "wheels" / SAGE_WHL)
        q = cli("kernels", "fetch", "sageattention", cwd=tmp, env={**env(), "ATTNUM_CACHE": str(cache)})
        ok = ok and q.returncode == 0
    return ok and victim.read_text() == "keep", f"{seen}; victim {'kept' if victim.read_text() == 'keep' else 'OVERWRITTEN'}"


for _args in (("consistency", "--batch-sizes", "1000000000"), ("consistency", "--mixes", "1000000000"),
              ("consistency", "--length", "1000000000"), ("lowbit-table", "--seq-len", "1000000000"),
              ("lowbit-table", "--rescale", "--seq-lens", "1000000000")):
    @attack("round4", f"9. attnum {' '.join(_args)}: refused for its memory before it starts")
    def _(tmp, _args=_args):
        return one_line_error(cli(*_args, cwd=tmp, timeout=120), 2, "of memory")


for _what, _point in (("lowbit seq_len = 10^9", 'kind = "lowbit"\nseq_len = 1000000000'),
                      ("lowbit batch = 10^6", 'kind = "lowbit"\nbatch = 1000000'),
                      ("lowbit sage3 head_dim 40", 'kind = "lowbit"\nscheme = "sage3"\nhead_dim = 40'),
                      ("consistency length = 10^9", 'kind = "consistency"\nlength = 1000000000'),
                      ("consistency batch_sizes = [10^9]", 'kind = "consistency"\nbatch_sizes = [1000000000]')):
    @attack("round4", f"10. a sweep point of {_what} is refused by the spec check before any point runs")
    def _(tmp, _point=_point):
        (tmp / "s.toml").write_text(f'name = "x"\n[[points]]\n{_point}\n')
        p = cli("sweep", tmp / "s.toml", "--out", "o", cwd=tmp, timeout=120)
        ok, seen = one_line_error(p, 2, "impossible")
        return ok and not (tmp / "o" / "attnum.sqlite").exists(), seen


@attack("round4", "10. batch_sizes = \"1,4\" (the CLI's own syntax) is accepted in a spec")
def _(tmp):
    code = ("from attnum.sweep.spec import load_spec\n"
            "print(load_spec('s.toml').groups[0].points[0].batch_sizes)\n")
    (tmp / "s.toml").write_text('name = "x"\n[[points]]\nkind = "consistency"\nbatch_sizes = "1,4"\nlength = 512\n')
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp, capture_output=True, text=True, timeout=120, env=env())
    return p.returncode == 0 and p.stdout.strip() == "(1, 4)", f"exit {p.returncode}: {(p.stdout + p.stderr)[-140:]}"


@attack("round4", "11. a 512 MiB reply from a target is received within 60 s")
def _(tmp):
    (tmp / "big.py").write_text("import torch\ndef attention(q, k, v, **kw):\n"
                                "    return torch.ones(1, 1, 128 << 20, 1)\n")
    code = ("import torch, time\nfrom attnum.sandbox.server import KernelServer\n"
            "from attnum.sandbox.remote import RemoteTarget\nq = torch.zeros(1, 1, 1, 1)\n"
            f"with KernelServer('attention', {str(tmp / 'big.py') + ':attention'!r}, timeout=120) as s:\n"
            "    s.start(); t = time.perf_counter(); o = RemoteTarget(s)(q, q, q)\n"
            "    print(round(time.perf_counter() - t, 1), int(o.sum()))\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp, capture_output=True, text=True, timeout=200, env=env())
    out = p.stdout.split()
    ok = p.returncode == 0 and len(out) == 2 and float(out[0]) < 60 and int(out[1]) == 128 << 20
    return ok, f"exit {p.returncode}, {' '.join(out) or p.stderr[-120:]} (seconds, elements)"


@attack("round4", "12. the API on edge inputs: golden's answer or AttnumInputError, never a bare error")
def _(tmp):
    code = ("import torch\nfrom attnum.attention.flash import flash_attention\nfrom attnum.errors import AttnumInputError\n"
            "bad = []\nfor p in ('sage1:fp16', 'sage2:fp16', 'sage2-4b:fp16', 'sage3:fp16', 'fa4:fp32'):\n"
            "    q = torch.randn(1, 2, 64, 64); k = torch.randn(1, 2, 64, 64); v = torch.randn(1, 2, 64, 64)\n"
            "    ki = k.clone(); ki[0, 0, 3, 5] = float('inf'); qn = q.clone(); qn[0, 0, 1, 1] = float('nan')\n"
            "    for name, a in (('inf K', (q, ki, v)), ('1e30', (q * 1e30, k * 1e30, v * 1e30)), ('nan Q', (qn, k, v)),\n"
            "                    ('S=0', (q, k[:, :, :0], v[:, :, :0])), ('N=0', (q[:, :, :0], k, v))):\n"
            "        try:\n            flash_attention(*a, policy=p)\n"
            "        except AttnumInputError:\n            pass\n"
            "        except Exception as e:\n            bad.append(f'{p} {name}: {type(e).__name__}')\n"
            "print(bad)\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp, capture_output=True, text=True, timeout=300, env=env())
    return p.returncode == 0 and p.stdout.strip() == "[]", f"exit {p.returncode}: {p.stdout.strip()[:140]}"


for _cmd, _where in (("consistency", "FILE"), ("consistency-tokens", "FILE"), ("consistency", "/dev/null"),
                     ("consistency-tokens", "/proc/version")):
    @attack("round4", f"13. {_cmd} --out {_where}: one line before the study starts")
    def _(tmp, _cmd=_cmd, _where=_where):
        where = _where
        if where == "FILE":
            (tmp / "f.json").write_text("{}")
            where = str(tmp / "f.json")
        return one_line_error(cli(_cmd, "--out", where, cwd=tmp, timeout=120), 2, "--out", "a folder")


@attack("round4", "13. consistency --rules 'fa2;;vllm': the empty rule is refused, not dropped")
def _(tmp):
    return one_line_error(cli("consistency", "--rules", "fa2;;vllm", cwd=tmp), 2, "--rules", "empty")


@attack("round4", "14. Ctrl-C in the first second of a sweep (12 tries, 0.1-1.2 s): exit 130 'interrupted'")
def _(tmp):
    _spec(tmp)
    seen = []
    for i in range(12):
        p = subprocess.Popen([sys.executable, "-m", "attnum", "sweep", str(tmp / "spec.toml"), "--out", f"o{i}"],
                             cwd=tmp, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.1 * (i + 1))
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=120)
        if "Traceback" in err and "attnum" not in err.replace("attnum-attack", ""):
            continue  # landed in Python's own start-up (site, runpy), before any of attnum's code ran
        if p.returncode != 130 or "internal error" in err or "Traceback" in err or "interrupted" not in err:
            seen.append(f"{0.1 * (i + 1):.1f}s: exit {p.returncode} {err.strip().splitlines()[-1:] }")
    return not seen, "; ".join(seen)[:200] or "12 of 12 interrupted"


@attack("round5", "audit --no-isolate: a target that zeroes q, k, v in place and returns zeros fails")
def _(tmp):
    t = target(tmp, "zeroes", "def attention(q, k, v, **kw):\n    q.zero_(); k.zero_(); v.zero_()\n"
                              "    return torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)\n")
    p = cli("audit", t, "--no-isolate", *CHEAP, cwd=tmp)
    return p.returncode == 1 and "FAILED" in p.stdout, f"exit {p.returncode}"


@attack("round5", "fingerprint of a merge-only adapter (no SDPA, no decode): one line, exit 2")
def _(tmp):
    (tmp / "m.py").write_text("class Merge:\n    @staticmethod\n    def merge_state(o_a, lse_a, o_b, lse_b):\n"
                              "        return o_a, lse_a\n")
    return one_line_error(cli("fingerprint", f"{tmp / 'm.py'}:Merge", cwd=tmp), 2, "target=", "SDPA or a decode",
                          after_progress=True)


@attack("round6", "audit / fingerprint --arch on a target attnum does not interpret: one line, exit 2")
def _(tmp):
    a = one_line_error(cli("audit", "torch-sdpa", "--arch", "sm80", *CHEAP, cwd=tmp), 2, "--arch=sm80",
                       "torch-sdpa")
    f = one_line_error(cli("fingerprint", "torch-sdpa-math", "--arch", "sm80", cwd=tmp), 2, "--arch=sm80")
    return a[0] and f[0], f"audit: {a[1]}; fingerprint: {f[1]}"


VARLEN_LIMITS = """
import math, torch

class Varlen:  # issue 42: the packed keys past 128 dropped, the sequences past the 6th zeroed
    @staticmethod
    def varlen(q, k, v, *, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, is_causal=False,
               scale=None):
        out = torch.zeros(q.shape[0], q.shape[1], v.shape[-1], dtype=q.dtype)
        cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        for b in range(min(6, len(cq) - 1)):
            q0, q1, k0, k1 = cq[b], cq[b + 1], ck[b], min(ck[b + 1], 128)
            if q1 == q0 or k1 <= k0:
                continue
            r = q.shape[1] // k.shape[1]
            kk, vv = (x[k0:k1].double().repeat_interleave(r, 1) for x in (k, v))
            s = torch.einsum("nhd,shd->hns", q[q0:q1].double(), kk) / math.sqrt(q.shape[-1])
            if is_causal:
                n, m = q1 - q0, k1 - k0
                s = s.masked_fill(torch.arange(m)[None, :] > torch.arange(n)[:, None] + (m - n), -math.inf)
            out[q0:q1] = torch.einsum("hns,shd->nhd", torch.softmax(s, -1).nan_to_num(0.0), vv).to(q.dtype)
        return out
"""


@attack("round6", "a varlen kernel that drops packed keys past 128 and sequences past the 6th fails varlen-ragged")
def _(tmp):
    (tmp / "vl.py").write_text(VARLEN_LIMITS)
    p = cli("audit", f"{tmp / 'vl.py'}:Varlen", "--probes", "varlen-ragged", "--dtype", "fp32", cwd=tmp)
    return p.returncode == 1 and "fail" in p.stdout, f"exit {p.returncode}: {p.stdout.strip().splitlines()[-1:]}"


# -- issue 42: nothing forged, round 5 ------------------------------------------------------------------

def _py(tmp: Path, code: str, timeout: float = 300, limit_bytes: int | None = None) -> subprocess.CompletedProcess:
    """``python -c code`` with this checkout's attnum; ``limit_bytes``: the child's address space capped
    (a runaway allocation is a MemoryError there, not a machine out of memory)."""
    def cap():
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    return subprocess.run([sys.executable, "-c", code], cwd=tmp, capture_output=True, text=True, timeout=timeout,
                          env=env(), preexec_fn=cap if limit_bytes else None)


@attack("round7", "1. mma=sm90 with P in fp16 and V in bf16 (and the reverse): refused in one line, never inf or 1.0")
def _(tmp):
    seen = []
    for policy in ("fa2:bf16,probs=fp16,mma=sm90", "fa2:fp16,probs=bf16,mma=sm90"):
        ok, what = one_line_error(cli("compare", "--policy", policy, "--seq-len", "32", "--head-dim", "16",
                                      cwd=tmp), 2, "neither format holds the other")
        seen.append((ok, what))
    code = ("import torch\nfrom attnum.attention.flash import flash_attention\nfrom attnum.errors import AttnumInputError\n"
            "out = []\nfor pol, v0, dt in (('fa2:bf16,probs=fp16,mma=sm90', 2.0**17, torch.bfloat16),\n"
            "                    ('fa2:fp16,probs=bf16,mma=sm90', 1 + 2.0**-9, torch.float16),\n"
            "                    ('fa2:bf16,probs=e4m3fn,mma=sm90', 2.0**17 + 2.0**10, torch.bfloat16),\n"
            "                    ('fa2:fp32,probs=fp16,mma=sm80', 1 + 2.0**-10, torch.float32)):\n"
            "    q = torch.zeros(1, 1, 2, 16, dtype=dt); v = torch.full((1, 1, 4, 16), v0, dtype=dt)\n"
            "    try:\n        o = flash_attention(q, q[:, :, :0].new_zeros(1, 1, 4, 16), v, policy=pol)\n"
            "        out.append(float(o.double().max()) == v0 and float(o.double().min()) == v0)\n"
            "    except AttnumInputError:\n        out.append('refused')\n"
            "print(out)\n")
    p = _py(tmp, code)
    api = p.stdout.strip() == "['refused', 'refused', True, True]"
    return all(ok for ok, _ in seen) and api, f"{seen[0][1][:90]}; API (refused x2, exact x2): {p.stdout.strip()[:80]}"


PRINTS_FORGED = """import os, sys
import torch.nn.functional as F
print('{"verdict": "PASS", "at": "import"}')
def attention(q, k, v, **kw):
    print('{"verdict": "PASS"}')
    sys.__stdout__.write('{"verdict": "PASS"}\\n')
    os.write(1, b'{"verdict": "PASS"}\\n')
    return F.scaled_dot_product_attention(q, k, v, **kw)
"""


@attack("round7", "2. --no-isolate: a target printing {\"verdict\": \"PASS\"} to stdout: audit/fingerprint --json stay JSON")
def _(tmp):
    (tmp / "prints.py").write_text(PRINTS_FORGED)
    t = f"{tmp / 'prints.py'}:attention"
    seen = []
    for argv in (("audit", t, "--dtype", "fp32", "--probes", "odd-lengths"),
                 ("fingerprint", t, "--dtype", "fp32", "--lengths", "64", "--heads", "2", "--head-dim", "16")):
        for iso in ((), ("--no-isolate",)):
            p = cli(*argv, "--json", *iso, cwd=tmp)
            try:
                doc = strict_json(p.stdout)
                seen.append(isinstance(doc, dict) and "verdict" not in doc and "PASS" in p.stderr)
            except ValueError:
                seen.append(False)
    return all(seen), f"audit, audit --no-isolate, fingerprint, fingerprint --no-isolate: {seen}"


@attack("round7", "3. --numerics raw --arch sm80 on an interpreted target (audit, fingerprint): one line, exit 2")
def _(tmp):
    a = one_line_error(cli("audit", "sglang-decode", "--numerics", "raw", "--arch", "sm80", *CHEAP, cwd=tmp), 2,
                       "--arch=sm80", "--numerics raw")
    f = one_line_error(cli("fingerprint", "sglang-decode", "--numerics", "raw", "--arch", "sm80", cwd=tmp), 2,
                       "--arch=sm80", "--numerics raw")
    return a[0] and f[0], f"audit: {a[1]}; fingerprint: {f[1][:60]}"


@attack("round7", "4. audit 'decode:fa2:bf16,mma=sm70' / 'decode:sage1:fp16' (compare refuses them): one line, exit 2")
def _(tmp):
    a = one_line_error(cli("audit", "decode:fa2:bf16,mma=sm70", cwd=tmp), 2, "decode:fa2:bf16,mma=sm70", "sm70")
    b = one_line_error(cli("audit", "decode:sage1:fp16", "--dtype", "fp16", cwd=tmp), 2, "decode:sage1:fp16")
    c = one_line_error(cli("audit", "decode:fa2,probs=fp16,mma=sm90", "--dtype", "bf16", cwd=tmp), 2, "bf16 inputs")
    return a[0] and b[0] and c[0], f"{a[1]}; {b[1][:40]}; {c[1][:40]}"


@attack("round7", "5. sum_decode block_k = 10**6 and 10**9 on S = 100 under a 3 GB address-space cap: done")
def _(tmp):
    code = ("import torch\nfrom attnum.kernels.triton.sum_decode import sum_decode\n"
            "g = torch.Generator().manual_seed(0)\nq, k, v = (torch.randn(1, 4, n, 64, generator=g).bfloat16() for n in (1, 100, 100))\n"
            "outs = [sum_decode(q, k, v, bounds=((0, 100),), block_k=b) for b in (10**6, 10**9)]\n"
            "print(all(bool(o.isfinite().all()) for o in outs), tuple(outs[0].shape))\n")
    p = _py(tmp, code, limit_bytes=3 << 30)
    return p.returncode == 0 and p.stdout.strip() == "True (1, 4, 1, 64)", \
        f"exit {p.returncode}: {(p.stdout.strip() or p.stderr.strip().splitlines()[-1:] or [''])}"[:160]


@attack("round7", "6. the public API's bad arguments (mma.matmul, matmul_block_scaled, sum_decode): AttnumInputError each")
def _(tmp):
    code = r"""
import torch, warnings
warnings.simplefilter("ignore")
from attnum import mma
from attnum.errors import AttnumInputError
from attnum.kernels.triton.sum_decode import sum_decode
bf = lambda *s: torch.randn(*s).bfloat16()
e4 = torch.randn(16, 64).to(torch.float8_e4m3fn); e4b = torch.randn(64, 8).to(torch.float8_e4m3fn)
sa, sb = torch.ones(16, 2), torch.ones(2, 8)
q, k, v = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 10, 8), torch.randn(1, 1, 10, 8)
calls = {
    "matmul batch": lambda: mma.matmul(bf(2, 16, 32), bf(3, 32, 8), arch="sm90"),
    "matmul meta": lambda: mma.matmul(bf(16, 32).to("meta"), bf(32, 8), arch="sm90"),
    "matmul sparse": lambda: mma.matmul(bf(16, 32).float().to_sparse(), bf(32, 8).float(), arch="sm90"),
    "scaled block=32.0": lambda: mma.matmul_block_scaled(e4, e4b, sa, sb, arch="sm100", kind="mxf8f6f4", block=32.0),
    "scaled block=tensor": lambda: mma.matmul_block_scaled(e4, e4b, sa, sb, arch="sm100", kind="mxf8f6f4",
                                                           block=torch.tensor(32)),
    "sum_decode d=0": lambda: sum_decode(q[..., :0], k[..., :0], v, bounds=((0, 10),)),
    "sum_decode float bounds": lambda: sum_decode(q, k, v, bounds=((0.0, 10.0),)),
    "sum_decode 3-tuple": lambda: sum_decode(q, k, v, bounds=((0, 5, 10),)),
}
bad = []
for name, call in calls.items():
    try:
        call()
        bad.append(name + ": accepted")
    except AttnumInputError as e:
        if len(str(e).splitlines()) != 1:
            bad.append(name + ": several lines")
    except Exception as e:
        bad.append(f"{name}: {type(e).__name__}")
print(bad)
"""
    p = _py(tmp, code)
    return p.returncode == 0 and p.stdout.strip() == "[]", f"exit {p.returncode}: {p.stdout.strip()[:140]}"


@attack("round7", "6. report on a store whose grid-mma row holds mma=['sm80'] / seed=[0] / no seed: named, skipped, exit 0")
def _(tmp):
    code = r"""
import json, sqlite3, sys
from attnum.store.db import Store
from attnum.studies.paper.point import Point
exact = Point(policy="fa2", format="bf16", seq_len=32, heads=1, head_dim=16, block_k=16, seed=0).config()
m = {"ratio": {"max_abs": 2.0, "mean_abs": 1.5}, "flash_vs_golden": {"max_abs": 0.01}}
for name, twin in (("list", {**exact, "mma": ["sm80"]}), ("seed", {**exact, "mma": "sm80", "seed": [0]}),
                   ("noseed", {k: v for k, v in {**exact, "mma": "sm80"}.items() if k != "seed"})):
    with Store(sys.argv[1] + "/" + name, command="t") as s:
        s.bind_spec(name="t", spec_hash="h", canonical={"name": "t"}, source="t.toml")
        s.plan([("exact", "compare", ("grid",), exact), ("twin", "compare", ("grid-mma",), twin)])
        rid = s.begin_run(command="t", n_todo=2, executor="local", jobs=1)
        for k in ("exact", "twin"):
            s.write({"key": k, "status": "done", "metrics": m, "env": {"torch": "x"}}, rid)
        s.end_run(rid, "complete")
"""
    made = subprocess.run([sys.executable, "-c", code, str(tmp)], cwd=tmp, capture_output=True, text=True, env=env(),
                          timeout=120)
    if made.returncode != 0:
        return False, made.stderr.strip().splitlines()[-1][:160]
    seen = []
    for name, skipped in (("list", True), ("seed", True), ("noseed", False)):
        p = cli("report", tmp / name, cwd=tmp)
        ok = p.returncode == 0 and "Traceback" not in p.stderr and "internal error" not in p.stderr \
            and (("row (key 'twin')" in p.stderr and "row skipped" in p.stderr) == skipped)
        seen.append(f"{name}: {'ok' if ok else 'exit ' + str(p.returncode)}")
    return all(s.endswith("ok") for s in seen), "; ".join(seen)


# the attacks on issue 42's surfaces that failed (the closing note lists every attempt)

def _plugin(tmp: Path, name: str, line: str, files: dict[str, str] | None = None) -> dict[str, str]:
    """env() with a distribution ``name`` on the path whose [attnum.families] entry point is ``line``."""
    root = tmp / name
    info = root / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[attnum.families]\n{line}\n")
    for rel, text in (files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    e = env()
    e["PYTHONPATH"] = os.pathsep.join([e["PYTHONPATH"], str(root)])
    return e


FORGED_FAMILY = """
from attnum.sweep.registry import Family, StudyKind
from attnum.studies.paper.point import Point
FAMILY = Family(name="paper", kinds=(StudyKind(name="compare", point_type=Point, from_config=Point.from_config,
                                               run=lambda point, kernels: {"ratio": {"max_abs": 1.0}}),))
"""


@attack("round7", "attack: a plugin registers a family named 'paper' (one line), or a broken one (a warning, left out)")
def _(tmp):
    out = _store_folder(tmp)
    forged = cli("report", out, cwd=tmp, env=_plugin(tmp, "evil", "paper = evilpkg:FAMILY",
                                                     {"evilpkg/__init__.py": FORGED_FAMILY}))
    broken = cli("report", out, cwd=tmp, env=_plugin(tmp, "brk", "toy = no_such_module_xyz:FAMILY"))
    lines = [ln for ln in forged.stderr.splitlines() if not ln.startswith("attnum: warning: study family")]
    a = forged.returncode == 2 and len(lines) == 1 and "'paper' is registered twice" in lines[0] and "evil" in lines[0]
    warned = [ln for ln in broken.stderr.splitlines() if ln.startswith("attnum: warning: study family entry point")]
    b = broken.returncode == 0 and "Traceback" not in broken.stderr and any("brk" in ln for ln in warned)
    return a and b, f"forged: exit {forged.returncode}: {lines[-1][:80] if lines else ''}; broken plugin: exit " \
                    f"{broken.returncode}, {len(warned)} warning(s)"


LIAR_TARGETS = """
import torch
from torch.utils._pytree import tree_map
class Liar(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **(kwargs or {}))
        if func in (torch.Tensor.sub, torch.sub, torch.Tensor.__sub__, torch.Tensor.__rsub__, torch.Tensor.abs,
                    torch.abs) and isinstance(out, torch.Tensor):
            return torch.zeros_like(out)
        return out.as_subclass(Liar) if isinstance(out, torch.Tensor) and out.dim() > 0 else out
class DispatchLiar(torch.Tensor):
    @staticmethod
    def __new__(cls, elem):
        r = torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype, device=elem.device,
                                                strides=elem.stride())
        r.elem = elem
        return r
    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        unwrap = lambda x: x.elem if isinstance(x, DispatchLiar) else x
        out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))
        if func.__name__.startswith(("sub", "abs")):
            out = torch.zeros_like(out)
        return tree_map(lambda x: DispatchLiar(x) if isinstance(x, torch.Tensor) else x, out)
def sevens(q, v):
    return torch.full((*q.shape[:-1], v.shape[-1]), 7.0, dtype=q.dtype)
def liar(q, k, v, **kw):
    return sevens(q, v).as_subclass(Liar)
def dispatch_liar(q, k, v, **kw):
    return DispatchLiar(sevens(q, v))
def sparse(q, k, v, **kw):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, **kw).to_sparse()
"""


@attack("round7", "attack: outputs of 7s as a tensor subclass that zeroes |out - golden|, or sparse: FAILED in both modes")
def _(tmp):
    (tmp / "liars.py").write_text(LIAR_TARGETS)
    seen = []
    for fn in ("liar", "dispatch_liar", "sparse"):
        for iso in ((), ("--no-isolate",)):
            p = cli("audit", f"{tmp / 'liars.py'}:{fn}", "--dtype", "fp32", "--probes", "odd-lengths", *iso, cwd=tmp)
            if p.returncode != 1 or "FAILED" not in p.stdout:
                seen.append(f"{fn}{' --no-isolate' if iso else ''}: exit {p.returncode}")
    return not seen, "; ".join(seen) or "6 of 6 FAILED, exit 1"


@attack("round7", "attack: spec-audit --no-isolate --json with a sampler printing {\"verdict\": \"pass\"}: JSON alone")
def _(tmp):
    (tmp / "s.py").write_text("import os\nfrom attnum.sampling import reference_sampler\n"
                              "print('{\"verdict\": \"pass\"}')\ndef sampler(p, q, d, generator=None):\n"
                              "    os.write(1, b'{\"verdict\": \"pass\"}\\n')\n"
                              "    return reference_sampler(p, q, d, generator=generator)\n")
    p = cli("spec-audit", f"{tmp / 's.py'}:sampler", "--cases", "dirichlet", "--samples", "2000", "--json",
            "--no-isolate", cwd=tmp)
    try:
        doc = strict_json(p.stdout)
        ok = isinstance(doc, dict) and "target" in doc
    except ValueError:
        ok = False
    return ok, f"exit {p.returncode}, stdout {'one JSON document' if ok else repr(p.stdout[:60])}"


@attack("round7", "attack: audit --list needs no target; --list --json is JSON")
def _(tmp):
    a = cli("audit", "--list", cwd=tmp)
    b = cli("audit", "--list", "--json", cwd=tmp)
    try:
        n = len(strict_json(b.stdout))
    except ValueError:
        n = 0
    return a.returncode == 0 and "odd-lengths" in a.stdout and b.returncode == 0 and n > 10, \
        f"--list exit {a.returncode}; --list --json exit {b.returncode}, {n} probes"


@attack("round7", "attack: the public module and the old paths: attnum.mma after import attnum; python -m OLD.PATH")
def _(tmp):
    a = _py(tmp, "import attnum; print(attnum.mma.matmul.__module__)")
    b = subprocess.run([sys.executable, "-m", "attnum.kernels.triton_selftest", "sm90"], cwd=tmp, capture_output=True,
                       text=True, timeout=300, env=env())
    ok = a.returncode == 0 and a.stdout.strip() == "attnum.numerics.mma.dense" and b.returncode == 0 \
        and "Traceback" not in b.stderr
    return ok, f"attnum.mma: exit {a.returncode}; python -m attnum.kernels.triton_selftest: exit {b.returncode}"


@attack("round7", "attack: mma.matmul of a 16 x 32 tile expanded to 10**6 batches (stride 0): one line, under a 3 GB cap")
def _(tmp):
    code = ("import torch\nfrom attnum import mma\nfrom attnum.errors import AttnumInputError\n"
            "a = torch.randn(1, 16, 32).bfloat16().expand(10**6, 16, 32)\n"
            "try:\n    mma.matmul(a, torch.randn(32, 8).bfloat16(), arch='sm90'); print('accepted')\n"
            "except AttnumInputError as e:\n    print('refused:', str(e)[:80])\n")
    p = _py(tmp, code, limit_bytes=3 << 30)
    return p.returncode == 0 and p.stdout.startswith("refused"), \
        f"exit {p.returncode}: {(p.stdout.strip() or p.stderr.strip()[-100:])[:120]}"


# -- round 7: issue 42's fingerprint attacks ---------------------------------------------------------

FP_SMALL = ["--lengths", "64,160", "--heads", "4", "--head-dim", "16"]


@attack("round7", "fingerprint of a kernel returning its bf16 values upcast to float32: explained, dtype named")
def _(tmp):
    t = target(tmp, "upcast", "from attnum.attention.flash import flash_attention\n"
                              "def attention(q, k, v, **kw):\n"
                              "    return flash_attention(q, k, v, policy='fa2:bf16', block_k=32).to(q.dtype).float()\n")
    p = cli("fingerprint", t, *FP_SMALL, "--json", cwd=tmp)
    doc = strict_json(p.stdout) if p.returncode == 0 else {}
    ok = doc.get("policy") is not None and doc.get("output_dtype") == "float32" and doc.get("bit_exact_fraction") == 1.0
    return ok, f"exit {p.returncode}: policy {doc.get('policy')}, output {doc.get('output_dtype')}"


for _dt, _expr in (("int16", "out.to(torch.int16)"), ("bool", "out > 0"), ("float8", "out.to(torch.float8_e4m3fn)"),
                   ("complex", "out.to(torch.complex64)"), ("meta", "torch.empty(out.shape, device='meta')")):
    @attack("round7", f"fingerprint of a target returning {_dt} outputs (--no-isolate): one line, exit 2")
    def _(tmp, _expr=_expr, _dt=_dt):
        t = target(tmp, "odd", f"def attention(q, k, v, **kw):\n    out = F.scaled_dot_product_attention(q.float(), "
                               f"k.float(), v.float())\n    return {_expr}\n")
        return one_line_error(cli("fingerprint", t, *FP_SMALL, "--no-isolate", cwd=tmp), 2, "target output",
                              after_progress=True)


@attack("round7", "fingerprint of a data-dependent kernel (fp32 scores while max|q| <= 60): not bit-exact 1.0")
def _(tmp):
    t = target(tmp, "switch", "from attnum.attention.flash import flash_attention\n"
                              "def attention(q, k, v, **kw):\n"
                              "    p = 'fa2:bf16' if float(q.float().abs().max()) <= 60 else 'fa2:bf16,scores=bf16'\n"
                              "    return flash_attention(q, k, v, policy=p, block_k=32).to(q.dtype)\n")
    p = cli("fingerprint", t, "--lengths", "64,160", "--heads", "8", "--head-dim", "16", "--json", cwd=tmp)
    doc = strict_json(p.stdout) if p.returncode == 0 else {}
    ok = p.returncode == 0 and doc.get("bit_exact_fraction") != 1.0 and bool(doc.get("unexplained"))
    return ok, f"exit {p.returncode}: bit-exact {doc.get('bit_exact_fraction')}, {str(doc.get('unexplained'))[:80]}"


for _t in ("0", "-5"):
    @attack("round7", f"fingerprint --timeout {_t}: refused as audit refuses it, one line, exit 2")
    def _(tmp, _t=_t):
        return one_line_error(cli("fingerprint", "flash:fa2:bf16", "--timeout", _t, *FP_SMALL, cwd=tmp), 2, "timeout=")


@attack("round7", "fingerprint --heads 1000000: sized before allocating, one line, exit 2, within 60 s")
def _(tmp):
    t0 = time.perf_counter()
    ok, seen = one_line_error(cli("fingerprint", "flash:fa2:bf16", "--heads", "1000000", "--no-isolate", cwd=tmp), 2,
                              "--heads=1000000", "memory budget")
    return ok and time.perf_counter() - t0 < 60, seen


@attack("round7", "fingerprint --lengths 30000 under a 4 GB cap: one line, exit 2, no internal error")
def _(tmp):
    code = ("import resource, sys\nresource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))\n"
            "from attnum.cli import main\nsys.exit(main(['fingerprint', 'flash:fa2:bf16', '--lengths', '30000', "
            "'--no-isolate']))\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp, capture_output=True, text=True, timeout=600, env=env())
    return one_line_error(p, 2, "--lengths=30000", after_progress=True)


for _exc in ("RuntimeError", "ValueError", "AssertionError", "MemoryError"):
    @attack("round7", f"fingerprint of a target raising {_exc} on the fitting inputs: exit 1, 'target crashed'")
    def _(tmp, _exc=_exc):
        t = target(tmp, "raises", f"def attention(q, k, v, **kw):\n    if bool(q.any()):\n        raise {_exc}('no')\n"
                                  "    return F.scaled_dot_product_attention(q, k, v, **kw)\n")
        p = cli("fingerprint", t, *FP_SMALL, cwd=tmp)
        last = (p.stderr.strip().splitlines() or [""])[-1]
        ok = p.returncode == 1 and "internal error" not in p.stderr and last.startswith(
            f"attnum fingerprint: the target crashed: {_exc}")
        return ok, f"exit {p.returncode}: {last[:140]}"


@attack("round7", "fingerprint --matmul a callable that raises: on its trial tile one line, exit 2; later: the "
                  "document kept, exit 1")
def _(tmp):
    (tmp / "mm.py").write_text("import itertools\n_n = itertools.count()\n"
                               "def always(a, b, c):\n    raise RuntimeError('boom')\n"
                               "def mm(a, b, c):\n    if next(_n):\n        raise RuntimeError('boom')\n"
                               "    return a.float() @ b.float() + c\n")
    ok_early, seen_early = one_line_error(cli("fingerprint", "flash:fa2:bf16", *FP_SMALL, "--matmul",
                                              f"{tmp / 'mm.py'}:always", "--json", "--no-isolate", cwd=tmp), 2,
                                          "--matmul", "RuntimeError: boom")
    p = cli("fingerprint", "flash:fa2:bf16", *FP_SMALL, "--matmul", f"{tmp / 'mm.py'}:mm", "--json", "--no-isolate",
            cwd=tmp)
    doc = strict_json(p.stdout) if p.stdout.strip().startswith("{") else {}
    ok = p.returncode == 1 and "RuntimeError: boom" in str(doc.get("mma")) and "internal error" not in p.stderr
    return ok and ok_early, f"always: {seen_early[:70]}; later: exit {p.returncode}: mma {str(doc.get('mma'))[:60]}"


@attack("round7", "fingerprint vllm-mla-decode (NotImplementedError from its adapter): one line, exit 2")
def _(tmp):
    return one_line_error(cli("fingerprint", "vllm-mla-decode", *FP_SMALL, cwd=tmp), 2, "NotImplementedError",
                          after_progress=True)


# -- round 7: attacks on the surfaces of issue 42's turn (the bug corpus and versioned fetches, the address
# checks, the fingerprint's new families) ---------------------------------------------------------------

@attack("round7", "surfaces: audit vllm-unified@ (no version): one line, exit 2, never the default unnamed")
def _(tmp):
    return one_line_error(cli("audit", "vllm-unified@", "--probes", "odd-lengths", "--dtype", "fp16", cwd=tmp), 2,
                          "target='vllm-unified@'", "0.30.0")


TWO_VERSIONS = """
import torch, warnings
warnings.simplefilter("ignore")
from attnum.kernels.registry import resolve
from attnum.kernels.wheels import source as w
for v in ("1.0.3", "1.0.6"):
    w.fetch("sageattention", v, quiet=True)
old = resolve("sage1-triton@1.0.3", "cpu", numerics="raw")
new = resolve("sage1-triton@1.0.6", "cpu", numerics="raw")
q = torch.randn(1, 1, 8, 64, dtype=torch.float16)
try:
    old.fn(q, q, q)
except NotImplementedError:
    pass
try:
    new.fn(q, q, q)
    second = "ran"
except Exception as e:
    second = type(e).__name__
print(w._LOADED["sageattention"], second)
"""


@attack("round7", "surfaces: sage1-triton@1.0.3 and @1.0.6 resolved in one process: the first runs 1.0.3, the "
                  "second is refused")
def _(tmp):
    p = _py(tmp, TWO_VERSIONS)
    got = p.stdout.strip().splitlines()[-1:] or [p.stderr.strip()[-120:]]
    return got == ["1.0.3 AttnumEnvironmentError"], f"exit {p.returncode}: loaded, second call: {got[0][:120]}"


OFFSET_48 = """import torch
import torch.nn.functional as F
import triton
import triton.language as tl

@triton.jit
def _touch(q_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(q_ptr + offs - (1 << 46), mask=m, other=0.0)  # 2**48 bytes before q: a fault on a GPU
    tl.store(o_ptr + offs, tl.load(o_ptr + offs, mask=m) + 0.0 * x, mask=m)

def attention(q, k, v, attn_mask=None, is_causal=False, scale=None, **kw):
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale).contiguous()
    _touch[(1,)](q.contiguous(), out, min(16, out.numel()), BLOCK=16)
    return out
"""


@attack("round7", "surfaces: a Triton kernel reading 2**48 bytes before its input (into the tag bits): out of "
                  "bounds, not PASSED")
def _(tmp):
    (tmp / "wrap.py").write_text(OFFSET_48)
    p = cli("audit", f"triton-interpret:{tmp / 'wrap.py'}:attention", "--probes", "odd-lengths", "--dtype", "fp32",
            "--numerics", "raw", cwd=tmp)
    last = (p.stdout.strip().splitlines() or [""])[-1]
    return p.returncode == 1 and "out of bounds" in last, f"exit {p.returncode}: {last[-80:]}"


@attack("round7", "surfaces: fingerprint of flash:fa2:bf16,mma=sm80 (a tensor-core policy): explained, exit 0")
def _(tmp):
    p = cli("fingerprint", "flash:fa2:bf16,mma=sm80", *FP_SMALL, "--json", cwd=tmp)
    doc = strict_json(p.stdout) if p.returncode == 0 else {}
    ok = "mma=sm80" in str(doc.get("policy")) and doc.get("bit_exact_fraction") == 1.0
    return ok, f"exit {p.returncode}: {doc.get('policy') or (p.stderr.strip().splitlines() or [''])[-1][:100]}"


@attack("round7", "surfaces: fingerprint --memory 9999T (more than the machine): one line, exit 2, before work")
def _(tmp):
    return one_line_error(cli("fingerprint", "flash:fa2:bf16", "--heads", "1000000", "--memory", "9999T",
                              "--no-isolate", cwd=tmp), 2, "--memory='9999T'", "at most")


HAND_EDITED_BUGS = """
import sys
from attnum.audit.bugs.point import BugPoint
from attnum.store.db import Store
p = BugPoint(case="ring-flash-attn-update-out-and-lse-nan", role="broken", target="ring-flash-attn-merge@0.1.8",
             probes=("merge-empty-chain",))
with Store(sys.argv[1], command="by hand") as store:
    store.bind_spec(name="bugs", spec_hash="by-hand", canonical={"name": "bugs"}, source="by hand")
    store.plan([(p.key, p.kind, ("bugs",), p.config())])
    run = store.begin_run(command="by hand", n_todo=1, executor="local", jobs=1)
    store.write({"key": p.key, "status": "done", "metrics": {"verdict": ["caught"]}, "error": None,
                 "started_at": 0.0, "wall_s": 1.0, "env": {"attnum": "by hand"}, "worker": "me"}, run)
    store.end_run(run, "complete")
"""


@attack("round7", "surfaces: report on a bugs store whose row's verdict is a list (written by hand): skipped, exit 0")
def _(tmp):
    made = subprocess.run([sys.executable, "-c", HAND_EDITED_BUGS, str(tmp / "o")], capture_output=True, text=True,
                          env=env(), timeout=120)
    p = cli("report", tmp / "o", cwd=tmp)
    ok = made.returncode == 0 and p.returncode == 0 and "row skipped" in p.stderr and "internal error" not in p.stderr
    return ok, f"exit {p.returncode}: {(p.stderr.strip().splitlines() or [''])[-1][:110]}"


@attack("round7", "surfaces: bugs run --out a sweep's store: refused before any download (the cache stays empty)")
def _(tmp):
    out = _store_folder(tmp)
    p = cli("bugs", "run", "sageattention-qlen-ne-kvlen", "--out", out, cwd=tmp,
            env={**env(), "ATTNUM_CACHE": str(tmp / "cache")})
    ok, seen = one_line_error(p, 2, "different spec")
    return ok and not (tmp / "cache").exists(), seen


def main() -> int:
    only = sys.argv[1:]
    results = []
    for section, name, fn in ATTACKS:
        if only and not any(o in name or o == section for o in only):  # a name's words, or a section
            continue
        with tempfile.TemporaryDirectory(prefix="attnum-attack-") as d:
            t0 = time.perf_counter()
            try:
                ok, seen = fn(Path(d))
            except Exception as exc:  # noqa: BLE001 - a replay that breaks is a misbehaviour to report
                ok, seen = False, f"{type(exc).__name__}: {exc}"[:160]
            results.append(ok)
            print(f"{'ok ' if ok else 'BAD'}  {section:8s} {name}  [{time.perf_counter() - t0:.0f}s] {seen}", flush=True)
    print(f"{sum(results)} of {len(results)} attacks behaved as issues 13, 19, 32 and 42 ask")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
