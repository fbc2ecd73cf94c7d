#!/usr/bin/env python3
"""Unit tests of scripts/doc-links.py, the docs' link gate: GitHub's heading anchors and which
links resolve:
python3 -m unittest discover -s tests/lib -p 'test_*.py'"""
import importlib.util
import tempfile
import unittest
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "doc-links.py"
spec = importlib.util.spec_from_file_location("doc_links", SCRIPT)
doc_links = importlib.util.module_from_spec(spec)
spec.loader.exec_module(doc_links)


class Anchors(unittest.TestCase):
    def test_punctuation_goes_and_letters_digits_underscores_stay(self):
        self.assertEqual(doc_links.slug("Session 17: the cable's receive copy (2026-11-28, 10:19)"),
                         "session-17-the-cables-receive-copy-2026-11-28-1019")
        self.assertEqual(doc_links.slug("`tests/bench/compare`: rox against rdma_rxe"),
                         "testsbenchcompare-rox-against-rdma_rxe")

    def test_symbols_go_and_their_spaces_stay(self):
        self.assertEqual(doc_links.slug("rox ↔ rox at 5 % loss — 1 µs"), "rox--rox-at-5--loss--1-µs")

    def test_a_link_in_a_heading_counts_by_its_text(self):
        self.assertEqual(doc_links.slug("See [the page](x.md#y)"), "see-the-page")

    def test_repeated_headings_are_numbered_and_fenced_ones_do_not_count(self):
        text = "# A\n\n## What changed\n```\n## What changed\n```\n### What changed\n"
        self.assertEqual(doc_links.anchors(text), {"a", "what-changed", "what-changed-1"})


class Links(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.root = Path(self.dir.name)
        (self.root / "sub").mkdir()
        (self.root / "img.svg").write_text("<svg/>")
        (self.root / "sub" / "b.md").write_text("# B\n## Two words\n")

    def tearDown(self):
        self.dir.cleanup()

    def check(self, text):
        page = self.root / "a.md"
        page.write_text("# A\n" + text)
        return [(target, why) for _, target, why in doc_links.broken_links(page)]

    def test_files_headings_and_images_that_exist_pass(self):
        self.assertEqual(self.check("[b](sub/b.md#two-words) [a](#a) ![i](img.svg) [b](sub/b.md)\n"), [])

    def test_a_missing_file_or_heading_fails(self):
        self.assertEqual(self.check("[x](sub/c.md) [y](sub/b.md#three) [z](#b)\n"),
                         [("sub/c.md", "no such file"), ("sub/b.md#three", "no such heading"),
                          ("#b", "no such heading")])

    def test_links_in_code_and_with_a_scheme_are_not_checked(self):
        text = "`[x](nope.md)` [w](https://example.org/nope)\n```\n[y](nope.md)\n```\n"
        self.assertEqual(self.check(text), [])

    def test_a_path_is_relative_to_the_linking_file(self):
        (self.root / "sub" / "c.md").write_text("[up](../img.svg) [here](b.md#b) [bad](img.svg)\n")
        bad = doc_links.broken_links(self.root / "sub" / "c.md")
        self.assertEqual([(t, why) for _, t, why in bad], [("img.svg", "no such file")])


if __name__ == "__main__":
    unittest.main()
