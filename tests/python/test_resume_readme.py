"""The README's training loop with resume, run as written: interrupted at
several points and started again, it must see exactly the batches of an
uninterrupted run (set_epoch at the top of every epoch, also right after
load_state_dict, must not replay the restored epoch). See sfpytest.py for how
to run it by hand."""
import os
import re
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sfpytest import HAVE_TORCH, SOURCE_DIR, pack, remove, scratch, torch, write_samples  # noqa: E402

N = 600  # 3 batches of 256 per epoch (the last one padded)


def readme_loop():
    """The README's Python block that resumes (the one calling load_state_dict)."""
    with open(os.path.join(SOURCE_DIR, "README.md"), encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    loops = [b for b in blocks if "load_state_dict(" in b and "set_epoch(" in b]
    if len(loops) != 1:
        raise AssertionError(f"README has {len(loops)} Python blocks with the resume loop, expected 1")
    return loops[0]


class Crash(Exception):
    pass


@unittest.skipUnless(HAVE_TORCH, "the README loop saves its state with torch.save")
class ReadmeResume(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = scratch("resume-readme-")
        src = os.path.join(cls.tmp, "npy")
        # label i: each step's labels say which samples it got
        write_samples(src, N, (28, 28), np.uint8, label=lambda i: i)
        pack(src, os.path.join(cls.tmp, "dataset"), "--align", "64")
        cls.code = compile(readme_loop(), "README.md", "exec")

    @classmethod
    def tearDownClass(cls):
        remove(cls.tmp)

    def run_loop(self, crash_after=None):
        """Runs the README block in the scratch folder; returns each step's labels.
        With crash_after=k, step k+1 raises (a killed trainer)."""
        steps = []

        def step(img, label):
            if crash_after is not None and len(steps) == crash_after:
                raise Crash()
            self.assertEqual(tuple(img.shape[1:]), (28, 28))
            steps.append(label.tolist())

        cwd = os.getcwd()
        os.chdir(self.tmp)
        try:
            exec(self.code, {"step": step, "__name__": "readme"})
        except Crash:
            pass
        finally:
            os.chdir(cwd)
        return steps

    def test_interrupted_and_resumed_equals_uninterrupted(self):
        state = os.path.join(self.tmp, "loader.pt")
        remove(state)
        full = self.run_loop()
        self.assertEqual(len(full), 30)  # 10 epochs x 3 batches
        self.assertFalse(full[0] == full[3], "epochs differ in order")
        os.remove(state)
        for k in (1, 2, 3, 4, 14, 29):
            before = self.run_loop(crash_after=k)
            self.assertEqual(len(before), k)
            after = self.run_loop()
            self.assertEqual(before + after, full, f"killed after {k} steps and resumed")
            os.remove(state)


if __name__ == "__main__":
    unittest.main()
