"""Tool versions read from dist-info folder names agree with Python's own metadata lookup."""

from importlib import metadata

import pytest

from modelbuild.versions import DISTRIBUTIONS, dist_info_version, tool_version


@pytest.mark.parametrize("short, distribution", sorted(DISTRIBUTIONS.items()))
def test_the_folder_name_gives_the_installed_version(short, distribution):
    assert tool_version(short) == dist_info_version(distribution) == metadata.version(distribution)


def test_a_distribution_that_is_not_installed_has_no_folder():
    assert dist_info_version("no-such-distribution-here") is None
