#!/usr/bin/env python3
"""Unit tests of scripts/code-size.py, the size gate: which files are sources and where their
functions begin and end, in each language it measures:
python3 -m unittest discover -s tests/lib -p 'test_*.py'"""
import contextlib
import importlib.util
import io
import os
import tempfile
import unittest
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "code-size.py"
spec = importlib.util.spec_from_file_location("code_size", SCRIPT)
code_size = importlib.util.module_from_spec(spec)
spec.loader.exec_module(code_size)


def body(n):
    """`n` lines of statements."""
    return "".join(f"    x{i} = {i};\n" for i in range(n))


class Functions(unittest.TestCase):
    def test_rust_functions_end_at_their_closing_brace_past_braces_in_strings(self):
        src = 'fn a() {\n    let s = "}";\n    let c = \'}\';\n}\n\n#[test]\nfn b() {\n}\n'
        self.assertEqual(code_size.rust_functions(src), [("a", 1, 4), ("b", 7, 2)])

    def test_python_functions_count_to_their_last_statement(self):
        src = "def f():\n    return 1\n\n\nclass C:\n    def m(self):\n        pass\n"
        self.assertEqual(sorted(code_size.python_functions(src)), [("f", 1, 2), ("m", 6, 2)])

    def test_c_functions_begin_at_their_declarator_and_skip_initializers(self):
        src = ("#include <x.h>\n"
               "static const int t[] = {\n 1, 2 };\n"
               "struct s { int a; };\n"
               "static int\nrun(int a,\n    char *b)\n{\n"
               "\tif (a) { /* } */ puts(\"}\"); }\n\treturn '}';\n}\n")
        self.assertEqual(code_size.c_functions(src), [("run", 5, 7)])

    def test_shell_functions_end_at_the_brace_of_their_indentation(self):
        src = "log() { echo; }\nstage() { # name\n\tif x; then\n\t\t{ y; }\n\tfi\n}\nz\n"
        self.assertEqual(code_size.shell_functions(src), [("stage", 2, 5)])


class Gate(unittest.TestCase):
    def run_gate(self, files):
        """(exit status, stderr) of the gate over a tree holding `files` ({name: text})."""
        with tempfile.TemporaryDirectory() as d:
            for name, text in files.items():
                Path(d, name).write_text(text)
            err = io.StringIO()
            argv = code_size.sys.argv
            code_size.sys.argv = ["code-size.py", d]
            try:
                with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                    status = code_size.main()
            finally:
                code_size.sys.argv = argv
            return status, err.getvalue().replace(d + os.sep, "")

    def test_the_limits_hold_for_every_language_and_at_the_limit_pass(self):
        at_limit = {
            "a.rs": "fn f() {\n" + body(118) + "}\n",
            "b.c": "int f(void)\n{\n" + body(117) + "}\n",
            "c.py": "def f():\n" + body(119),
            "d": "#!/usr/bin/env bash\nf() {\n" + body(118) + "}\n",
            "e.rs": "\n" * 800,
        }
        self.assertEqual(self.run_gate(at_limit), (0, ""))
        over = {
            "a.rs": "fn f() {\n" + body(119) + "}\n",
            "b.c": "int f(void)\n{\n" + body(118) + "}\n",
            "c.py": "def f():\n" + body(120),
            "d": "#!/usr/bin/env bash\nf() {\n" + body(119) + "}\n",
            "e.rs": "\n" * 801,
            "notes.md": "\n" * 900,
        }
        status, err = self.run_gate(over)
        self.assertEqual(status, 1)
        for what in ("a.rs:1: rust function f is 121", "b.c:1: c function f is 121",
                     "c.py:1: python function f is 121", "d:2: shell function f is 121",
                     "e.rs: 801 lines"):
            self.assertIn(what, err)
        self.assertNotIn("notes.md", err)


if __name__ == "__main__":
    unittest.main()
