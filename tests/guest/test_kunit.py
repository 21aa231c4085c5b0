# SPDX-License-Identifier: GPL-2.0
"""rsiw's in-kernel KUnit suites (built only when CONFIG_KUNIT=y, as in the debug kernel):
they run when the module loads and report in KTAP through dmesg."""
import os
import re

import pytest

from conftest import load_rsiw, sh, unload_rsiw

SUITES = ["rsiw_crc32c", "rsiw_verbs", "rsiw_kverbs"]


@pytest.mark.skipif(os.environ.get("RSIW_KERNEL") != "debug", reason="KUnit is built in only on the debug kernel")
def test_kunit_suites_pass():
    unload_rsiw()
    before = len(sh("dmesg").stdout.splitlines())
    load_rsiw()
    try:
        new = "\n".join(sh("dmesg").stdout.splitlines()[before:])
        for suite in SUITES:
            assert re.search(rf"^\s*(\[[^\]]*\]\s*)?ok \d+ {suite}\s*$", new, re.M), (
                f"KUnit suite {suite} did not pass:\n{new}"
            )
        assert not re.search(r"not ok \d+", new), new
    finally:
        unload_rsiw()
