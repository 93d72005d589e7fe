"""Builds the Python package with CMake, the one build system of the C code: CMake compiles
the library statically into the extension (_shardfeed) and builds the shardfeed command, and
this file only runs it and puts both into the package (the command as shardfeed/_bin/shardfeed,
which the `shardfeed` console script runs). See pyproject.toml for how to call it.

Environment: SHARDFEED_CMAKE_ARGS (extra -D options, space-separated, e.g.
"-DSHARDFEED_CUDA=OFF"), SHARDFEED_BUILD_JOBS (parallel jobs, default: CPU count)."""
import os
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


def version():
    """The library's version, from include/shardfeed/version.h as CMakeLists.txt reads it."""
    with open(os.path.join(HERE, "include", "shardfeed", "version.h")) as f:
        return re.search(r'#define SF_VERSION_STRING "([^"]+)"', f.read()).group(1)


class CMakeBuild(build_ext):
    """Configures and builds the CMake targets shardfeed_python (the extension) and
    shardfeed_cli (the command) in build_temp, then copies them into the package."""

    def build_extension(self, ext):
        if shutil.which("cmake") is None:
            sys.exit("shardfeed: building needs cmake (Debian: apt-get install cmake; "
                     "tools/install-deps.sh build python)")
        build_dir = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        os.makedirs(build_dir, exist_ok=True)
        configure = ["cmake", "-S", HERE, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                     "-DSHARDFEED_TESTS=OFF", f"-DPython3_EXECUTABLE={sys.executable}"]
        configure += shlex.split(os.environ.get("SHARDFEED_CMAKE_ARGS", ""))
        jobs = os.environ.get("SHARDFEED_BUILD_JOBS") or str(os.cpu_count() or 1)
        subprocess.run(configure, check=True)
        subprocess.run(["cmake", "--build", build_dir, "-j", jobs, "--target",
                        "shardfeed_python", "shardfeed_cli"], check=True)

        built = os.path.join(build_dir, "python", "shardfeed")
        modules = [f for f in os.listdir(built) if f.startswith("_shardfeed") and f.endswith(".so")]
        if len(modules) != 1:
            sys.exit(f"shardfeed: CMake built no Python module in {built} (see its messages "
                     f"above: Python's development files or dlpack/dlpack.h missing?)")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(built, modules[0]), target)
        bin_dir = os.path.join(os.path.dirname(target), "_bin")
        os.makedirs(bin_dir, exist_ok=True)
        shutil.copy2(os.path.join(build_dir, "shardfeed"), os.path.join(bin_dir, "shardfeed"))


setup(
    version=version(),
    packages=["shardfeed"],
    package_dir={"": "python"},
    ext_modules=[Extension("shardfeed._shardfeed", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    # Beside, not in, a CMake build folder called build/ (build/python is CMake's).
    options={"build": {"build_base": os.path.join("build", "setuptools")}},
    zip_safe=False,
)
