"""``--out``: an output folder, checked before any work starts.

Every command that writes into a folder (sweep, reproduce, diverge, spec, ring) takes it through
:func:`out_folder`: an existing file, or a new name that reads like a database file
(``--out x.sqlite``, which used to become a store that ``runs`` and ``export`` could not find), is
refused in one line; a folder that cannot be created names the reason.
"""

from __future__ import annotations

from pathlib import Path

from attnum.errors import AttnumEnvironmentError, bad_value

_FILE_LIKE = (".sqlite", ".sqlite3", ".db")


def check_out_folder(path: str | Path, param: str = "--out") -> Path:
    """``path`` if it can be an output folder (it may not exist yet); raise in one line otherwise."""
    if isinstance(path, str) and not path.strip():
        raise bad_value(param, path, "a folder name (an empty name is not the current folder; say '.' for that)")
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise bad_value(param, str(p), "a folder, not an existing file (attnum writes several files into it)")
    if not p.exists() and p.suffix.lower() in _FILE_LIKE:
        raise bad_value(param, str(p), f"a folder: the store is written as FOLDER/attnum.sqlite "
                                       f"(say --out {p.with_suffix('')})")
    for parent in p.parents:
        if parent.exists() and not parent.is_dir():
            raise bad_value(param, str(p), f"a folder path ({parent} is a file)")
    return p


def make_out_folder(path: str | Path, param: str = "--out") -> Path:
    """Check ``path`` and create it (with its parents); a disk that refuses is one line."""
    p = check_out_folder(path, param)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise AttnumEnvironmentError(f"{p}: cannot create the output folder ({err.strerror or err}); "
                                     f"choose a {param} you can write to") from None
    return p
