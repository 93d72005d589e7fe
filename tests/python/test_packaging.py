"""The Python package builds offline and works installed: `pip install --no-build-isolation .`
into a fresh venv (Debian's interpreter, --system-site-packages for numpy and torch), then
`import shardfeed` from / and the `shardfeed` console script; `python3 -m build --wheel
--no-isolation` makes a wheel with the extension and the command inside, which installs and
works in another venv. One compile of the library (Debug, without CUDA, to keep it short:
about 36 CPU-seconds in all); the wheel build reuses it. See sfpytest.py for how to run it by
hand."""
import glob
import os
import shutil
import subprocess
import sys
import unittest
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sfpytest import PYTHON, SOURCE_DIR, remove, scratch, write_samples  # noqa: E402

TMP = SRC = None


def copy_source(dst):
    """The source tree without build outputs (what a fresh checkout holds)."""
    skip = shutil.ignore_patterns("build*", ".git", "__pycache__", "dist", "*.egg-info",
                                  ".ci-work", ".gpu-debs", "quickstart")
    shutil.copytree(SOURCE_DIR, dst, ignore=skip, symlinks=True)


def clean_env():
    """The environment without the test's PYTHONPATH (build/python), so that only what is
    installed can be imported; CUDA left out of the package's build to keep it short."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["SHARDFEED_CMAKE_ARGS"] = "-DSHARDFEED_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug"
    env["PIP_NO_INDEX"] = "1"  # offline: nothing may come from a package index
    return env


def sh(*args, cwd=None):
    p = subprocess.run(list(args), cwd=cwd, env=clean_env(), capture_output=True, text=True)
    if p.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {p.returncode}:\n{p.stdout[-3000:]}\n"
                             f"{p.stderr[-3000:]}")
    return p.stdout


def venv(name):
    path = os.path.join(TMP, name)
    # --without-pip: the venv runs Debian's pip from the system site (ensurepip takes 8 s)
    sh(PYTHON, "-m", "venv", "--system-site-packages", "--without-pip", path)
    return path


def setUpModule():
    global TMP, SRC
    TMP = scratch("packaging-")
    SRC = os.path.join(TMP, "src")
    copy_source(SRC)


def tearDownModule():
    remove(TMP)


READ_BACK = """
import os, shardfeed
print(os.path.dirname(shardfeed.__file__))
ld = shardfeed.Loader({ds!r}, 4, output="numpy", fields=("label",))
print(sum(int(y.sum()) for (y,) in ld))
"""


class Installed(unittest.TestCase):
    def check_env(self, env_dir):
        """The venv's shardfeed packs with its console script and reads with its module,
        from /, and is the installed copy."""
        data = os.path.join(TMP, os.path.basename(env_dir) + "-data")
        write_samples(os.path.join(data, "npy"), 10)
        ds = os.path.join(data, "ds")
        self.assertIn("shardfeed 0.", sh(os.path.join(env_dir, "bin", "shardfeed"), "version"))
        sh(os.path.join(env_dir, "bin", "shardfeed"), "pack", os.path.join(data, "npy"),
           "-o", ds, "--quiet", cwd="/")
        where, total = sh(os.path.join(env_dir, "bin", "python"), "-c",
                          READ_BACK.format(ds=ds), cwd="/").split()
        self.assertTrue(where.startswith(os.path.join(env_dir, "lib")), where)
        self.assertEqual(int(total), sum(i * 7 % 1000 for i in range(10)))

    def test_1_pip_install(self):
        env_dir = venv("venv-pip")
        sh(os.path.join(env_dir, "bin", "python"), "-m", "pip", "install", "--no-build-isolation",
           "--no-deps", "--quiet", ".", cwd=SRC)
        self.check_env(env_dir)

    def test_2_wheel(self):
        try:
            sh(PYTHON, "-c", "import build")
        except AssertionError:
            self.skipTest("python3-build not installed (tools/install-deps.sh test)")
        dist = os.path.join(TMP, "dist")
        sh(PYTHON, "-m", "build", "--wheel", "--no-isolation", "--outdir", dist, cwd=SRC)
        wheels = glob.glob(os.path.join(dist, "shardfeed-*.whl"))
        self.assertEqual(len(wheels), 1, wheels)
        with zipfile.ZipFile(wheels[0]) as z:
            names = z.namelist()
            self.assertTrue(any(n.startswith("shardfeed/_shardfeed") and n.endswith(".so")
                                for n in names), names)
            self.assertIn("shardfeed/_bin/shardfeed", names)
            entry = [n for n in names if n.endswith("entry_points.txt")]
            self.assertIn("shardfeed = shardfeed._cli:main", z.read(entry[0]).decode())
        env_dir = venv("venv-wheel")
        sh(os.path.join(env_dir, "bin", "python"), "-m", "pip", "install", "--no-deps", "--quiet",
           wheels[0])
        self.check_env(env_dir)


if __name__ == "__main__":
    unittest.main()
