"""Where upstream and plugin trees come from: git (ls-remote, bare mirrors -- partial clones,
`--filter=blob:none` -- and `git archive` of any ref), package indexes (the release list from
pip's configured index through the simple API, PEP 691 JSON or PEP 503 HTML; the sdist when the
release has one, a wheel through `pip download --no-deps` otherwise; only Python sources are
kept) and local directories or archives.

Everything lands read-only in the cache (`<cache_dir>/trees/...`); a user checkout is only ever
read (`git archive` reads objects, never the working tree or HEAD). Offline (config or a network
failure) answers from the cache and says so; nothing cached and no network is an
EnvironmentProblem (exit 3) that says what to do.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import stat
import tempfile
import time
import urllib.error  # urllib.request (http.client, email, ssl: ~40 ms) only when a run fetches
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from packaging.version import InvalidVersion, Version

from porter.errors import EnvironmentProblem, InputError
from porter.fsutil import atomic_write_text

DEFAULT_INDEX = "https://pypi.org/simple/"
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
PIP_PLATFORMS = ("manylinux_2_31_x86_64", "manylinux_2_28_x86_64", "manylinux_2_24_x86_64",
                 "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64", "any")
COMPLETE = ".porter-complete"
EXTENSIONS = ".porter-extensions.txt"
DIGESTS = "digests.json"  # archive (path, size, mtime, inode) -> content digest, so a warm run reads no archive
_VERSIONISH = re.compile(r"^v?\d")
_REF_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/\-]*$")
_SHA = re.compile(r"^[0-9a-f]{7,40}$")
# Top-level folders of an sdist that an upstream tree's index never reads (it reads only the
# package folders: `pkg/`, `src/pkg/`, `python/pkg/`): left out of an upstream's lean tree, which
# for vllm is a third fewer files to write.
LEAN_SKIPPED = frozenset({"tests", "test", "docs", "examples", "benchmarks"})


@dataclass(frozen=True)
class Tree:
    """A materialized source tree of one version."""

    root: Path
    label: str  # what the user asked for: "0.13.0", "main", "v0.11.0", "local"
    kind: str  # local | pypi | git | archive
    version: Version | None = None  # release number when known (guards need it)
    commit: str = ""
    origin: str = ""  # URL, file or directory it came from
    from_cache: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "kind": self.kind, "version": str(self.version) if self.version else None,
                "commit": self.commit or None, "origin": self.origin, "root": str(self.root), "from_cache": self.from_cache}


def parse_release(text: str) -> Version | None:
    """`0.13.0`, `v0.13.0` -> Version; anything else (main, a SHA) -> None."""
    text = text.strip()
    if not _VERSIONISH.match(text):
        return None
    try:
        return Version(text[1:] if text.startswith("v") else text)
    except InvalidVersion:
        return None


def check_ref_syntax(ref: str, what: str = "ref") -> None:
    """A version-looking ref must be a valid PEP 440 version; any other ref a plausible git ref name."""
    if not ref or not ref.strip():
        raise InputError(f"empty {what}", hint="give a release (0.13.0), a tag (v0.13.0), a branch (main) or a commit")
    if _VERSIONISH.match(ref) and parse_release(ref) is None and not _SHA.match(ref):
        raise InputError(f"malformed version {ref!r} for {what}",
                         hint="use a PEP 440 release such as 0.13.0 or 2.10.0rc1, or a git tag such as v0.13.0")
    if not _REF_OK.match(ref) or ".." in ref or ref.endswith((".lock", "/", ".")):
        raise InputError(f"{ref!r} is not a valid version or git ref for {what}",
                         hint="give a release (0.13.0), a tag (v0.13.0), a branch (main) or a commit sha")


def nearby_releases(releases: Any, wanted: Version, count: int = 5) -> list[str]:
    """Final releases of the same major.minor as `wanted`, else the ones around it, in version order."""
    final = sorted((v for v in releases if (p := parse_release(v)) is not None and not p.is_prerelease), key=Version)
    same = [v for v in final if Version(v).release[:2] == wanted.release[:2]]
    if same:
        return same[-count:]
    below = [v for v in final if Version(v) < wanted]
    above = [v for v in final if Version(v) > wanted]
    return below[-2:] + above[:2]


def _pip_config_files(env: dict[str, str]) -> list[Path]:
    """pip's configuration files, lowest priority first (site-wide, user, virtualenv, PIP_CONFIG_FILE)."""
    home = Path(env.get("HOME", str(Path.home())))
    xdg_dirs = env.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":")
    files = [Path(d) / "pip" / "pip.conf" for d in xdg_dirs] + [Path("/etc/pip.conf")]
    files += [home / ".pip" / "pip.conf", Path(env.get("XDG_CONFIG_HOME", str(home / ".config"))) / "pip" / "pip.conf"]
    if env.get("VIRTUAL_ENV"):
        files.append(Path(env["VIRTUAL_ENV"]) / "pip.conf")
    if env.get("PIP_CONFIG_FILE") and env["PIP_CONFIG_FILE"] != os.devnull:
        files.append(Path(env["PIP_CONFIG_FILE"]))
    return files


def index_url(env: dict[str, str] | None = None) -> str:
    """The package index pip would use: `PIP_INDEX_URL`, else `index-url` of pip's config files
    (`[global]`, `[download]`, `[install]`; later files win), else PyPI's simple API."""
    import configparser

    env = dict(os.environ) if env is None else env
    if env.get("PIP_INDEX_URL"):
        return env["PIP_INDEX_URL"].split()[0]
    found = ""
    for path in _pip_config_files(env):
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read(path, encoding="utf-8")
        except (configparser.Error, OSError, UnicodeDecodeError):
            continue
        for section in ("global", "download", "install"):
            if parser.has_option(section, "index-url"):
                found = parser.get(section, "index-url").split()[0]
    return found or DEFAULT_INDEX


