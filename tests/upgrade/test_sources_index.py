"""Sources: the release list through pip's configured index (PEP 691 JSON / PEP 503 HTML, relative
URLs resolved), git partial clones and `url.<base>.insteadOf` mirrors. No network."""

from __future__ import annotations

import json

import git

from porter.upgrade import sources as sources_mod
from porter.upgrade.sources import Sources, index_url, parse_simple_index, rewrite_url, version_of_file
from tests.upgrade.upgrade_fixtures import UPKG_V1, commit_all, write_tree


def test_index_url_follows_pip(tmp_path):
    assert index_url({"PIP_INDEX_URL": "https://mirror.example/simple"}) == "https://mirror.example/simple"
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://corp.example/pypi/simple\n")
    assert index_url({"HOME": str(tmp_path), "PIP_CONFIG_FILE": str(conf), "XDG_CONFIG_DIRS": str(tmp_path)}) \
        == "https://corp.example/pypi/simple"
    later = tmp_path / "venv"
    later.mkdir()
    (later / "pip.conf").write_text("[install]\nindex-url = https://venv.example/simple\n")
    assert index_url({"HOME": str(tmp_path), "VIRTUAL_ENV": str(later), "XDG_CONFIG_DIRS": str(tmp_path)}) \
        == "https://venv.example/simple"  # a later file wins


def test_simple_index_json_and_html_resolve_relative_urls():
    base = "https://idx.example/simple/vllm/"
    doc = {"files": [{"filename": "vllm-0.18.0.tar.gz", "url": "../../packages/vllm-0.18.0.tar.gz", "hashes": {"sha256": "ab"}},
                     {"filename": "vllm-0.18.0-cp38-abi3-manylinux_2_31_x86_64.whl", "url": "w.whl", "yanked": "bad"},
                     {"filename": "vllm-0.19.0rc1.tar.gz", "url": "/p/x.tar.gz"}]}
    releases = parse_simple_index(base, "application/vnd.pypi.simple.v1+json", json.dumps(doc).encode())
    sdist, wheel = releases["0.18.0"]
    assert sdist["url"] == "https://idx.example/packages/vllm-0.18.0.tar.gz" and sdist["packagetype"] == "sdist"
    assert sdist["sha256"] == "ab" and wheel["yanked"] is True and wheel["url"] == base + "w.whl"
    assert releases["0.19.0rc1"][0]["url"] == "https://idx.example/p/x.tar.gz"
    html = b'<html><body><a href="../../f/vllm-0.11.0.tar.gz#sha256=cd">vllm-0.11.0.tar.gz</a>' \
           b'<a href="x.whl" data-yanked="">vllm-0.11.0-py3-none-any-x86.whl</a></body></html>'
    releases = parse_simple_index(base, "text/html", html)
    assert releases["0.11.0"][0] == {"filename": "vllm-0.11.0.tar.gz", "url": "https://idx.example/f/vllm-0.11.0.tar.gz",
                                     "sha256": "cd", "size": None, "yanked": False, "packagetype": "sdist"}
    assert releases["0.11.0"][1]["yanked"] is True
    assert version_of_file("vllm_ascend-0.18.0.tar.gz") == "0.18.0" and version_of_file("README") is None


def test_release_list_asks_the_configured_index(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_INDEX_URL", "https://corp.example/simple/")
    asked = []

    def fetch(self, url):
        asked.append(url)
        return "text/html", b'<a href="/f/vllm_ascend-0.18.0.tar.gz">vllm_ascend-0.18.0.tar.gz</a>'

    monkeypatch.setattr(Sources, "_fetch_index", fetch)
    sources = Sources(tmp_path / "cache")
    assert sources.pypi_releases("vllm_ascend") == ["0.18.0"]
    assert asked == ["https://corp.example/simple/vllm-ascend/"]


def test_insteadof_rewrite_picks_the_longest_prefix():
    rules = [("https://github.com/", "file:///m/gh/"), ("https://github.com/vllm-project/", "/srv/vllm/")]
    assert rewrite_url("https://github.com/vllm-project/vllm.git", rules) == "/srv/vllm/vllm.git"
    assert rewrite_url("https://github.com/x/y.git", rules) == "file:///m/gh/x/y.git"
    assert rewrite_url("https://gitcode.com/a.git", rules) == "https://gitcode.com/a.git"


def _upstream(tmp_path):
    root = write_tree(tmp_path / "upkg-src", UPKG_V1)
    repo = git.Repo.init(root, initial_branch="main")
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "t")
        cw.set_value("user", "email", "t@example.invalid")
        cw.set_value("uploadpack", "allowFilter", "true")
        cw.set_value("uploadpack", "allowAnySHA1InWant", "true")
    commit_all(repo, "v1")
    return root


def test_main_is_a_partial_clone_and_an_insteadof_mirror_works_offline(tmp_path, monkeypatch):
    upstream = _upstream(tmp_path)
    gitconfig = tmp_path / "gitconfig"
    gitconfig.write_text(f'[url "file://{upstream}"]\n\tinsteadOf = https://example.invalid/upkg.git\n')
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(gitconfig))
    sources = Sources(tmp_path / "cache", offline=True)  # no network: the insteadOf mirror is local
    tree = sources.git_tree("https://example.invalid/upkg.git", "main")
    assert (tree.root / "upkg" / "core.py").read_text() == (upstream / "upkg" / "core.py").read_text()
    mirror = sources.mirror_path("https://example.invalid/upkg.git")
    assert git.Repo(mirror).git.config("--get", "remote.origin.promisor") == "true"  # --filter=blob:none


def test_offline_error_names_the_mirror_route(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "empty-gitconfig"))
    sources = Sources(tmp_path / "cache", offline=True)
    try:
        sources.git_tree("https://example.invalid/vllm.git", "main")
    except sources_mod.EnvironmentProblem as exc:
        assert "--upstream-path main=DIR" in exc.hint and "git clone --mirror" in exc.hint and "insteadOf" in exc.hint
    else:
        raise AssertionError("offline without a mirror must fail")
