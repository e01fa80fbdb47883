"""`gemsharectl library-path`: the libnvs.so of this installation, for
`LD_PRELOAD=$(gemsharectl library-path) python train.py`, in each way gemshare is installed."""

from __future__ import annotations

import pytest
from ctl_helpers import REPO
from typer.testing import CliRunner

from gemshare_ctl import app as ctl_app
from gemshare_nvs import library
from gemshare_nvs.library import LibraryMissing, library_path

ELF = b"\x7fELF stand-in"


def test_a_wheel_carries_it_in_the_package(tmp_path):
    package = tmp_path / "site-packages" / "gemshare_nvs"
    package.mkdir(parents=True)
    (package / "libnvs.so").write_bytes(ELF)
    assert library_path(package) == package / "libnvs.so"


def test_make_install_links_the_package_to_the_library_beside_it(tmp_path):
    """PKGDIR/libnvs.so, where the device plugin looks, is the path given, not the link's."""
    pkgdir = tmp_path / "lib" / "gemshare"
    package = pkgdir / "python" / "gemshare_nvs"
    package.mkdir(parents=True)
    (pkgdir / "libnvs.so").write_bytes(ELF)
    (package / "libnvs.so").symlink_to("../../libnvs.so")
    assert library_path(package) == pkgdir / "libnvs.so"
    (pkgdir / "libnvs.so").unlink()
    with pytest.raises(LibraryMissing, match=f"links to, {pkgdir / 'libnvs.so'}, is missing: "
                                             r"install gemshare again \(make install\)"):
        library_path(package)


def test_a_source_tree_gives_its_build_or_says_to_run_make(tmp_path):
    (tmp_path / "libnvs").mkdir()
    (tmp_path / "libnvs" / "build.mk").write_text("")
    (tmp_path / "nvs").mkdir()
    with pytest.raises(LibraryMissing, match=f"not built in the source tree {tmp_path}: run make "
                                             f"there \\(it builds {tmp_path}/build/libnvs.so\\)"):
        library_path(tmp_path / "nvs")
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "libnvs.so").write_bytes(ELF)
    assert library_path(tmp_path / "nvs") == tmp_path / "build" / "libnvs.so"


def test_a_package_without_it_says_how_to_get_one(tmp_path):
    package = tmp_path / "site-packages" / "gemshare_nvs"
    package.mkdir(parents=True)
    with pytest.raises(LibraryMissing, match="install a gemshare wheel for this machine"):
        library_path(package)


def test_the_command_prints_the_path_alone(ctl):
    result = ctl("library-path")
    built = REPO / "build" / "libnvs.so"
    assert library.PACKAGE == REPO / "nvs"  # this suite runs the checkout's own package
    if built.is_file():
        assert (result.returncode, result.stdout, result.stderr) == (0, f"{built}\n", "")
    else:
        assert result.returncode == 1 and result.stdout == ""
        assert "is not built in the source tree" in " ".join(result.stderr.split())


def test_the_command_says_why_there_is_none_and_exits_1(tmp_path, monkeypatch):
    monkeypatch.setattr(library, "PACKAGE", tmp_path / "site-packages" / "gemshare_nvs")
    result = CliRunner().invoke(ctl_app.app, ["library-path"], env={"COLUMNS": "200"})
    assert result.exit_code == 1 and result.stdout == ""
    assert " ".join(result.stderr.split()).startswith(
        "gemsharectl: this installation of gemshare carries no libnvs.so")
