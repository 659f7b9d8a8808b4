"""The in-memory tar reader behind sdist extraction reads what tarfile reads (all three formats)."""

from __future__ import annotations

import io
import os
import stat
import tarfile

import pytest

from porter.errors import InputError
from porter.upgrade.sources import _TarError, extract_archive, iter_tar

LONG_DIR = "pkg-1.0/" + "/".join(["deeply_nested_directory_name"] * 5)  # > 100 characters: a long-name header


def _tar(fmt: int, members: list[tuple[str, bytes | None]], gz: bool = False) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gz else "w", format=fmt) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tf.addfile(info)
            else:
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


MEMBERS = [
    ("pkg-1.0/", None),
    ("pkg-1.0/pkg/__init__.py", b"x = 1\n"),
    (f"{LONG_DIR}/module_with_a_rather_long_name.py", b"def f():\n    return 'long'\n"),
    ("pkg-1.0/pkg/caf\u00e9.py", "y = '\u00e9'\n".encode()),
    ("pkg-1.0/pkg/empty.py", b""),
    ("pkg-1.0/pkg/big.py", b"z = 0\n" * 300),  # spans several blocks
]


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT])
def test_reader_matches_tarfile(fmt):
    data = _tar(fmt, MEMBERS)
    mine = [(name.rstrip("/") if content is None else name, None if content is None else bytes(content))
            for name, _, content in iter_tar(data)]
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        ref = [(m.name, tf.extractfile(m).read() if m.isfile() else None) for m in tf.getmembers()]
    assert mine == ref
    assert any(len(name) > 100 for name, _ in mine)  # the long name came through its extension header


def test_corrupt_header_is_refused():
    data = bytearray(_tar(tarfile.PAX_FORMAT, MEMBERS))
    data[10] ^= 0xFF  # inside the first header's name: the checksum no longer matches
    with pytest.raises(_TarError):
        list(iter_tar(bytes(data)))
    whole = _tar(tarfile.PAX_FORMAT, MEMBERS)
    with pytest.raises(_TarError, match="unexpected end"):
        list(iter_tar(whole[: whole.find(b"z = 0\n") + 100]))  # inside the last member's body


def test_extraction_writes_python_files_read_only(tmp_path):
    archive = tmp_path / "pkg-1.0.tar.gz"
    archive.write_bytes(_tar(tarfile.PAX_FORMAT, MEMBERS + [("pkg-1.0/pkg/__init__.py", b"x = 2\n")], gz=True))
    dest = tmp_path / "out"
    assert extract_archive(archive, dest) == 5
    assert (dest / "pkg" / "__init__.py").read_text() == "x = 2\n"  # a later member of the same name wins
    long_file = dest / LONG_DIR.split("/", 1)[1] / "module_with_a_rather_long_name.py"
    assert long_file.read_text().startswith("def f()")
    for dirpath, _, names in os.walk(dest):
        for name in names:
            assert stat.S_IMODE(os.stat(os.path.join(dirpath, name)).st_mode) == 0o444


def test_extraction_takes_the_bytes_already_read(tmp_path, monkeypatch):
    """extract_archive_by_digest reads the archive once: the bytes it hashed are the ones extracted."""
    from pathlib import Path

    from porter.upgrade import sources

    archive = tmp_path / "pkg-1.0.tar.gz"
    archive.write_bytes(_tar(tarfile.PAX_FORMAT, MEMBERS, gz=True))
    (tmp_path / "trees").mkdir()
    reads: list[Path] = []
    original = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: reads.append(self) or original(self))
    digest, extracted = sources.extract_archive_by_digest(archive, tmp_path / "trees")
    assert extracted and reads.count(archive) == 1
    assert (tmp_path / "trees" / digest / "pkg" / "__init__.py").read_text() == "x = 1\n"
    assert (tmp_path / "trees" / digest / "pkg" / "big.py").read_bytes() == b"z = 0\n" * 300


def test_truncated_gzip_is_an_input_error(tmp_path):
    archive = tmp_path / "pkg-1.0.tar.gz"
    archive.write_bytes(_tar(tarfile.PAX_FORMAT, MEMBERS, gz=True)[:-20])
    with pytest.raises(InputError, match="not a readable tar archive"):
        extract_archive(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_archives_prepared_in_a_pool_are_fresh_then_cached(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from porter.upgrade.sources import Sources

    archive = tmp_path / "pkg-1.0.tar.gz"
    archive.write_bytes(_tar(tarfile.PAX_FORMAT, MEMBERS, gz=True))
    broken = tmp_path / "broken-1.0.tar.gz"
    broken.write_bytes(archive.read_bytes()[:-20])
    sources = Sources(tmp_path / "cache")
    with ThreadPoolExecutor(2) as pool:
        sources.prepare_archives([archive, None, broken, tmp_path / "missing.tar.gz"], pool, min_bytes=0)
        tree = sources.archive_tree(archive, "1.0")
        with pytest.raises(InputError, match="not a readable tar archive"):  # reported where it is resolved
            sources.archive_tree(broken, "1.0")
    assert not tree.from_cache and (tree.root / "pkg" / "big.py").read_bytes() == b"z = 0\n" * 300
    again = Sources(tmp_path / "cache").archive_tree(archive, "1.0")
    assert again.from_cache and again.root == tree.root
