"""tools/install-deps.sh: groups install only their packages, and a held apt
lock is said in one line. apt-get, dpkg-query and id are stubs first on PATH
(recording their arguments), so nothing is installed.

Run by ctest (SF_SOURCE_DIR, SF_TEST_TMP) or by hand:
  /usr/bin/python3 tests/cli/test_install_deps.py -v
"""
import os
import shutil
import stat
import subprocess
import tempfile
import unittest

SRC = os.environ.get("SF_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TMP_ROOT = os.environ.get("SF_TEST_TMP")
SCRIPT = os.path.join(SRC, "tools", "install-deps.sh")


class InstallDeps(unittest.TestCase):
    def setUp(self):
        if TMP_ROOT:
            os.makedirs(TMP_ROOT, exist_ok=True)
        self.tmp = tempfile.mkdtemp(dir=TMP_ROOT)
        self.bin = os.path.join(self.tmp, "bin")
        os.makedirs(self.bin)
        self.log = os.path.join(self.tmp, "apt-get.log")
        # Nothing is installed; we are root.
        self.stub("dpkg-query", "exit 1")
        self.stub("id", "echo 0")
        self.stub("apt-get", f'echo "$*" >>{self.log}\nexit 0')

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def stub(self, name, body):
        path = os.path.join(self.bin, name)
        with open(path, "w") as f:
            f.write("#!/bin/sh\n" + body + "\n")
        os.chmod(path, stat.S_IRWXU)

    def run_script(self, *groups):
        env = dict(os.environ, PATH=self.bin + os.pathsep + os.environ["PATH"])
        return subprocess.run(["bash", SCRIPT, *groups], capture_output=True, text=True, env=env)

    def installed(self):
        with open(self.log) as f:
            lines = [l for l in f.read().splitlines() if " install " in f" {l} "]
        self.assertEqual(len(lines), 1, lines)
        return set(lines[0].split()) - {"install", "-y", "-qq", "--no-install-recommends",
                                        "-o", "DPkg::Lock::Timeout=120"}

    def test_the_quick_start_groups_leave_tests_ci_and_benchmarks_out(self):
        p = self.run_script("build", "python", "demo")
        self.assertEqual(p.returncode, 0, p.stderr)
        got = self.installed()
        for pkg in ("cmake", "liburing-dev", "python3-dev", "python3-torch", "dataset-fashion-mnist"):
            self.assertIn(pkg, got)
        for pkg in ("libcriterion-dev", "valgrind", "clang-14", "fio", "python3-h5py", "openmpi-bin"):
            self.assertNotIn(pkg, got)

    def test_no_group_is_every_group_and_an_unknown_group_is_refused(self):
        self.assertEqual(self.run_script().returncode, 0)
        got = self.installed()
        for pkg in ("cmake", "libcriterion-dev", "valgrind", "fio"):
            self.assertIn(pkg, got)
        p = self.run_script("nonsense")
        self.assertEqual(p.returncode, 2)
        self.assertIn("no group 'nonsense'", p.stderr)

    def test_a_held_apt_lock_is_said_in_one_line(self):
        self.stub("apt-get", 'echo "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by '
                             'process 4242 (unattended-upgr)" >&2\n'
                             'echo "E: Unable to acquire the dpkg frontend lock" >&2\nexit 100')
        p = self.run_script("build")
        self.assertNotEqual(p.returncode, 0)
        lines = [l for l in p.stderr.splitlines() if l.startswith("install-deps:")]
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertIn("apt is busy", lines[0])
        self.assertIn("held by process 4242 (unattended-upgr)", lines[0])
        self.assertNotIn("Unable to acquire", p.stderr)


if __name__ == "__main__":
    unittest.main()
