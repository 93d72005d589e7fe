"""How `shardfeed pack` types the columns of a list (README "list"): a column is int64 or
float64 only when every cell is written exactly as export writes that number back, else
its cells are kept as text; a label that is not a plain decimal integer is refused. So
every case below packs, exports to the same list.csv text, and packs again to the same
records: no cell changes its value or its spelling on the way.

Run by ctest (SHARDFEED, SF_TEST_TMP in the environment) or by hand:
  SHARDFEED=build/shardfeed /usr/bin/python3 tests/cli/test_list_types.py -v
"""
import math
import os
import shutil
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import ScratchTest, run  # noqa: E402
import sfspec  # noqa: E402

BYTES, I64, F64 = 0, 9, 12
TEXT = "text"

# column -> (cells, expected dtype). Each column has as many cells as CASES has rows.
ROWS = 4
COLUMNS = {
    "hex": (["0x1A", "0x1b", "26", "1"], BYTES),           # strtod would read 26.0 and 27.0
    "hex_float": (["0x1p3", "1.0", "2.0", "3.0"], BYTES),
    "specials": (["nan", "inf", "-inf", "0.5"], F64),
    "specials_spelled": (["NaN", "Infinity", "-INF", "0.5"], BYTES),
    "plus": (["+1", "+2", "3", "4"], BYTES),
    "plus_float": (["+1.5", "2.5", "3.5", "4.5"], BYTES),
    "leading_zeros": (["007", "010", "1", "2"], BYTES),
    "float_zeros": (["0.50", "1.0", "2.0", "3.0"], BYTES),
    "beyond_int64": (["9223372036854775808", "1", "2", "3"], BYTES),
    "below_int64": (["-9223372036854775809", "1", "2", "3"], BYTES),
    "int64_ends": (["-9223372036854775808", "9223372036854775807", "0", "-1"], I64),
    "minus_zero_int": (["-0", "1", "2", "3"], BYTES),
    "exponents": (["1e3", "2.5e3", "1E3", "1e+03"], BYTES),
    "shortest": (["1e-05", "1e+16", "0.0001", "1.5e+300"], F64),
    "floats": (["0.1", "1.0", "2500.0", "-0.0"], F64),
    "ints_and_floats": (["1", "0.5", "2", "3"], BYTES),
    "empty": (["", "", "", ""], BYTES),
    "some_empty": (["", "1", "2", "3"], BYTES),
    "blanks": ([" 3", "4 ", "5", "6"], BYTES),
    "dots": ([".5", "5.", "1.0", "2.0"], BYTES),
    "ints": (["5", "-12", "0", "123456789012"], I64),
}


def raw(value):
    return value if isinstance(value, bytes) else value.tobytes()


def same_float(a, b):
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))


