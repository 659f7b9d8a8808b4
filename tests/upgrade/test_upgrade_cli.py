"""`porter upgrade` and `porter status` end to end (in-process), including bad inputs and exit codes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import git
import pytest
from typer.testing import CliRunner

from porter.cli import app
from porter.upgrade import sources as sources_mod

from tests.upgrade.upgrade_fixtures import PLUGIN, UPKG_V2, commit_all, fake_index, make_wheel, write_tree

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def paths(trees):
    return ["--plugin-path", str(trees["plugin"]), "--upstream-path", f"1.0={trees['v1']}",
            "--upstream-path", f"2.0={trees['v2']}"]


def test_dry_run_json_html_markdown(project, trees, tmp_path):
    html, md = tmp_path / "out" / "r.html", tmp_path / "out" / "r.md"
    html.parent.mkdir()  # report paths need an existing directory
    result = invoke("upgrade", "myplug", "--to", "2.0", "--from", "1.0", *paths(trees), "--dry-run",
                    "--json", "--html", str(html), "--markdown", str(md))
    assert result.exit_code == 1, result.output  # breaking findings
    doc = json.loads(result.stdout)
    assert doc["schema"] == "porter.upgrade/1"
    analysis = doc["analysis"]
    assert analysis["outcome"]["outcome"] == "C_PATCH"
    assert analysis["summary"]["by_family"]["F2"] == 4
    assert {r["family"] for r in analysis["records"]} >= {"F1", "F2", "F2r", "F3", "F7", "F8", "F11"}
    assert "F10" in {r["family"] for r in analysis["notes"]}  # a changed base list is a note
    page = html.read_text()
    assert page.startswith("<!doctype html>") and "upkg.new.place.Mover" in page
    assert "<link" not in page and "<script" not in page and "http" not in page.split("<body>")[1]  # self-contained
    text = md.read_text()
    assert "## F2 — moved" in text and "`upkg.core.Mover`" in text


def test_rich_output_groups_by_family(project, trees):
    result = invoke("upgrade", "myplug", "--to", "2.0", "--from", "1.0", *paths(trees), "--dry-run")
    assert result.exit_code == 1
    assert "F2 moved" in result.stdout and "C_PATCH" in result.stdout and "notes" in result.stdout


def test_git_refs_are_materialized_from_a_mirror(project, trees, upstream_repo):
    # The registry's git URL is the local repository: tags are materialized with git archive.
    result = invoke("upgrade", "myplug", "--to", "v2.0", "--from", "v1.0", "--plugin-path", str(trees["plugin"]),
                    "--dry-run", "--json")
    assert result.exit_code == 1, result.output
    analysis = json.loads(result.stdout)["analysis"]
    assert analysis["target"]["kind"] == "git" and len(analysis["target"]["commit"]) == 40
    assert analysis["target"]["version"] == "2.0"
    assert analysis["summary"]["breaking"] == 14


def test_file_url_uses_a_bare_mirror_in_the_cache(project, trees, upstream_repo, tmp_path):
    src = sources_mod.Sources(tmp_path / "cache2")
    url = upstream_repo.as_uri()
    tree = src.git_tree(url, "main")
    assert (tree.root / "upkg" / "v2only.py").is_file()
    mirror = src.mirror_path(url)
    assert mirror.is_dir() and (mirror / "HEAD").is_file() and not (mirror / ".git").exists()
    assert not os.access(tree.root / "upkg" / "core.py", os.W_OK) or os.geteuid() == 0
    assert oct((tree.root / "upkg" / "core.py").stat().st_mode)[-3:] == "444"
    again = src.git_tree(url, "v1.0")
    assert not (again.root / "upkg" / "v2only.py").read_text()


def test_wheel_as_upstream_path(project, trees, tmp_path):
    wheel = make_wheel(tmp_path / "upkg-2.0-py3-none-any.whl", UPKG_V2)
    result = invoke("upgrade", "myplug", "--to", "2.0", "--from", "1.0", "--plugin-path", str(trees["plugin"]),
                    "--upstream-path", f"1.0={trees['v1']}", "--upstream-path", f"2.0={wheel}", "--dry-run", "--json")
    assert result.exit_code == 1, result.output
    analysis = json.loads(result.stdout)["analysis"]
    assert analysis["target"]["kind"] == "archive"
    extracted = Path(analysis["target"]["root"])
    assert (extracted / ".porter-extensions.txt").read_text().split() == ["upkg._C"]
    assert not list(extracted.rglob("METADATA"))  # only Python sources are kept


def test_uncommitted_plugin_checkout_stays_byte_identical(project, trees, tmp_path):
    root = write_tree(tmp_path / "checkout", PLUGIN)
    repo = git.Repo.init(root, initial_branch="main")
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "t")
        cw.set_value("user", "email", "t@example.invalid")
    commit_all(repo, "plugin")
    (root / "myplug" / "families.py").write_text((root / "myplug" / "families.py").read_text() + "\n# local edit\n")
    (root / "myplug" / "untracked.py").write_text("from upkg.core import gone_fn\n")

    def snapshot():
        files = {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
        return files, repo.git.status("--porcelain"), repo.head.commit.hexsha

    before = snapshot()
    result = invoke("upgrade", "myplug", "--to", "2.0", "--from", "1.0", "--plugin-path", str(root),
                    "--upstream-path", f"1.0={trees['v1']}", "--upstream-path", f"2.0={trees['v2']}", "--dry-run", "--json")
    assert result.exit_code == 1
    assert snapshot() == before
    sites = {s["path"] for r in json.loads(result.stdout)["analysis"]["records"] for s in r["sites"]}
    assert "myplug/untracked.py" in sites  # the working tree is what was scanned


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["upgrade", "nope", "--to", "2.0", "--dry-run"], 2, "unknown plugin"),
        (["upgrade", "myplug", "--upstream", "nope", "--to", "2.0", "--dry-run"], 2, "does not depend"),
        (["upgrade", "myplug", "--to", "2.x.0", "--dry-run"], 2, "malformed version"),
        (["upgrade", "myplug", "--to", "v9.9", "--from", "v1.0", "--dry-run"], 2, "does not exist"),
        (["upgrade", "myplug", "--to", "2.0", "--upstream-path", "nonsense", "--dry-run"], 2, "VERSION=DIR"),
        (["upgrade", "myplug", "--to", "2.0", "--upstream-path", "2.0=/no/such/dir", "--dry-run"], 2, "no such directory"),
        (["status", "nope"], 2, "unknown plugin or upstream"),
    ],
)
def test_bad_inputs(project, trees, args, code, needle):
    result = invoke(*args, "--json")
    assert result.exit_code == code, result.output
    error = json.loads(result.stdout)["error"]
    assert needle in error["message"] + error.get("hint", "")


def test_corrupt_wheel_is_an_input_error(project, trees, tmp_path):
    bad = tmp_path / "upkg-2.0-py3-none-any.whl"
    bad.write_bytes(b"PK\x03\x04 this is not a wheel")
    result = invoke("upgrade", "myplug", "--to", "2.0", "--upstream-path", f"2.0={bad}",
                    "--plugin-path", str(trees["plugin"]), "--from", "1.0", "--upstream-path", f"1.0={trees['v1']}", "--dry-run",
                    "--json")
    assert result.exit_code == 2
    assert "not a readable wheel" in json.loads(result.stdout)["error"]["message"]
    sdist = tmp_path / "upkg-2.0.tar.gz"
    sdist.write_bytes(b"\x00" * 100)
    result = invoke("upgrade", "myplug", "--to", "2.0", "--upstream-path", f"2.0={sdist}",
                    "--plugin-path", str(trees["plugin"]), "--from", "1.0", "--upstream-path", f"1.0={trees['v1']}", "--dry-run",
                    "--json")
    error = json.loads(result.stdout)["error"]
    assert result.exit_code == 2 and "not a readable tar archive" in error["message"]
    assert "\n" not in error["message"], "one line: what is wrong with which file"


def test_no_network_and_no_cache_is_exit_3(project, trees, monkeypatch):
    monkeypatch.setenv("PORTER_OFFLINE", "1")
    result = invoke("upgrade", "myplug", "--to", "3.0", "--from", "1.0", "--plugin-path", str(trees["plugin"]),
                    "--upstream-path", f"1.0={trees['v1']}", "--dry-run", "--json")
    assert result.exit_code == 3, result.output
    error = json.loads(result.stdout)["error"]
    assert "no network" in error["message"] and "--upstream-path" in error["hint"]


def test_network_failure_falls_back_to_the_cache(project, upstream_repo, monkeypatch):
    def down(self, url):
        raise sources_mod.urllib.error.URLError("simulated: no route to host")

    calls = []

    def up(self, url):
        calls.append(url)
        return fake_index({"1.0": [{"filename": "a.whl"}], "2.0": [{"filename": "b.whl"}], "2.1rc1": [{"filename": "c"}]})(self, url)

    monkeypatch.setattr(sources_mod.Sources, "_fetch_index", up)
    online = invoke("status", "myplug", "--json")
    assert online.exit_code == 0, online.output
    row = json.loads(online.stdout)["rows"][0]
    assert row["newest_release"] == "2.0" and row["releases_between"] == 1 and row["baseline"] == "1.0"
    assert row["head"] == git.Repo(upstream_repo).head.commit.hexsha
    assert row["commits_between"] == 1  # v1.0..main in the (local) repository
    monkeypatch.setattr(sources_mod.Sources, "_fetch_index", down)
    offline = invoke("status", "myplug", "--json")
    assert offline.exit_code == 0, offline.output
    doc = json.loads(offline.stdout)
    assert doc["offline"] is True and doc["rows"][0]["newest_release"] == "2.0"
    assert any("cache" in n for n in doc["notices"])


def test_status_offline_without_cache_is_exit_3(project, monkeypatch):
    monkeypatch.setenv("PORTER_OFFLINE", "1")
    # A local upstream repository still answers offline (head from the repository itself) ...
    row = json.loads(invoke("status", "myplug", "--json").stdout)["rows"][0]
    assert row["head"] and row["newest_release"] is None
    # ... a remote one with nothing cached does not, and neither does PyPI: exit 3.
    registry = project / "knowledge" / "upstreams.yaml"
    text = registry.read_text()
    registry.write_text(text.replace(text.split("git: ", 1)[1].split("\n", 1)[0], "https://example.invalid/upkg.git", 1))
    result = invoke("status", "myplug", "--json")
    assert result.exit_code == 3, result.output
    assert "no network" in json.loads(result.stdout)["error"]["message"]


def test_status_sees_an_adapted_fork(project, monkeypatch):
    monkeypatch.setattr(sources_mod.Sources, "_fetch_index", fake_index({"1.0": [{"f": 1}], "2.0": [{"f": 2}]}))
    fork = project / "forks" / "myplug"
    write_tree(fork, {"myplug/x.py": "if upkg_version_is('1.0'):\n    pass\n"})
    repo = git.Repo.init(fork, initial_branch="main")
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "t")
        cw.set_value("user", "email", "t@example.invalid")
    commit_all(repo, "old guard")
    row = json.loads(invoke("status", "myplug", "--json").stdout)["rows"][0]
    assert row["adapted"] is False
    (fork / "myplug" / "x.py").write_text('if upkg_version_is("2.0"):\n    pass\n')
    row = json.loads(invoke("status", "myplug", "--json").stdout)["rows"][0]
    assert row["adapted"] is False, "uncommitted edits are not the default branch"
    commit_all(repo, "adapt to 2.0")
    row = json.loads(invoke("status", "myplug", "--json").stdout)["rows"][0]
    assert row["adapted"] is True and "myplug/x.py" in row["adapted_evidence"]


def test_unreadable_fork_path_is_exit_3(project, trees, monkeypatch):
    monkeypatch.setattr(sources_mod.Sources, "_fetch_index", fake_index({"1.0": [{"f": 1}], "2.0": [{"f": 2}]}))
    fork = project / "forks" / "myplug"
    fork.parent.mkdir(exist_ok=True)
    fork.write_text("a file where a clone should be\n")  # unreadable as a directory (works for root too)
    result = invoke("upgrade", "myplug", "--to", "2.0", "--upstream-path", f"1.0={trees['v1']}",
                    "--upstream-path", f"2.0={trees['v2']}", "--dry-run", "--json")
    assert result.exit_code == 3, result.output
    assert "fork" in json.loads(result.stdout)["error"]["message"]


def test_status_by_upstream_lists_its_plugins(project, monkeypatch):
    monkeypatch.setattr(sources_mod.Sources, "_fetch_index", fake_index({"1.0": [{"f": 1}], "2.0": [{"f": 2}]}))
    result = invoke("status", "upkg", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["rows"]
    assert {(r["plugin"], r["upstream"]) for r in rows} == {("myplug", "upkg"), ("foreign", "upkg")}
    human = invoke("status", "upkg")
    assert "myplug" in human.stdout and "2.0" in human.stdout


def _fake_pypi(monkeypatch, wheel_bytes: bytes | None, sdist: bytes | None = None, sha: str | None = None):
    """PyPI without the network: a release list, and `pip download` that drops the given wheel."""
    sdist_file = {"filename": "upkg_dist-2.0.tar.gz", "packagetype": "sdist", "url": "https://files.invalid/x.tar.gz",
                  "digests": {"sha256": sha}}
    files = {"1.0": [{"filename": "upkg-1.0.whl", "packagetype": "bdist_wheel"}],
             "2.0": [{"filename": "upkg_dist-2.0-py3-none-any.whl", "packagetype": "bdist_wheel"}]
             + ([sdist_file] if sdist is not None else [])}
    monkeypatch.setattr(sources_mod.Sources, "_fetch_index", fake_index(files))
    downloads = []

    def pip_download(self, name, version, directory):
        downloads.append((name, version))
        if wheel_bytes is None:
            return None
        path = directory / f"upkg-{version}-py3-none-any.whl"
        path.write_bytes(wheel_bytes)
        return path

    monkeypatch.setattr(sources_mod.Sources, "_pip_download", pip_download)

    class Response:
        def __init__(self, data):
            self.data = data

        def read(self):
            return self.data

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    import urllib.request  # porter.upgrade.sources imports it only when it fetches

    monkeypatch.setattr(urllib.request, "urlopen", lambda request, timeout=None: Response(sdist or b""))
    return downloads


def test_pypi_release_is_downloaded_once_and_cached(project, trees, tmp_path, monkeypatch):
    wheel = make_wheel(tmp_path / "w.whl", UPKG_V2).read_bytes()
    downloads = _fake_pypi(monkeypatch, wheel)
    args = ["upgrade", "myplug", "--to", "2.0", "--from", "1.0", "--plugin-path", str(trees["plugin"]),
            "--upstream-path", f"1.0={trees['v1']}", "--dry-run", "--json"]
    first = json.loads(invoke(*args).stdout)["analysis"]
    assert first["target"]["kind"] == "pypi" and first["target"]["origin"] == "pypi:upkg-dist==2.0"
    assert first["target"]["from_cache"] is False and first["summary"]["breaking"] == 14
    monkeypatch.setenv("PORTER_OFFLINE", "1")
    second = json.loads(invoke(*args).stdout)["analysis"]
    assert second["target"]["from_cache"] is True and downloads == [("upkg-dist", "2.0")]
    assert any(n.startswith("offline: pypi tree 2.0 from the cache") for n in second["notices"])


def test_pypi_unknown_release_and_corrupt_download(project, trees, monkeypatch):
    _fake_pypi(monkeypatch, b"PK\x03\x04 truncated")
    base = ["--plugin-path", str(trees["plugin"]), "--from", "1.0", "--upstream-path", f"1.0={trees['v1']}", "--dry-run",
            "--json"]
    missing = invoke("upgrade", "myplug", "--to", "9.0", *base)
    assert missing.exit_code == 2 and "not released on PyPI" in json.loads(missing.stdout)["error"]["message"]
    corrupt = invoke("upgrade", "myplug", "--to", "2.0", *base)
    assert corrupt.exit_code == 3, corrupt.output
    assert "corrupt" in json.loads(corrupt.stdout)["error"]["message"]
    assert not list((Path(os.environ["PORTER_CACHE_DIR"]) / "downloads").rglob("*.whl"))  # not kept in the cache


def test_pypi_release_matches_by_version_not_spelling(project, trees, tmp_path, monkeypatch):
    """`--to 2` is the release PyPI lists as `2.0`; an unknown one gets releases of its own series as a hint."""
    wheel = make_wheel(tmp_path / "w.whl", UPKG_V2).read_bytes()
    downloads = _fake_pypi(monkeypatch, wheel)
    base = ["--plugin-path", str(trees["plugin"]), "--from", "1.0", "--upstream-path", f"1.0={trees['v1']}", "--dry-run",
            "--json"]
    short = invoke("upgrade", "myplug", "--to", "2", *base)
    assert short.exit_code == 1, short.output
    assert downloads == [("upkg-dist", "2.0")]
    assert json.loads(short.stdout)["analysis"]["target"]["origin"] == "pypi:upkg-dist==2.0"
    again = invoke("upgrade", "myplug", "--to", "2.0.0", *base)  # the same release: served from the cache
    assert again.exit_code == 1 and json.loads(again.stdout)["analysis"]["target"]["from_cache"] is True
    assert downloads == [("upkg-dist", "2.0")]
    missing = json.loads(invoke("upgrade", "myplug", "--to", "2.0.5", *base).stdout)["error"]
    assert "not released on PyPI" in missing["message"] and missing["hint"] == "nearby releases: 2.0"


def test_sdist_is_preferred_and_its_hash_checked(project, trees, monkeypatch):
    import hashlib
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for rel, text in UPKG_V2.items():
            data = __import__("textwrap").dedent(text).lstrip("\n").encode()
            info = tarfile.TarInfo(f"upkg_dist-2.0/{rel}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    sdist = buf.getvalue()
    base = ["upgrade", "myplug", "--to", "2.0", "--plugin-path", str(trees["plugin"]), "--from", "1.0",
            "--upstream-path", f"1.0={trees['v1']}", "--dry-run", "--json"]
    _fake_pypi(monkeypatch, None, sdist, sha="0" * 64)
    bad = invoke(*base)
    assert bad.exit_code == 3 and "sha256 mismatch" in json.loads(bad.stdout)["error"]["message"]
    wheels = _fake_pypi(monkeypatch, b"a wheel that must not be fetched", sdist, sha=hashlib.sha256(sdist).hexdigest())
    good = invoke(*base)
    assert good.exit_code == 1, good.output
    assert json.loads(good.stdout)["analysis"]["summary"]["breaking"] == 14
    assert wheels == []  # the release has an sdist: the (much larger) wheel is never downloaded


def test_released_plugin_uses_its_paired_baseline_and_can_pin(project, trees, tmp_path, monkeypatch):
    """No --plugin-path and no fork clone: the newest PyPI release of the plugin is analysed, its
    baseline is the upstream release it is paired with, and a release paired with the target means B."""
    plugin_wheel = make_wheel(tmp_path / "p.whl", {k: v for k, v in PLUGIN.items() if k.startswith("myplug/")},
                              name="myplug", version="0.5.0").read_bytes()
    monkeypatch.setattr(sources_mod.Sources, "_fetch_index", fake_index(
        lambda url: {"0.5.0": [{"filename": "myplug-0.5.0.whl"}]} if "myplug-dist" in url else {"1.0": [{"f": 1}]}))

    def pip_download(self, name, version, directory):
        path = directory / f"{name}-{version}-py3-none-any.whl"
        path.write_bytes(plugin_wheel)
        return path

    monkeypatch.setattr(sources_mod.Sources, "_pip_download", pip_download)
    result = invoke("upgrade", "myplug", "--to", "2.0", "--upstream-path", f"1.0={trees['v1']}",
                    "--upstream-path", f"2.0={trees['v2']}", "--dry-run", "--json")
    assert result.exit_code == 1, result.output
    analysis = json.loads(result.stdout)["analysis"]
    assert analysis["plugin_tree"]["kind"] == "pypi" and analysis["plugin_tree"]["version"] == "0.5.0"
    assert analysis["baseline"]["label"] == "1.0"  # from the compatibility pair, not forks.yaml
    assert analysis["outcome"]["outcome"] == "B"
    assert "0.6.0" in " ".join(analysis["outcome"]["reasons"])


def test_upstream_path_matches_by_release_and_an_unused_one_is_an_error(project, trees):
    """`--upstream-path 2=DIR` serves `--to 2.0`; a typo (`3.0=DIR`) would silently fetch the tree instead."""
    base = ["upgrade", "myplug", "--to", "2.0", "--from", "1.0", "--plugin-path", str(trees["plugin"]),
            "--upstream-path", f"1.0={trees['v1']}", "--dry-run", "--json"]
    ok = invoke(*base, "--upstream-path", f"2={trees['v2']}")
    assert ok.exit_code == 1, ok.output
    assert json.loads(ok.stdout)["analysis"]["target"]["root"] == str(trees["v2"])
    typo = invoke(*base, "--upstream-path", f"3.0={trees['v2']}")
    assert typo.exit_code == 2
    error = json.loads(typo.stdout)["error"]
    assert "3.0=" in error["message"] and "matches neither" in error["message"] and "--upstream-path 2.0=DIR" in error["hint"]
    assert not (Path(os.environ["PORTER_CACHE_DIR"]) / "trees").exists()  # refused before fetching anything


def test_unwritable_report_path_is_a_usage_error(project, trees, tmp_path):
    """A report path that is a directory (or cannot be created) is exit 2 with the path, not a traceback."""
    args = ["upgrade", "myplug", "--to", "2.0", "--from", "1.0", *paths(trees), "--dry-run", "--json"]
    result = runner.invoke(app, [*args, "--html", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "is a directory" in json.loads(result.stdout)["error"]["message"]
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    result = runner.invoke(app, [*args, "--markdown", str(blocker / "sub" / "r.md")])
    assert result.exit_code == 2, result.output
    assert str(blocker) in json.loads(result.stdout)["error"]["message"]


def test_broken_forks_file_and_unusable_cache_are_reported(project, trees, tmp_path, monkeypatch):
    """Neither is taken for "no fork" or ends in a traceback: the file or directory is named, with the exit code."""
    args = ["upgrade", "myplug", "--to", "2.0", "--upstream-path", f"2.0={trees['v2']}", "--dry-run", "--json"]
    forks_file = project / "forks" / "forks.yaml"
    forks_file.write_text(forks_file.read_text() + "  broken: [\n")
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "forks.yaml" in json.loads(result.stdout)["error"]["message"]
    forks_file.write_text("schema: 1\nforks: {}\n")
    cache_file = tmp_path / "cache-is-a-file"
    cache_file.write_text("x")
    monkeypatch.setenv("PORTER_CACHE_DIR", str(cache_file))
    result = runner.invoke(app, [*args, "--plugin-path", str(trees["plugin"])])
    assert result.exit_code == 3, result.output
    assert "cache directory" in json.loads(result.stdout)["error"]["message"]


def test_a_plugin_path_without_the_plugin_is_not_outcome_a(project, trees, tmp_path):
    """A wrong --plugin-path must not read as "nothing breaks": no Python files is exit 2, no use a notice."""
    empty = tmp_path / "not-the-plugin"
    empty.mkdir()
    args = ["upgrade", "myplug", "--to", "2.0", "--from", "1.0", "--upstream-path", f"1.0={trees['v1']}",
            "--upstream-path", f"2.0={trees['v2']}", "--dry-run", "--json", "--plugin-path", str(empty)]
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert "holds no Python files" in json.loads(result.stdout)["error"]["message"]
    (empty / "unrelated.py").write_text("import json\n")
    analysis = json.loads(invoke(*args).stdout)["analysis"]
    assert analysis["outcome"]["outcome"] == "A"
    assert any("no use of upkg found" in n for n in analysis["notices"])
