#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""Unit tests of scripts/check-kernel.py's Rust-side verdicts, over trees shaped like the
packages checked: python3 -m unittest discover -s tests/lib -p 'test_*.py'"""
import contextlib
import importlib.util
import io
import os
import tempfile
import unittest
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check-kernel.py"
spec = importlib.util.spec_from_file_location("check_kernel", SCRIPT)
check_kernel = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_kernel)

RUST_SIDE = ["rust/libcore.rmeta", "rust/libkernel.rmeta", "rust/libmacros.so",
             "rust/bindgen_parameters", "rust/Makefile", "scripts/target.json"]


def verdict(files):
    """(misses, printed text) of check_rust_side over a tree holding `files`."""
    with tempfile.TemporaryDirectory() as d:
        tree = Path(d)
        for name in files:
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            (tree / name).write_text("")
        report = check_kernel.Report()
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            check_kernel.check_rust_side(report, tree)
        return report.misses, out.getvalue()


class RustSideTest(unittest.TestCase):
    def test_a_complete_rust_side_passes(self):
        misses, text = verdict(RUST_SIDE)
        self.assertEqual(misses, 0, text)

    def test_ubuntu_lib_rust_without_bindgen_parameters_names_only_that_file(self):
        # linux-lib-rust-7.0.0-44-generic (Ubuntu 26.04) ships everything but this one.
        misses, text = verdict([f for f in RUST_SIDE if f != "rust/bindgen_parameters"])
        self.assertEqual(misses, 1)
        self.assertIn("incomplete: rust/bindgen_parameters missing", text)
        self.assertNotIn("ships none", text)

    def test_a_bare_headers_package_has_none(self):
        misses, text = verdict(["Makefile", "include/linux/kernel.h"])
        self.assertEqual(misses, 1)
        self.assertIn("no Rust side", text)
        self.assertIn("linux-lib-rust", text)

    def test_an_unprepared_source_tree_is_preparable(self):
        misses, text = verdict(["Kconfig", "rust/kernel/lib.rs"])
        self.assertEqual(misses, 1)
        self.assertIn("preparable", text)
        self.assertIn("modules_prepare", text)


if __name__ == "__main__":
    os.chdir(Path(__file__).parent)
    unittest.main()
