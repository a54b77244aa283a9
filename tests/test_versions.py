"""Tool versions read from dist-info folder names agree with Python's own metadata lookup."""

from importlib import metadata

import pytest

from modelbuild.versions import DISTRIBUTIONS, dist_info_version, tool_version


@pytest.mark.parametrize("short, distribution", sorted(DISTRIBUTIONS.items()))
def test_the_folder_name_gives_the_installed_version(short, distribution):
    assert tool_version(short) == dist_info_version(distribution) == metadata.version(distribution)


def test_a_distribution_that_is_not_installed_has_no_folder():
    assert dist_info_version("no-such-distribution-here") is None


def test_modelbuilds_version_is_the_installed_one_built_from_the_git_tag():
    import modelbuild
    from modelbuild.versions import package_version

    assert modelbuild.__version__ == package_version() == metadata.version("modelbuild")


@pytest.mark.parametrize(
    "version, expected",
    [("0.1.0", "0.1.0"), ("0.1.0.post3.dev0+g1a2b3c4", "0.1.0"), ("1.2.0.post1.dev7+g1a2b3c4.d20261207", "1.2.0")],
)
def test_keys_take_the_release_alone_so_a_commit_between_tags_keeps_them(version, expected):
    from modelbuild.versions import release, tool_versions

    assert release(version) == expected
    assert tool_versions(("numpy",))["modelbuild"] == release(tool_version("modelbuild"))
