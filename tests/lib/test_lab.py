"""lab.command, the rox-lab command line of the host runners (tests/peer/run, tests/soak/run):
a run that reads the bridge raw says so with rox-lab's one switch, and only such a run."""
import os
import sys
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


if __name__ == "__main__":
    unittest.main()
