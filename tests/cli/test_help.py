"""CLI manners: 'shardfeed help CMD' and 'shardfeed CMD --help' give the same full help, with
every option the command takes (read from its getopt table in cli/cmd_*.c) explained; usage
errors say what is wrong in one line; the man page shardfeed(1) renders and is installed.
By hand (after a build):

  SHARDFEED=build/shardfeed /usr/bin/python3 tests/cli/test_help.py -v
"""
import os
import re
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import SHARDFEED, SOURCE_DIR, ScratchTest, run  # noqa: E402

COMMANDS = ("pack", "merge", "verify", "inspect", "export", "bench", "push")


def long_options(cmd):
    """The long options of `cmd` as its source declares them to getopt_long."""
    with open(os.path.join(SOURCE_DIR, "cli", f"cmd_{cmd}.c")) as f:
        src = f.read()
    names = re.findall(r'\{"([a-z][a-z-]*)", (?:no|required|optional)_argument', src)
    assert names, f"no getopt table found in cli/cmd_{cmd}.c"
    return names


def explained(text, option):
    """Whether `text` has an option line for --option with words after it (on that line or
    the next, indented further)."""
    lines = text.splitlines()
    for k, line in enumerate(lines):
        m = re.match(r"^\s+(?:-\w, )?--" + re.escape(option) + r"(?: \S+)?(?:\s{2,}(\S.*))?$", line)
        if m and (m.group(1) or (k + 1 < len(lines) and lines[k + 1].strip())):
            return True
    return False


class Help(unittest.TestCase):
    def test_help_cmd_and_cmd_help_agree(self):
        # version and help too: 'version --help' printed the version, 'help --help' failed.
        for cmd in COMMANDS + ("version", "help"):
            with self.subTest(cmd):
                a = run("help", cmd, check=0)
                b = run(cmd, "--help", check=0)
                self.assertEqual(a.stdout, b.stdout)
                self.assertTrue(a.stdout.startswith(f"usage: shardfeed {cmd}"), a.stdout)

    def test_every_option_is_explained(self):
        for cmd in COMMANDS:
            text = run("help", cmd, check=0).stdout
            for opt in long_options(cmd):
                with self.subTest(cmd=cmd, option=opt):
                    self.assertTrue(explained(text, opt), f"--{opt} not explained in:\n{text}")

    def test_overview_lists_every_command(self):
        text = run("help", check=0).stdout
        for cmd in COMMANDS + ("version",):
            self.assertRegex(text, rf"(?m)^  {cmd} +\S")
        self.assertEqual(run("help", "frobnicate").returncode, 1)


class UsageErrors(ScratchTest):
    def test_a_bad_option_is_one_line_naming_it(self):
        # getopt_long's own message ("pack: unrecognized option '--bogus'") came with the usage
        # and a "see" line; an unknown command printed the whole overview.
        cases = ((["pack", "in", "-o", "out", "--bogus"], "shardfeed pack: unknown (or ambiguous) option '--bogus'"),
                 (["pack", "in", "-o"], "shardfeed pack: option '-o' needs a value"),
                 (["pack", "in", "--shard-size"], "shardfeed pack: option '--shard-size' needs a value"),
                 (["pack", "in", "--force=1"], "shardfeed pack: option '--force' takes no value"),
                 (["verify", "-x", "ds"], "shardfeed verify: unknown option '-x'"),
                 (["frob"], "shardfeed: unknown command 'frob' (commands: pack,"),
                 (["help", "frob"], "shardfeed help: no command 'frob'"),
                 (["version", "x"], "shardfeed version: takes no argument"))
        for args, want in cases:
            with self.subTest(args=args):
                p = run(*args)
                self.assertEqual(p.returncode, 1)
                self.assertEqual(p.stdout, "")
                self.assertEqual(len(p.stderr.splitlines()), 1, p.stderr)
                self.assertTrue(p.stderr.startswith(want), p.stderr)

    def test_missing_output_is_one_line(self):
        for args, what in ((("pack", self.tmp), "-o OUT_DIR"), (("export", self.tmp), "-o DIR"),
                           (("merge", self.tmp), "-o DATASET_DIR")):
            with self.subTest(args[0]):
                p = run(*args, check=1)
                self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
                self.assertIn(f"shardfeed {args[0]}: missing {what}", p.stderr)
                self.assertIn(f"shardfeed help {args[0]}", p.stderr)

    def test_missing_dataset_is_one_line(self):
        for cmd in ("verify", "inspect", "bench", "export"):
            with self.subTest(cmd):
                p = run(cmd, check=1)
                self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
                self.assertIn("no DATASET_DIR given", p.stderr)


class ManPage(ScratchTest):
    def page(self):
        page = os.path.join(os.path.dirname(SHARDFEED), "shardfeed.1")
        self.assertTrue(os.path.exists(page), f"{page}: not built")
        return page

    def rendered(self, page):
        env = dict(os.environ, MANWIDTH="100", MAN_KEEP_FORMATTING="0")
        p = subprocess.run(["man", "-l", "--warnings", page], capture_output=True, text=True,
                           env=env, check=True)
        self.assertEqual(p.stderr, "")
        return re.sub(".\x08", "", p.stdout)  # no bold or underline by overstriking

    @unittest.skipUnless(shutil.which("man"), "man-db not installed")
    def test_the_page_renders_every_commands_help(self):
        text = self.rendered(self.page())
        for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS", "EXIT STATUS"):
            self.assertRegex(text, rf"(?m)^{section}$")
        for cmd in COMMANDS:
            for opt in long_options(cmd):
                self.assertIn(f"--{opt}", text, f"{cmd} --{opt}")
        # the same words as 'shardfeed help' (roff refills nothing inside .nf)
        self.assertIn(run("help", "bench", check=0).stdout.splitlines()[-2].strip(), text)

    def test_the_page_is_installed(self):
        build = os.path.dirname(SHARDFEED)
        if not os.path.exists(os.path.join(build, "cmake_install.cmake")):
            self.skipTest("SHARDFEED is not in a CMake build folder")
        subprocess.run(["cmake", "--install", build, "--prefix", self.tmp], check=True,
                       capture_output=True)
        installed = os.path.join(self.tmp, "share", "man", "man1", "shardfeed.1")
        with open(installed) as a, open(self.page()) as b:
            self.assertEqual(a.read(), b.read())


if __name__ == "__main__":
    unittest.main()
