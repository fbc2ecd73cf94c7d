"""lab.command, the rox-lab command line of the host runners (tests/peer/run, tests/soak/run):
a run that reads the bridge raw says so with rox-lab's one switch, and only such a run. And how
the runners find their binaries and hand the guests another librox (lab.rox_trace,
lab.librox_drivers)."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lab  # noqa: E402

GUESTS = [("rox", "true"), ("virtio", "true")]


class Command(unittest.TestCase):
    def setUp(self):
        # Any executable stands in for rox-lab: only the command line is looked at.
        self.saved = os.environ.get("ROX_LAB_BIN")
        os.environ["ROX_LAB_BIN"] = sys.executable

    def tearDown(self):
        if self.saved is None:
            os.environ.pop("ROX_LAB_BIN", None)
        else:
            os.environ["ROX_LAB_BIN"] = self.saved

    def test_a_raw_reader_of_the_bridge_passes_rox_labs_switch(self):
        cmd = lab.command(GUESTS, raw_bridge_reader=True, extra=["--host-cmd", "tcpdump"])
        self.assertEqual(cmd.count("--raw-bridge-reader"), 1)
        # Before the guests: rox-lab's options, not a guest's command.
        self.assertLess(cmd.index("--raw-bridge-reader"), cmd.index("--guest"))

    def test_no_switch_without_a_raw_reader(self):
        self.assertNotIn("--raw-bridge-reader", lab.command(GUESTS))
        # A capture is one: rox-lab's --capture implies the switch by itself.
        cmd = lab.command(GUESTS, capture="/tmp/x.pcap")
        self.assertNotIn("--raw-bridge-reader", cmd)
        self.assertIn("--capture", cmd)

    def test_mtu_none_leaves_the_mtu_to_rox_lab_or_extra(self):
        self.assertIn("--mtu", lab.command(GUESTS))
        cmd = lab.command(GUESTS, mtu=None, extra=["--mtu", "1500"])
        self.assertEqual(cmd.count("--mtu"), 1)
        self.assertEqual(cmd[cmd.index("--mtu") + 1], "1500")


def executable(path):
    with open(path, "w") as f:
        f.write("#!/bin/sh\n")
    os.chmod(path, 0o755)
    return path


class Binaries(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.saved = {k: os.environ.pop(k, None) for k in ("ROX_NIC_BIN", "ROX_TRACE_BIN")}

    def tearDown(self):
        for k, v in self.saved.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v
        self.dir.cleanup()

    def test_rox_trace_is_found_beside_the_rox_nic_in_use(self):
        os.environ["ROX_NIC_BIN"] = executable(os.path.join(self.dir.name, "rox-nic"))
        trace = executable(os.path.join(self.dir.name, "rox-trace"))
        self.assertEqual(lab.rox_trace(), trace)

    def test_rox_trace_bin_wins_and_a_missing_binary_is_named(self):
        os.environ["ROX_NIC_BIN"] = executable(os.path.join(self.dir.name, "rox-nic"))
        other = executable(os.path.join(self.dir.name, "other-trace"))
        os.environ["ROX_TRACE_BIN"] = other
        self.assertEqual(lab.rox_trace(), other)
        del os.environ["ROX_TRACE_BIN"]
        with self.assertRaises(SystemExit) as e:
            lab.rox_trace()
        self.assertIn(os.path.join(self.dir.name, "rox-trace"), str(e.exception))
        os.environ["ROX_NIC_BIN"] = os.path.join(self.dir.name, "absent", "rox-nic")
        with self.assertRaises(SystemExit) as e:
            lab.rox_nic()
        self.assertIn("absent/rox-nic", str(e.exception))


class Librox(unittest.TestCase):
    def setUp(self):
        self.cache = tempfile.TemporaryDirectory()
        self.root = os.path.join(self.cache.name, "root")
        self.lib = os.path.join(self.cache.name, "prov", "librox-rdmav34.so")
        os.makedirs(os.path.dirname(self.lib))
        open(self.lib, "w").close()

    def tearDown(self):
        self.cache.cleanup()

    def test_a_librox_in_the_cache_is_named_to_the_guests_without_its_suffix(self):
        self.assertEqual(lab.librox_drivers(self.lib, self.cache.name, self.root),
                         "RDMAV_DRIVERS=/cache/prov/librox ")

    def test_a_librox_in_the_clone_is_under_rox(self):
        with tempfile.NamedTemporaryFile(dir=lab.TOP, suffix="-rdmav34.so") as f:
            name = os.path.basename(f.name)[:-len("-rdmav34.so")]
            self.assertEqual(lab.librox_drivers(f.name, self.cache.name, self.root),
                             f"RDMAV_DRIVERS=/rox/{name} ")

    def test_a_bad_librox_is_refused_with_its_reason(self):
        for path, why in [(os.path.join(self.cache.name, "missing-rdmav34.so"), "existing file"),
                          (self.lib[:-3], "lib<x>-rdmav34.so")]:
            with self.assertRaises(SystemExit) as e:
                lab.librox_drivers(path, self.cache.name, self.root)
            self.assertIn(why, str(e.exception))
        with tempfile.TemporaryDirectory() as elsewhere:
            outside = os.path.join(elsewhere, "librox-rdmav34.so")
            open(outside, "w").close()
            with self.assertRaises(SystemExit) as e:
                lab.librox_drivers(outside, self.cache.name, self.root)
            self.assertIn("must be under", str(e.exception))

    def test_without_librox_the_roots_is_needed(self):
        with self.assertRaises(SystemExit) as e:
            lab.librox_drivers(None, self.cache.name, self.root)
        self.assertIn("make provider", str(e.exception))
        installed = os.path.join(self.root, "usr/lib/x86_64-linux-gnu/libibverbs/librox-rdmav34.so")
        os.makedirs(os.path.dirname(installed))
        open(installed, "w").close()
        self.assertEqual(lab.librox_drivers(None, self.cache.name, self.root), "")


if __name__ == "__main__":
    unittest.main()
