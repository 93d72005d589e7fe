"""tools/ci-sanitizers.sh removes only what it made: a WORK_DIR that exists
and is not its own (no marker file) is refused untouched, before anything is
built (it used to run `rm -rf WORK_DIR/data`).

Run by ctest (SF_SOURCE_DIR, SF_TEST_TMP in the environment) or by hand:
  /usr/bin/python3 tests/cli/test_ci_sanitizers_dir.py -v
"""
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import SOURCE_DIR, ScratchTest  # noqa: E402

SCRIPT = os.path.join(SOURCE_DIR, "tools", "ci-sanitizers.sh")


class CiSanitizersWorkDir(ScratchTest):
    def test_a_users_folder_is_refused_and_kept(self):
        work = os.path.join(self.tmp, "mine")
        os.makedirs(os.path.join(work, "data"))
        with open(os.path.join(work, "data", "precious"), "w") as f:
            f.write("keep")
        p = subprocess.run([SCRIPT, work], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("was not made by this script", p.stderr)
        self.assertNotIn("ASan", p.stdout)  # refused before the first stage
        self.assertEqual(os.listdir(work), ["data"])
        with open(os.path.join(work, "data", "precious")) as f:
            self.assertEqual(f.read(), "keep")


if __name__ == "__main__":
    unittest.main()