class ListTypes(ScratchTest):
    def setUp(self):
        super().setUp()
        self.files = os.path.join(self.tmp, "files")
        os.makedirs(self.files)
        for r in range(ROWS):
            with open(os.path.join(self.files, f"f{r}.bin"), "wb") as f:
                f.write(b"row %d" % r)

    def write_list(self, text, name="l.csv"):
        path = os.path.join(self.files, name)
        with open(path, "w", newline="") as f:
            f.write(text)
        return path

    def test_every_case_round_trips_through_export(self):
        names = list(COLUMNS)
        text = "path,label," + ",".join(names) + "\n"
        for r in range(ROWS):
            text += f"f{r}.bin,{r}," + ",".join(COLUMNS[n][0][r] for n in names) + "\n"
        ds = os.path.join(self.tmp, "ds")
        run("pack", self.write_list(text), "-o", ds, "--quiet", check=0)
        fields = {f["name"]: f for f in sfspec.read_manifest(ds)["fields"]}
        records = list(sfspec.read_records(ds))
        for n in names:
            cells, dtype = COLUMNS[n]
            with self.subTest(column=n):
                self.assertEqual(fields[n]["dtype"], dtype)
                for r, (_, rec) in enumerate(records):
                    if dtype == BYTES:
                        self.assertEqual(rec[n], cells[r].encode())
                    elif dtype == I64:
                        self.assertEqual(rec[n].item(), int(cells[r]))
                    else:
                        self.assertTrue(same_float(rec[n].item(), float(cells[r])), (cells[r], rec[n]))
        out = os.path.join(self.tmp, "export")
        run("export", ds, "-o", out, check=0)
        with open(os.path.join(out, "list.csv"), newline="") as f:
            self.assertEqual(f.read(), text)
        again = os.path.join(self.tmp, "again")
        run("pack", os.path.join(out, "list.csv"), "-o", again, "--quiet", check=0)
        for (ka, ra), (kb, rb) in zip(sfspec.read_records(ds), sfspec.read_records(again)):
            self.assertEqual(ka, kb)
            for n in ra:
                self.assertEqual(raw(ra[n]), raw(rb[n]), f"{ka}.{n}")

    def test_floats_as_python_writes_them(self):
        # pandas' to_csv writes floats with repr(): such a column is float64 and exports
        # to the same text. Random bit patterns, ordinary magnitudes and powers of two.
        rng = np.random.default_rng(5)
        values = list(rng.integers(0, 2**64, 1000, dtype=np.uint64).view(np.float64))
        values += list(rng.normal(0, 1e3, 500)) + list(rng.uniform(0, 1, 500).round(3))
        values += [2.0 ** e for e in range(-1074, 1024, 7)] + [5e-324, 1.7976931348623157e308, 0.0]
        cells = [repr(float(v)) for v in values if math.isfinite(v)]
        for r in range(ROWS, len(cells)):  # one file per row: keys are distinct
            shutil.copy(os.path.join(self.files, f"f{r % ROWS}.bin"), os.path.join(self.files, f"g{r}.bin"))
        rows = "".join(f"{'f' if i < ROWS else 'g'}{i}.bin,{i},{c}\n" for i, c in enumerate(cells))
        ds = os.path.join(self.tmp, "ds")
        run("pack", self.write_list("path,label,x\n" + rows), "-o", ds, "--quiet", check=0)
        self.assertEqual(sfspec.read_manifest(ds)["fields"][2]["dtype"], F64)
        got = [repr(r["x"].item()) for _, r in sfspec.read_records(ds)]
        self.assertEqual(got, cells)
        out = os.path.join(self.tmp, "export")
        run("export", ds, "-o", out, check=0)
        with open(os.path.join(out, "list.csv"), newline="") as f:
            self.assertEqual(f.read(), "path,label,x\n" + rows)

    def test_labels_must_be_plain_decimal_integers(self):
        for label in ("+3", "007", " 3", "3 ", "3.0", "0x1A", "1e3", "-0", "9223372036854775808", "nan", ""):
            with self.subTest(label=label):
                # The bad label on the first row too: never taken for a header and dropped.
                for rows in (f"f0.bin,{label}\nf1.bin,1\n", f"f0.bin,1\nf1.bin,{label}\n"):
                    p = run("pack", self.write_list(rows), "-o", os.path.join(self.tmp, "o"))
                    self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
                    self.assertIn(f"label '{label}' is not an integer written in plain decimal", p.stderr)
                    self.assertFalse(os.path.exists(os.path.join(self.tmp, "o", "manifest.sfm")))

    def test_a_header_is_a_first_row_whose_label_is_no_number(self):
        ds = os.path.join(self.tmp, "ds")
        run("pack", self.write_list("path,class,w\nf0.bin,-7,0.25\nf1.bin,9223372036854775807,1.0\n"),
            "-o", ds, "--quiet", check=0)
        m = sfspec.read_manifest(ds)
        self.assertEqual([(f["name"], f["dtype"]) for f in m["fields"]],
                         [("data", BYTES), ("label", I64), ("w", F64)])
        self.assertEqual([r["label"].item() for _, r in sfspec.read_records(ds)], [-7, 2**63 - 1])


if __name__ == "__main__":
    unittest.main()
