"""The `shardfeed` console script of the Python package: runs the shardfeed command built
with the package (shardfeed/_bin/shardfeed), with the same arguments and exit status."""
import os
import sys


def main():
    """Replaces this process with the bundled command."""
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bin", "shardfeed")
    if not os.access(exe, os.X_OK):
        sys.exit(f"shardfeed: {exe} is missing: this shardfeed package was not built with "
                 f"its command (pip install . builds it; from a CMake build, run build/shardfeed)")
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    main()
