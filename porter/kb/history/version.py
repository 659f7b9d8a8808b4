"""Which version of the plugin produced the trace: `--env`, the text's own banners and paths, or
the newest tag whose code has the frames' source lines at the frames' line numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

from packaging.version import InvalidVersion, Version

from porter import proc
from porter.kb.env import normalise_package
from porter.kb.history.models import Frame, Installed


def tag_for_version(tags: Sequence[str], version: str) -> str | None:
    """The release tag of `version`, else the newest tag before it (a build between releases has
    at least that release's commits); None when the version is not a version or precedes all tags."""
    try:
        wanted = Version(version)
    except InvalidVersion:
        return None
    before = None
    for tag in tags:  # oldest first
        try:
            v = Version(tag.lstrip("vV"))
        except InvalidVersion:
            continue
        if v == wanted:
            return tag
        if v < wanted:
            before = tag
    return before


def _blobs(repo: Path, specs: Sequence[str]) -> dict[str, list[str] | None]:
    """`rev:path` -> the file's lines, through one `git cat-file --batch` (None where absent).

    Blob sizes are bytes: the decoded output is re-encoded to walk it (exact for UTF-8 sources)."""
    result = proc.run(["git", "cat-file", "--batch"], cwd=repo, input_text="".join(s + "\n" for s in specs), timeout=120)
    data = result.stdout.encode("utf-8", "surrogateescape")
    out: dict[str, list[str] | None] = {}
    pos = 0
    for spec in specs:
        nl = data.find(b"\n", pos)
        if nl < 0:
            break
        header = data[pos:nl].decode("utf-8", "replace")
        pos = nl + 1
        parts = header.split()
        if len(parts) != 3 or not parts[2].isdigit():
            out[spec] = None  # "<spec> missing"
            continue
        size = int(parts[2])
        out[spec] = data[pos:pos + size].decode("utf-8", "replace").splitlines()
        pos += size + 1
    return out


def tag_matching_frames(repo: Path, tags: Sequence[str], frames: Sequence[Frame]) -> str | None:
    """The oldest tag of the newest run of tags whose code shows the frames' printed source lines
    at the frames' line numbers (the most frames, at least half of those with a source line).

    Unchanged lines match many releases in a row; the oldest of the run is the earliest version
    the trace can come from, so a fix made within the run stays a candidate."""
    with_source = [f for f in frames if f.source]
    if not with_source or not tags:
        return None
    specs = [f"{t}:{f.repo_path}" for t in tags for f in {f.repo_path: f for f in with_source}.values()]
    blobs = _blobs(repo, specs)
    hits_by_tag: list[int] = []
    for tag in tags:
        hits = 0
        for f in with_source:
            lines = blobs.get(f"{tag}:{f.repo_path}")
            if lines and 0 < f.line <= len(lines) and " ".join(lines[f.line - 1].split()) == " ".join(f.source.split()):
                hits += 1
        hits_by_tag.append(hits)
    best = max(hits_by_tag)
    if not best or best * 2 < len(with_source):
        return None
    newest = max(i for i, h in enumerate(hits_by_tag) if h == best)
    oldest = newest
    while oldest > 0 and hits_by_tag[oldest - 1] == best:
        oldest -= 1
    return tags[oldest]


def installed_version(env: Mapping[str, str], packages: Sequence[str], text_version: str | None,
                      tags: Sequence[str], repo: Path, frames: Sequence[Frame]) -> Installed:
    for name in packages:
        version = env.get(normalise_package(name))
        if version:
            return Installed(version, tag_for_version(tags, version), "env")
    if text_version:
        tag = tag_for_version(tags, text_version)
        if tag:
            return Installed(text_version, tag, "trace")
    tag = tag_matching_frames(repo, tags, frames)
    if tag:
        return Installed(tag.lstrip("vV"), tag, "frames")
    return Installed(text_version, None, "trace" if text_version else "unknown")