def normalize_project(name: str) -> str:
    """PEP 503 name normalisation (`vllm_ascend` -> `vllm-ascend`)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def version_of_file(filename: str) -> str | None:
    """The release a distribution file belongs to: `vllm-0.18.0.tar.gz`, `vllm-0.18.0-cp38-abi3-....whl`."""
    if filename.endswith(".whl"):
        parts = filename[:-4].split("-")
        return parts[1] if len(parts) >= 5 else None
    for ext in (".tar.gz", ".zip", ".tar.bz2", ".tgz"):
        if filename.endswith(ext):
            stem = filename[: -len(ext)]
            return stem.rsplit("-", 1)[1] if "-" in stem else None
    return None


class _LinkParser:
    """PEP 503 HTML: `<a href="URL#sha256=..." data-yanked>filename</a>` per file."""

    def __init__(self) -> None:
        from html.parser import HTMLParser

        self.links: list[dict[str, Any]] = []
        outer = self

        class Parser(HTMLParser):
            current: dict[str, Any] | None = None

            def handle_starttag(self, tag, attrs):
                if tag == "a":
                    self.current = dict(attrs) | {"text": ""}

            def handle_data(self, data):
                if self.current is not None:
                    self.current["text"] += data

            def handle_endtag(self, tag):
                if tag == "a" and self.current is not None:
                    outer.links.append(self.current)
                    self.current = None

        self.parser = Parser()

    def feed(self, text: str) -> list[dict[str, Any]]:
        self.parser.feed(text)
        return self.links


def parse_simple_index(base_url: str, content_type: str, body: bytes) -> dict[str, list[dict[str, Any]]]:
    """{version: [files]} from a simple-API project page (PEP 691 JSON or PEP 503 HTML); file
    URLs are absolute (a relative `href` is resolved against the page's URL)."""
    from urllib.parse import urldefrag, urljoin

    files: list[dict[str, Any]] = []
    if "json" in content_type:
        doc = json.loads(body)
        for f in doc.get("files", []):
            files.append({"filename": f.get("filename", ""), "url": urljoin(base_url, f.get("url", "")),
                          "sha256": (f.get("hashes") or {}).get("sha256"), "size": f.get("size"),
                          "yanked": bool(f.get("yanked"))})
    else:
        for link in _LinkParser().feed(body.decode("utf-8", errors="replace")):
            href = link.get("href") or ""
            url, fragment = urldefrag(urljoin(base_url, href))
            sha = fragment.split("=", 1)[1] if fragment.startswith("sha256=") else None
            name = (link.get("text") or "").strip() or url.rsplit("/", 1)[-1]
            files.append({"filename": name, "url": url, "sha256": sha, "size": None, "yanked": "data-yanked" in link})
    releases: dict[str, list[dict[str, Any]]] = {}
    for f in files:
        version = version_of_file(f["filename"])
        if version is None:
            continue
        f["packagetype"] = "bdist_wheel" if f["filename"].endswith(".whl") else "sdist"
        releases.setdefault(version, []).append(f)
    return releases


def git_url_rewrites() -> list[tuple[str, str]]:
    """git's `url.<base>.insteadOf <prefix>` rules (system and global config): (prefix, base)."""
    from porter.proc import run

    result = run(["git", "config", "--get-regexp", r"^url\..*\.insteadof$"], timeout=10)
    rules: list[tuple[str, str]] = []
    for line in (result.stdout or "").splitlines() if result.ok else []:
        key, _, prefix = line.partition(" ")
        base = key[len("url."):-len(".insteadof")]
        if prefix and base:
            rules.append((prefix, base))
    return rules


def rewrite_url(url: str, rules: list[tuple[str, str]]) -> str:
    """The URL git really contacts: the longest matching insteadOf prefix replaced by its base."""
    matches = [(prefix, base) for prefix, base in rules if url.startswith(prefix)]
    if not matches:
        return url
    prefix, base = max(matches, key=lambda m: len(m[0]))
    return base + url[len(prefix):]


def _is_local(url: str) -> bool:
    return url.startswith("file://") or Path(url).expanduser().is_dir()


def _host(url: str) -> str:
    from urllib.parse import urlparse

    return urlparse(url).netloc or url


def slug_of(url: str) -> str:
    tail = re.sub(r"\.git$", "", url.rstrip("/")).split("/")[-2:]
    digest = hashlib.sha1(url.encode()).hexdigest()[:8]
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", "-".join(tail)) + "-" + digest


def _git_reason(exc: Any) -> str:
    """The last meaningful line of git's stderr (`fatal: unable to access ...`)."""
    lines = [ln.strip().removeprefix("stderr: ").strip("'").strip() for ln in str(getattr(exc, "stderr", "") or exc).splitlines()]
    lines = [ln for ln in lines if ln]
    fatal = [ln for ln in lines if ln.startswith(("fatal:", "error:"))]
    return ((fatal or lines)[-1] if lines else str(exc))[:300]


def _remove_tree(root: Path) -> None:
    def onerror(func, path, _exc):  # read-only files inside: make writable and retry
        os.chmod(path, stat.S_IWUSR | stat.S_IRUSR | stat.S_IXUSR)
        func(path)

    if root.exists():
        shutil.rmtree(root, onerror=onerror)


def _wanted(name: str) -> bool:
    return name.endswith((".py", ".pyi")) and "/." not in f"/{name}"


def _extension_module(name: str) -> str | None:
    """`vllm/_C.abi3.so` -> `vllm._C` (compiled modules are recorded so the index calls them unknown)."""
    if not name.endswith((".so", ".pyd")):
        return None
    stem = name.rsplit("/", 1)
    base = stem[-1].split(".")[0]
    parts = (stem[0].split("/") if len(stem) == 2 else []) + [base]
    if all(p.isidentifier() for p in parts):
        return ".".join(parts)
    return None


class _TarError(Exception):
    """A tar stream this reader cannot take (bad header, truncated member)."""


_TAR_FILE_TYPES = (b"0", b"\0", b"7")  # regular, old regular, contiguous (tarfile's isfile())
_TAR_SKIPPED_TYPES = (b"1", b"2", b"3", b"4", b"5", b"6", b"V", b"M", b"N", b"D")  # links, devices, dirs, fifos, volume
_TAR_NAME_TYPES = (b"L", b"K", b"S")  # GNU types whose prefix field is not a name prefix (tarfile's GNU_TYPES)


def _tar_number(field: bytes) -> int:
    """A numeric header field: NUL/space-padded octal, or GNU base-256 when the high bit is set."""
    if field and field[0] & 0x80:
        value = int.from_bytes(field[1:], "big")
        return value - (1 << (8 * (len(field) - 1))) if field[0] == 0xFF else value
    text = field.split(b"\0", 1)[0].strip()
    try:
        return int(text, 8) if text else 0
    except ValueError:
        raise _TarError(f"invalid number field {field!r}") from None


def _tar_text(field: bytes) -> str:
    return field.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _pax_records(data: bytes) -> dict[str, str]:
    """`<len> <key>=<value>\\n` records of a pax extended header."""
    out: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        space = data.find(b" ", pos)
        if space < 0:
            break
        try:
            length = int(data[pos:space])
        except ValueError:
            raise _TarError("invalid pax header") from None
        if length <= 0:
            raise _TarError("invalid pax header")
        key, _, value = data[space + 1: pos + length - 1].partition(b"=")
        out[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return out


def iter_tar(data: bytes | memoryview):
    """(name, type flag, content or None) per member of an uncompressed tar held in memory; content
    only for regular files. ustar, pax (`path`, `size`) and GNU long names, as tarfile reads them,
    at a fraction of its cost (no seeks, no TarInfo per member). Raises _TarError on a bad header."""
    view = memoryview(data)
    pos, end = 0, len(view)
    pending_name: str | None = None
    pending_size: int | None = None
    members = 0
    while pos + 512 <= end:
        header = bytes(view[pos: pos + 512])
        if header == b"\0" * 512:
            break  # end-of-archive marker
        stored = _tar_number(header[148:156])
        unsigned = sum(header[:148]) + 256 + sum(header[156:])
        if stored != unsigned and stored != unsigned - 256 * sum(1 for b in header[:148] + header[156:] if b > 127):
            raise _TarError("bad header checksum" + (" (empty or truncated archive)" if not members else ""))
        kind = header[156:157]
        size = _tar_number(header[124:136])
        if pending_size is not None:
            size, pending_size = pending_size, None
        body_start = pos + 512
        body_end = body_start + size
        if body_end > end:
            raise _TarError("unexpected end of data")
        pos = body_start + (size + 511) // 512 * 512
        members += 1
        if kind in (b"x", b"g", b"X"):
            if kind != b"g":  # a global header (git archive's commit id) names no member
                records = _pax_records(bytes(view[body_start:body_end]))
                if "path" in records:
                    pending_name = records["path"]
                if "size" in records:
                    try:
                        pending_size = int(records["size"])
                    except ValueError:
                        raise _TarError("invalid pax size") from None
            continue
        if kind in (b"L", b"K"):
            if kind == b"L":
                pending_name = _tar_text(bytes(view[body_start:body_end]))
            continue
        if kind == b"S":
            raise _TarError("sparse members are not supported")
        name = _tar_text(header[0:100])
        prefix = _tar_text(header[345:500]) if header[257:263] == b"ustar\0" else ""
        if prefix and kind not in _TAR_NAME_TYPES:
            name = f"{prefix}/{name}"
        if pending_name is not None:
            name, pending_name = pending_name, None
        if kind in (b"0", b"\0") and name.endswith("/"):
            kind = b"5"  # an old-style directory entry
        content = view[body_start:body_end] if kind in _TAR_FILE_TYPES else None
        yield name, kind, content


def _gunzip(data: bytes) -> bytes:
    """gzip decompression with ISA-L when installed (the `isal` dependency: about twice zlib's
    speed, a third of a cold analysis of two sdists was decompression), else the standard library."""
    try:
        from isal import igzip as codec
    except ImportError:
        import gzip as codec
    return codec.decompress(data)


def _tar_members(archive: Path, data: bytes | None = None) -> list[tuple[str, memoryview | None]]:
    """(name, content or None) per member of a (gzipped) tar, read and decompressed in one go
    (`data`: the archive's bytes, when the caller read them already); contents are views into the
    decompressed archive."""
    raw = archive.read_bytes() if data is None else data
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = _gunzip(raw)
        except Exception as exc:  # noqa: BLE001 - each codec has its own error types; all mean "corrupt"
            raise _TarError(str(exc) or type(exc).__name__) from exc
    return [(name, content) for name, _, content in iter_tar(raw)]


def _write_tree(root: Path, files: dict[str, bytes | memoryview]) -> None:
    """Write `files` (relative path -> bytes) under `root`, each created read-only (0444)."""
    made: set[str] = set()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for name, data in files.items():
        path = os.path.join(root, name)
        parent = os.path.dirname(path)
        if parent not in made:
            os.makedirs(parent, exist_ok=True)
            made.add(parent)
        fd = os.open(path, flags, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)


def _safe_member(name: str) -> bool:
    return bool(name) and not name.startswith("/") and ".." not in name.split("/")


def extract_archive(archive: Path, dest: Path, strip_top: bool | None = None, skip_top: frozenset[str] = frozenset(),
                    data: bytes | None = None) -> int:
    """Extract only Python sources of a wheel/zip/sdist into `dest` (a fresh directory), each file
    read-only. Returns the number of files. Raises InputError for a corrupt or unknown archive.
    A tar is read into memory and decompressed at once; only its Python members are written.
    `skip_top`: top-level folders (after the stripped one) whose sources are not written. `data`:
    the archive's bytes when the caller has read them (a tar is then not read again)."""
    archive = Path(archive)
    extensions: list[str] = []
    # a later member of the same name wins, as on extraction; a tar member's content is a view into
    # the decompressed archive, written from there (no copy of the ~25 MB an upstream keeps)
    files: dict[str, bytes | memoryview] = {}
    if archive.suffix in (".whl", ".zip"):
        try:
            # Reading a member checks its CRC; binary members (hundreds of MB) are never read.
            with zipfile.ZipFile(archive) as zf:
                for info in zf.infolist():
                    name = info.filename
                    ext = _extension_module(name)
                    if ext:
                        extensions.append(ext)
                    if info.is_dir() or not _wanted(name) or not _safe_member(name) or name.split("/", 1)[0] in skip_top:
                        continue
                    files[name] = zf.read(info)
        except (zipfile.BadZipFile, EOFError, OSError) as exc:
            raise InputError(f"{archive}: not a readable wheel/zip ({exc})", hint="delete it and download it again") from exc
    elif archive.name.endswith((".tar.gz", ".tgz", ".tar")):
        try:
            members = _tar_members(archive, data)
        except (_TarError, OSError) as exc:
            reason = str(exc).splitlines()[0].rstrip(":") if str(exc) else type(exc).__name__
            raise InputError(f"{archive}: not a readable tar archive ({reason})",
                             hint="delete it and download it again") from exc
        if not members:
            raise InputError(f"{archive}: not a readable tar archive (empty)", hint="delete it and download it again")
        top = {name.split("/")[0] for name, _ in members}
        strip = strip_top if strip_top is not None else len(top) == 1
        for full, content in members:
            name = full.split("/", 1)[1] if strip and "/" in full else full
            ext = _extension_module(name)
            if ext:
                extensions.append(ext)
            if content is None or not _wanted(name) or not _safe_member(name) or name.split("/", 1)[0] in skip_top:
                continue
            files[name] = content
    else:
        raise InputError(f"{archive}: unknown archive type", hint="use a .whl, .zip, .tar.gz or a directory")
    if not files:
        raise InputError(f"{archive}: no Python sources inside", hint="is this the right package?")
    tmp = Path(tempfile.mkdtemp(prefix=".extract-", dir=dest.parent))
    try:
        _write_tree(tmp, files)
        (tmp / EXTENSIONS).write_text("\n".join(sorted(set(extensions))) + "\n", encoding="utf-8")
        (tmp / COMPLETE).write_text(f"{archive.name}\n", encoding="utf-8")
        _make_read_only_markers(tmp)
        if (dest / COMPLETE).is_file():
            _remove_tree(tmp)  # another porter run finished the same tree first: keep theirs
            return len(files)
        _remove_tree(dest)
        try:
            os.replace(tmp, dest)
        except OSError:
            if not (dest / COMPLETE).is_file():
                raise
            _remove_tree(tmp)
    except BaseException:
        _remove_tree(tmp)
        raise
    return len(files)


def archive_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:20]


def extract_archive_by_digest(archive: Path, trees: Path, lean: bool = False) -> tuple[str, bool]:
    """Extract `archive` into `trees/<its content digest>` (`<digest>-lean` without LEAN_SKIPPED)
    unless a tree is there already (a job for a worker process: the archive is read and hashed
    there, not in the caller). Returns (digest, whether this call extracted it)."""
    data = Path(archive).read_bytes()
    digest = archive_digest(data)
    dest = Path(trees) / _tree_name(digest, lean)
    if (dest / COMPLETE).is_file():
        return digest, False
    extract_archive(archive, dest, skip_top=LEAN_SKIPPED if lean else frozenset(), data=data)  # read once
    return digest, True


def _tree_name(digest: str, lean: bool) -> str:
    return f"{digest}-lean" if lean else digest


def _make_read_only_markers(root: Path) -> None:
    for name in (EXTENSIONS, COMPLETE):
        os.chmod(root / name, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)


def _is_partial(repo_path: Path) -> bool:
    """A promisor (partial) clone: blobs arrive on demand."""
    from porter.proc import run

    result = run(["git", "-C", str(repo_path), "config", "--get", "remote.origin.promisor"], timeout=10)
    return result.ok and result.stdout.strip() == "true"


class _GitProgress:
    """GitPython progress -> porter's status line and progress bar (clone of a large mirror takes minutes)."""

    def __init__(self, say: Callable[[str], None], advance: Any):
        self.say = say
        self.advance = advance if callable(advance) else (lambda n=1: None)
        self.last = -1

    def update(self, op_code: int, cur_count, max_count=None, message: str = "") -> None:
        percent = int(100 * float(cur_count) / float(max_count)) if max_count else -1
        if percent >= 0 and percent // 10 != self.last // 10:
            self.say(f"git: {percent}% {message}".rstrip())
            self.last = percent
        self.advance(0)

    def __call__(self, *args, **kwargs):
        return self.update(*args, **kwargs)


@dataclass
class Sources:
    cache_dir: Path
    offline: bool = False
    notices: list[str] = field(default_factory=list)  # "offline: used the cache for ..." lines for the report
    timeout: float = 30.0
    status: Callable[[str], None] | None = None  # one-line progress messages (downloads, mirrors)
    stage: Callable[[str, int | None], Any] | None = None  # stage(description, total) -> progress bar context
    down_hosts: set[str] = field(default_factory=set)  # hosts that failed this run: use the cache for them
    _digests: dict[str, str] | None = field(default=None, repr=False)  # archive identity -> content digest (DIGESTS)
    _extracting: dict[tuple[str, bool], Any] = field(default_factory=dict, repr=False)  # (archive identity, lean) -> extraction in flight

    def __post_init__(self) -> None:
        # Checked once here so an unusable cache is an environment error, not a traceback deep in a download.
        self.cache_dir = Path(self.cache_dir)
        try:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            reason = "it is not a directory" if self.cache_dir.exists() else (exc.strerror or str(exc))
            raise EnvironmentProblem(f"porter's cache directory {self.cache_dir} is not usable: {reason}",
                                     hint="point PORTER_CACHE_DIR (or cache_dir in the config) at a writable directory") from exc

    @property
    def degraded(self) -> bool:
        """True when some answers came from the cache instead of the network."""
        return self.offline or bool(self.down_hosts)

    def say(self, message: str) -> None:
        if self.status is not None:
            self.status(message)

    def _bar(self, description: str):
        from contextlib import nullcontext

        return self.stage(description, None) if self.stage is not None else nullcontext(lambda n=1: None)

    def online(self, url: str) -> bool:
        effective = self.effective_url(url) if self._is_git_url(url) else url
        if _is_local(effective):
            return True  # a local mirror (insteadOf) needs no network
        return not self.offline and _host(effective) not in self.down_hosts

    @staticmethod
    def _is_git_url(url: str) -> bool:
        return url.endswith(".git") or url.startswith(("git@", "ssh://", "git://", "file://")) or "github.com" in url \
            or "gitcode.com" in url

    def effective_url(self, url: str) -> str:
        """`url` after git's `url.<base>.insteadOf` rules (a mirror a site configured, often local)."""
        if not hasattr(self, "_rewrites"):
            self._rewrites = git_url_rewrites()
        return rewrite_url(url, self._rewrites)

    def _git_offline_hint(self, url: str, ref: str = "main") -> str:
        return (f"pass the tree with --upstream-path {ref}=DIR, or mirror it once where the network reaches: "
                f"git clone --mirror --filter=blob:none {url} {self.mirror_path(url)} "
                f"(or point git at a local mirror: git config --global url.<mirror>.insteadOf {url})")

    # ------------------------------------------------------------------ local

    def local_tree(self, path: Path, label: str = "local", lean: bool = False) -> Tree:
        """A directory as it is, or an archive's Python sources (`lean`: an upstream's, without
        the LEAN_SKIPPED top-level folders its index never reads)."""
        path = Path(path).expanduser()
        if not path.exists():
            raise InputError(f"{path}: no such directory", hint="check the path given for the tree")
        if path.is_file():
            return self.archive_tree(path, label, lean)
        if not os.access(path, os.R_OK | os.X_OK):
            raise EnvironmentProblem(f"{path}: cannot read this directory (permission denied)",
                                     hint="fix its permissions or point porter at a readable copy")
        return Tree(path.resolve(), label, "local", parse_release(label), origin=str(path))

    def _archive_key(self, archive: Path) -> str:
        st = archive.stat()
        return f"{archive.resolve()}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}"

    def _known_digests(self) -> dict[str, str]:
        if self._digests is None:
            try:
                self._digests = json.loads((self.cache_dir / "trees" / "archive" / DIGESTS).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                self._digests = {}
        return self._digests

    def _remember_digest(self, key: str, digest: str) -> None:
        known = self._known_digests()
        if known.get(key) != digest:
            known[key] = digest
            try:
                atomic_write_text(self.cache_dir / "trees" / "archive" / DIGESTS, json.dumps(known))
            except OSError:
                pass  # only a warm run's shortcut

    def _archive_dest(self, archive: Path, lean: bool = False) -> Path:
        """Where an archive's Python sources live in the cache: named by the archive's content
        (hashed once per file identity; a changed file has a new size, mtime or inode)."""
        archive = Path(archive)
        key = self._archive_key(archive)
        digest = self._known_digests().get(key)
        if digest is None:
            digest = archive_digest(archive.read_bytes())
            self._remember_digest(key, digest)
        return self.cache_dir / "trees" / "archive" / _tree_name(digest, lean)

    def prepare_archives(self, archives: Any, pool: Any, min_bytes: int = 1 << 20, lean: bool = False) -> None:
        """Start extracting local archives (the sdists of a benchmark run, --upstream-path FILE) in
        `pool` so they unpack side by side; archive_tree() below waits for its own. An archive not
        hashed before is hashed by the worker that extracts it. Small archives and anything
        unreadable are left to archive_tree(), which reports errors as usual."""
        trees = self.cache_dir / "trees" / "archive"
        for archive in archives:
            if archive is None:
                continue
            try:
                archive = Path(archive).expanduser()
                if not archive.is_file() or archive.stat().st_size < min_bytes:
                    continue
                key = self._archive_key(archive)
            except OSError:
                continue
            digest = self._known_digests().get(key)
            if (key, lean) in self._extracting or (digest is not None and (trees / _tree_name(digest, lean) / COMPLETE).is_file()):
                continue
            trees.mkdir(parents=True, exist_ok=True)
            self._extracting[(key, lean)] = pool.submit(extract_archive_by_digest, archive, trees, lean)

    def extracting(self) -> bool:
        """Whether archives started by prepare_archives() are still to be collected: trees unpacked
        in this run, whose fresh file times no earlier result can match."""
        return bool(self._extracting)

    def archive_tree(self, archive: Path, label: str, lean: bool = False) -> Tree:
        try:
            key = self._archive_key(Path(archive))
        except OSError as exc:
            raise EnvironmentProblem(f"{archive}: cannot read ({exc.strerror})") from exc
        pending = self._extracting.pop((key, lean), None)
        extracted = False
        if pending is not None:
            try:
                digest, extracted = pending.result()
                self._remember_digest(key, digest)
            except Exception:  # noqa: BLE001 - extracted again below, where the error is reported properly
                pass
        try:
            dest = self._archive_dest(Path(archive), lean)
        except OSError as exc:
            raise EnvironmentProblem(f"{archive}: cannot read ({exc.strerror})") from exc
        cached = not extracted and (dest / COMPLETE).is_file()
        if not (dest / COMPLETE).is_file():
            dest.parent.mkdir(parents=True, exist_ok=True)
            extract_archive(Path(archive), dest, skip_top=LEAN_SKIPPED if lean else frozenset())
        return Tree(dest, label, "archive", parse_release(label), origin=str(archive), from_cache=cached)

    # ------------------------------------------------------------------ PyPI

    def _fetch_index(self, url: str) -> tuple[str, bytes]:
        """(content type, body) of a simple-API page, JSON preferred (PEP 691)."""
        import urllib.request

        request = urllib.request.Request(url, headers={"Accept": f"{SIMPLE_JSON}, text/html;q=0.1", "User-Agent": "porter"})
        with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310 - the configured index
            return response.headers.get("Content-Type", "") or "", response.read()

    def project_url(self, name: str) -> str:
        return index_url().rstrip("/") + f"/{normalize_project(name)}/"

    def pypi_project(self, name: str) -> dict[str, Any]:
        """{version: [files]} of a project on pip's configured index, from the network or (offline /
        on failure) the cache."""
        cache = self.cache_dir / "pypi" / f"{name}.json"
        url = self.project_url(name)
        if self.online(url):
            try:
                content_type, body = self._fetch_index(url)
                releases = parse_simple_index(url, content_type, body)
                data = {"name": name, "index": url, "fetched": time.time(), "releases": releases}
                atomic_write_text(cache, json.dumps(data))
                return data
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    raise InputError(f"{name!r} is not a project on the package index ({url})",
                                     hint="check the pypi name in knowledge/upstreams.yaml, or pip's index-url") from exc
                self._network_failed(f"package index ({exc})", url)
            except (urllib.error.URLError, OSError, ValueError) as exc:
                self._network_failed(f"package index ({getattr(exc, 'reason', exc)})", url)
        if cache.is_file():
            self.notices.append(f"offline: release list of {name} from the cache ({cache})")
            return json.loads(cache.read_text(encoding="utf-8"))
        raise EnvironmentProblem(
            f"no network and no cached release list for {name}",
            hint="connect to the network once (porter caches what it fetches), or pass the tree with --upstream-path VERSION=DIR",
        )

    def _network_failed(self, what: str, url: str = "") -> None:
        host = _host(url)
        if host not in self.down_hosts:
            self.notices.append(f"network unavailable ({what}); working from the cache")
        self.down_hosts.add(host)

    def pypi_releases(self, name: str, include_pre: bool = False) -> list[str]:
        releases = self.pypi_project(name)["releases"]
        out = []
        for v, files in releases.items():
            parsed = parse_release(v)
            if parsed is None or not files or all(f.get("yanked") for f in files):
                continue
            if parsed.is_prerelease and not include_pre:
                continue
            out.append(v)
        return sorted(out, key=Version)

    def pypi_tree(self, name: str, version: str) -> Tree:
        parsed = parse_release(version)
        if parsed is None:
            raise InputError(f"malformed version {version!r} for {name}", hint="use a PEP 440 release such as 0.13.0")
        dest = self.cache_dir / "trees" / "pypi" / name / str(parsed)
        if (dest / COMPLETE).is_file():
            return Tree(dest, version, "pypi", parsed, origin=f"pypi:{name}=={parsed}", from_cache=True)
        releases = self.pypi_project(name)["releases"]
        # PEP 440 equality, not spelling: `0.13` is the release PyPI lists as `0.13.0`.
        key = next((v for v in releases if parse_release(v) == parsed), None)
        if key is None:
            near = nearby_releases(releases, parsed)
            raise InputError(f"{name} {version} is not released on PyPI",
                             hint=("nearby releases: " + ", ".join(near)) if near else "see `porter status` for releases")
        if key != str(parsed):
            parsed = parse_release(key) or parsed
            dest = self.cache_dir / "trees" / "pypi" / name / key
            if (dest / COMPLETE).is_file():
                return Tree(dest, version, "pypi", parsed, origin=f"pypi:{name}=={key}", from_cache=True)
        if not self.online(self.project_url(name)):
            raise EnvironmentProblem(f"{name} {version} is not in the cache and the network is unavailable",
                                     hint="run once online, or pass the tree with --upstream-path VERSION=DIR")
        files = releases.get(key) or []
        downloads = self.cache_dir / "downloads" / name / key
        downloads.mkdir(parents=True, exist_ok=True)
        # The sdist holds the same Python sources in a fraction of the bytes (vllm: 30 MB vs 320 MB).
        has_sdist = any(f.get("packagetype") == "sdist" and f.get("url") for f in files)
        self.say(f"downloading {name} {key} ({'sdist' if has_sdist else 'pip download --no-deps'}) ...")
        with self._bar(f"downloading {name} {key}"):
            archive = self._sdist_download(files, downloads) or self._pip_download(name, key, downloads)
        if archive is None:
            raise EnvironmentProblem(f"could not download {name} {version} (no usable wheel or sdist)",
                                     hint="check the network, or pass the tree with --upstream-path VERSION=DIR")
        dest.parent.mkdir(parents=True, exist_ok=True)
        self.say(f"extracting Python sources of {archive.name}")
        try:
            with self._bar(f"extracting {archive.name}"):
                extract_archive(archive, dest)
        except InputError as exc:
            archive.unlink(missing_ok=True)  # a corrupt download must not poison the cache
            raise EnvironmentProblem(f"downloaded {archive.name} is corrupt: {exc.message}",
                                     hint="run the command again to download it afresh") from exc
        return Tree(dest, version, "pypi", parsed, origin=f"pypi:{name}=={key}")

    def _pip_download(self, name: str, version: str, downloads: Path) -> Path | None:
        import sys

        from porter.proc import run

        argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.11",
                "--disable-pip-version-check", "-q", "-d", str(downloads)]
        for platform in PIP_PLATFORMS:
            argv += ["--platform", platform]
        before = set(downloads.glob("*.whl"))
        result = run([*argv, f"{name}=={version}"], timeout=1800)
        if not result.ok:
            return None
        after = sorted(set(downloads.glob("*.whl")) - before) or sorted(downloads.glob("*.whl"))
        return after[0] if after else None

    def _sdist_download(self, files: list[dict[str, Any]], downloads: Path) -> Path | None:
        sdists = [f for f in files if f.get("packagetype") == "sdist" and f.get("url")]
        if not sdists:
            return None
        info = sorted(sdists, key=lambda f: not f["filename"].endswith(".tar.gz"))[0]
        target = downloads / info["filename"]
        if target.is_file() and info.get("sha256") and hashlib.sha256(target.read_bytes()).hexdigest() == info["sha256"]:
            return target  # downloaded by an earlier run
        import urllib.request

        try:
            request = urllib.request.Request(info["url"], headers={"User-Agent": "porter"})
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                data = response.read()
        except (urllib.error.URLError, OSError) as exc:
            self._network_failed(f"download ({exc})", info["url"])
            return None
        if info.get("sha256") and hashlib.sha256(data).hexdigest() != info["sha256"]:
            raise EnvironmentProblem(f"{info['filename']}: sha256 mismatch", hint="run again; if it persists, report it")
        target.write_bytes(data)
        return target

    # ------------------------------------------------------------------ git

    def ls_remote(self, url: str) -> dict[str, str]:
        """{ref name: sha} of a remote (`refs/tags/v1`, `refs/heads/main`, `HEAD`), cached."""
        cache = self.cache_dir / "git" / f"{slug_of(url)}.refs.json"
        if self.online(url):
            import git

            try:
                out = git.cmd.Git().ls_remote(url, env={"GIT_TERMINAL_PROMPT": "0"}, kill_after_timeout=self.timeout)
                refs: dict[str, str] = {}
                for line in out.splitlines():
                    sha, _, name = line.partition("\t")
                    if name.endswith("^{}"):  # peeled tag: the commit it points at
                        refs[name[:-3]] = sha
                    else:
                        refs.setdefault(name, sha)
                atomic_write_text(cache, json.dumps({"url": url, "fetched": time.time(), "refs": refs}))
                return refs
            except git.GitCommandError as exc:
                self._network_failed(f"git ls-remote {url}: {_git_reason(exc)}", url)
        if cache.is_file():
            self.notices.append(f"offline: refs of {url} from the cache")
            return json.loads(cache.read_text(encoding="utf-8"))["refs"]
        if self.mirror_path(url).is_dir():
            return self._mirror_refs(self.mirror_path(url))
        raise EnvironmentProblem(f"cannot list refs of {url}: no network and nothing cached",
                                 hint=self._git_offline_hint(url))

    def mirror_path(self, url: str) -> Path:
        if Path(url).expanduser().is_dir():
            return Path(url).expanduser()
        return self.cache_dir / "git" / f"{slug_of(url)}.git"

    def _mirror_refs(self, repo_path: Path) -> dict[str, str]:
        import git

        repo = git.Repo(repo_path)
        out = repo.git.for_each_ref("--format=%(objectname) %(refname)")
        return {name: sha for sha, _, name in (line.partition(" ") for line in out.splitlines())}

    def mirror(self, url: str, update: bool = True) -> Path:
        """A bare mirror of `url` under the cache (a local repository path is used as is, read only)."""
        import git

        path = self.mirror_path(url)
        if Path(url).expanduser().is_dir():
            return path
        if path.is_dir():
            if update and self.online(url):
                try:
                    git.Repo(path).git.remote("update", "--prune", env={"GIT_TERMINAL_PROMPT": "0"})
                except git.GitCommandError as exc:
                    self._network_failed(f"git fetch {url}: {_git_reason(exc)}", url)
            return path
        if not self.online(url):
            raise EnvironmentProblem(f"no mirror of {url} in the cache and the network is unavailable",
                                     hint=self._git_offline_hint(url))
        path.parent.mkdir(parents=True, exist_ok=True)
        # A partial clone: commits and trees now, file contents only for the refs materialized later.
        self.say(f"mirroring {url} (git clone --mirror --filter=blob:none) ...")
        tmp = Path(tempfile.mkdtemp(prefix=".mirror-", dir=path.parent))
        try:
            with self._bar(f"mirroring {url}") as advance:
                git.Repo.clone_from(url, tmp, mirror=True, filter="blob:none", progress=_GitProgress(self.say, advance),
                                    env={"GIT_TERMINAL_PROMPT": "0"})
            os.replace(tmp, path)
        except git.GitCommandError as exc:
            _remove_tree(tmp)
            self._network_failed(f"git clone {url}", url)
            raise EnvironmentProblem(f"cannot mirror {url}: {_git_reason(exc)}",
                                     hint="check the URL and the network") from exc
        return path

    def _fetch_blobs(self, repo_path: Path, commit: str) -> None:
        """Fetch the Python files of `commit` missing from a partial clone, in one request."""
        from porter.proc import run

        listing = run(["git", "-C", str(repo_path), "ls-tree", "-r", "--full-tree", commit], timeout=120)
        wanted = [line.split()[2] for line in listing.stdout.splitlines()
                  if line.split("\t", 1)[-1].endswith((".py", ".pyi")) and " blob " in line]
        if not wanted:
            return
        # rev-list --missing=print names absent objects without fetching them (cat-file would, one by one).
        listed = run(["git", "-C", str(repo_path), "rev-list", "--objects", "--missing=print", "--no-walk", commit],
                     timeout=300)
        missing = {line[1:].strip() for line in listed.stdout.splitlines() if line.startswith("?")}
        absent = [oid for oid in wanted if oid in missing]
        if absent:
            self.say(f"fetching {len(absent)} file(s) of {commit[:12]} (partial clone)")
            run(["git", "-C", str(repo_path), "-c", "fetch.negotiationAlgorithm=noop", "fetch", "-q", "--no-tags",
                 "--no-write-fetch-head", "--stdin", "origin"], input_text="\n".join(absent) + "\n", timeout=1800,
                extra_env={"GIT_TERMINAL_PROMPT": "0"})

    def resolve_commit(self, repo_path: Path, ref: str) -> str:
        import git

        repo = git.Repo(repo_path)
        for candidate in (ref, f"refs/tags/{ref}", f"refs/heads/{ref}", f"origin/{ref}", f"refs/remotes/origin/{ref}"):
            try:
                return repo.git.rev_parse("--verify", "--quiet", f"{candidate}^{{commit}}")
            except git.GitCommandError:
                continue
        wanted = parse_release(ref)
        same = sorted(t.name for t in repo.tags if wanted is not None and parse_release(re.sub(r"^[^0-9]*", "", t.name)) == wanted)
        if same:  # `--to 2` where the release is tagged `v2`: say so rather than leave the user guessing
            raise InputError(f"ref {ref!r} does not exist in {repo_path}; release {wanted} is tagged {', '.join(same)}",
                             hint=f"pass the tag: --to {same[0]} (or --from {same[0]})")
        raise InputError(f"ref {ref!r} does not exist in {repo_path}",
                         hint="list refs with `git ls-remote`, or use `porter status` to see releases and branches")

    def git_tree(self, url: str, ref: str) -> Tree:
        """Materialize `ref` of `url` (remote URL or local repository) read-only under the cache."""
        check_ref_syntax(ref)
        import git

        repo_path = self.mirror(url, update=not _SHA.match(ref))
        try:
            commit = self.resolve_commit(repo_path, ref)
        except InputError:
            if self.online(url) and not Path(url).expanduser().is_dir():
                self.mirror(url, update=True)
                commit = self.resolve_commit(repo_path, ref)
            else:
                raise
        dest = self.cache_dir / "trees" / "git" / slug_of(str(url)) / commit
        if (dest / COMPLETE).is_file():
            return Tree(dest, ref, "git", parse_release(ref), commit, str(url), from_cache=True)
        buffer = io.BytesIO()
        self.say(f"materializing {ref} ({commit[:12]}) of {url}")
        try:
            if _is_partial(repo_path):
                self._fetch_blobs(repo_path, commit)  # one batched fetch instead of one per file during archive
            git.Repo(repo_path).archive(buffer, commit, format="tar")
        except git.GitCommandError as exc:
            raise EnvironmentProblem(f"git archive {commit} failed in {repo_path}: {str(exc.stderr).strip()[:200]}",
                                     hint=self._git_offline_hint(url, ref)) from exc
        buffer.seek(0)
        dest.parent.mkdir(parents=True, exist_ok=True)
        archive = dest.parent / f".{commit}.tar"
        archive.write_bytes(buffer.getvalue())
        try:
            extract_archive(archive, dest, strip_top=False)
        finally:
            archive.unlink(missing_ok=True)
        return Tree(dest, ref, "git", parse_release(ref), commit, str(url))
