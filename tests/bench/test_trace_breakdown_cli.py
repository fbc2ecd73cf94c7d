"""tests/bench/trace-breakdown's command line: OUT_DIR, --librox, and rox-lab's options after --."""
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "trace-breakdown")
_loader = importlib.machinery.SourceFileLoader("trace_breakdown_cli", SCRIPT)
_spec = importlib.util.spec_from_loader("trace_breakdown_cli", _loader)
cli = importlib.util.module_from_spec(_spec)
_loader.exec_module(cli)


class CommandLine(unittest.TestCase):
    def test_what_follows_the_separator_goes_to_rox_lab(self):
        a = cli.parse(["/tmp/out", "--librox", "/x/librox-rdmav34.so", "--", "--cable", "--mtu", "1500"])
        self.assertEqual((a.out, a.librox, a.lab_opts),
                         ("/tmp/out", "/x/librox-rdmav34.so", ["--cable", "--mtu", "1500"]))
        a = cli.parse(["--", "--librox"])
        self.assertEqual((a.out, a.lab_opts), (None, ["--librox"]))

    def test_the_guests_get_the_librox_and_the_iterations(self):
        saved = {k: os.environ.pop(k, None) for k in ("SEND_LAT_ITERS", "WRITE_LAT_ITERS")}
        try:
            os.environ["WRITE_LAT_ITERS"] = "10"
            self.assertEqual(cli.guest_env("/cache/m/rox.ko", "RDMAV_DRIVERS=/cache/p/librox "),
                             "RDMAV_DRIVERS=/cache/p/librox ROX_KO=/cache/m/rox.ko SEND_LAT_ITERS=1000"
                             " WRITE_LAT_ITERS=10")
        finally:
            for k, v in saved.items():
                os.environ.pop(k, None)
                if v is not None:
                    os.environ[k] = v

    def test_help_names_the_options_and_boots_nothing(self):
        out = subprocess.run([sys.executable, SCRIPT, "--help"], stdout=subprocess.PIPE, text=True,
                             check=True).stdout
        for word in ("--librox", "OUT_DIR", "ROX_NIC_BIN", "ROX_TRACE_BIN", "SEND_LAT_ITERS"):
            self.assertIn(word, out)


if __name__ == "__main__":
    unittest.main()
