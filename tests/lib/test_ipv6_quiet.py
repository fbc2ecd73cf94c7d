# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""Unit tests of ipv6_quiet (python3 -m unittest discover -s tests/lib), on a fake
/proc/sys/net/ipv6/conf in a temporary directory."""
import contextlib
import io
import os
import shutil
import tempfile
import unittest

import ipv6_quiet


class NoRouterSolicitations(unittest.TestCase):
    def setUp(self):
        self.conf = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.conf)
        for name, value in (("all", "-1"), ("default", "-1"), ("eth0", "-1"), ("eth1", "3"),
                            ("lo", "-1")):
            os.mkdir(os.path.join(self.conf, name))
            self.write(name, value)
        saved, ipv6_quiet.CONF = ipv6_quiet.CONF, self.conf
        self.addCleanup(setattr, ipv6_quiet, "CONF", saved)

    def path(self, name):
        return os.path.join(self.conf, name, "router_solicitations")

    def write(self, name, value):
        with open(self.path(name), "w") as f:
            f.write(value)

    def read(self, name):
        with open(self.path(name)) as f:
            return f.read()

    def test_quiets_every_interface_but_lo_and_all_and_puts_the_values_back(self):
        with ipv6_quiet.no_router_solicitations() as quieted:
            self.assertEqual(quieted, ["default", "eth0", "eth1"])
            self.assertEqual([self.read(n) for n in quieted], ["0", "0", "0"])
            self.assertEqual((self.read("lo"), self.read("all")), ("-1", "-1"))
        self.assertEqual([self.read(n) for n in ("default", "eth0", "eth1")], ["-1", "-1", "3"])

    def test_an_interface_gone_meanwhile_is_printed_and_the_others_are_still_restored(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            with ipv6_quiet.no_router_solicitations():
                shutil.rmtree(os.path.join(self.conf, "default"))  # sorted first: restored first
        self.assertEqual((self.read("eth0"), self.read("eth1")), ("-1", "3"))
        self.assertIn(self.path("default"), err.getvalue())


if __name__ == "__main__":
    unittest.main()
