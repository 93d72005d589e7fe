"""End-to-end tests of `shardfeed pack` on list (CSV/TSV) and tar inputs.

Every dataset is read back with the independent reader (sfspec.py) and
compared value by value with the source files, labels and cells; every
bad input must fail with a message naming the input and the line or
member, leaving no manifest behind.

Run by ctest with SHARDFEED and SF_TEST_TMP in the environment; or by hand:
  SHARDFEED=build/shardfeed /usr/bin/python3 tests/cli/test_inputs.py -v
"""
import io
import json
import os
import sys
import tarfile
import unittest
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import ScratchTest, run  # noqa: E402
import sfspec  # noqa: E402

BYTES, I64, F64 = 0, 9, 12
VAR, INLINE = 1, 2


def add_member(t, name, data=None, kind=tarfile.REGTYPE, linkname=""):
    ti = tarfile.TarInfo(name)
    ti.type = kind
    ti.linkname = linkname
    if data is not None:
        ti.size = len(data)
    t.addfile(ti, io.BytesIO(data) if data is not None else None)


def make_tar(path, members, mode="w"):
    """members: (name, bytes) pairs, in order; bytes None: a directory."""
    with tarfile.open(path, mode) as t:
        for name, data in members:
            if data is None:
                add_member(t, name, kind=tarfile.DIRTYPE)
            else:
                add_member(t, name, data)


class Base(ScratchTest):
    def setUp(self):
        super().setUp()
        self.out = os.path.join(self.tmp, "ds")
        self.rng = np.random.default_rng(7)

    def blob(self, n=None):
        n = int(self.rng.integers(0, 3000)) if n is None else n
        return self.rng.integers(0, 256, n, dtype=np.uint8).tobytes()

    def pack(self, inp, *opts, out=None):
        out = out or self.out
        run("pack", inp, "-o", out, "--quiet", *opts, check=0)
        run("verify", out, check=0)
        return out

    def check_dataset(self, ds, source, fields, expected):
        """fields: [(name, dtype, storage)] in schema order; expected: [(key, {field: value})]
        with bytes for bytes fields and Python numbers for scalars."""
        m = sfspec.read_manifest(ds)
        self.assertEqual(m["metadata"]["source"], source.encode())
        self.assertEqual([(f["name"], f["dtype"], f["storage"]) for f in m["fields"]], fields)
        got = list(sfspec.read_records(ds))
        self.assertEqual([k for k, _ in got], [k for k, _ in expected])
        for (key, rec), (_, want) in zip(got, expected):
            self.assertEqual(sorted(rec), sorted(want), key)
            for name, value in want.items():
                if isinstance(value, bytes):
                    self.assertEqual(rec[name], value, f"{key}.{name}")
                else:
                    self.assertEqual(rec[name].shape, (), f"{key}.{name}")
                    self.assertEqual(rec[name].item(), value, f"{key}.{name}")

    def assert_fails(self, inp, *needles):
        p = run("pack", inp, "-o", self.out)
        # 1, pack's status for a bad input; not a crash or a sanitizer's abort.
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        for n in needles:
            self.assertIn(n, p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.out, "manifest.sfm")))
        return p.stderr


LIST_FIELDS = [("data", BYTES, VAR), ("label", I64, INLINE)]


class ListInput(Base):
    def files(self, names, root=None):
        root = root or os.path.join(self.tmp, "files")
        data = {}
        for n in names:
            path = os.path.join(root, n)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            data[n] = self.blob()
            with open(path, "wb") as f:
                f.write(data[n])
        return root, data

    def write_list(self, name, text):
        path = os.path.join(self.tmp, "files", name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", newline="") as f:
            f.write(text)
        return path

    def test_csv_without_header(self):
        _, data = self.files(["a/1.png", "a/2.png", "b/10.png", "empty.bin"])
        data["empty.bin"] = b""
        open(os.path.join(self.tmp, "files", "empty.bin"), "wb").close()
        lst = self.write_list("l.csv", "a/2.png,5\na/1.png,-3\r\n\nb/10.png,0\nempty.bin,9223372036854775807\n")
        self.pack(lst)
        self.check_dataset(self.out, "list", LIST_FIELDS, [
            ("a/2.png", {"data": data["a/2.png"], "label": 5}),
            ("a/1.png", {"data": data["a/1.png"], "label": -3}),
            ("b/10.png", {"data": data["b/10.png"], "label": 0}),
            ("empty.bin", {"data": b"", "label": 2**63 - 1}),
        ])

    def test_csv_header_extra_columns_and_quoting(self):
        root, data = self.files(["x.jpg", "y y.jpg", "z,1.jpg"])
        absz = os.path.join(root, "z,1.jpg")
        text = ("path,label,weight,caption,count,mixed\n"
                'x.jpg,1,0.5,"hello, world",3,7\n'
                './y y.jpg,2,1.0,"two\nlines ""quoted""",-4,abc\n'
                f'"{absz}",3,2500.0,,5,1.5\n')
        lst = self.write_list("l.csv", text)
        self.pack(lst)
        fields = LIST_FIELDS + [("weight", F64, INLINE), ("caption", BYTES, VAR),
                                ("count", I64, INLINE), ("mixed", BYTES, VAR)]
        self.check_dataset(self.out, "list", fields, [
            ("x.jpg", {"data": data["x.jpg"], "label": 1, "weight": 0.5,
                       "caption": b"hello, world", "count": 3, "mixed": b"7"}),
            ("y y.jpg", {"data": data["y y.jpg"], "label": 2, "weight": 1.0,
                         "caption": b'two\nlines "quoted"', "count": -4, "mixed": b"abc"}),
            (absz.lstrip("/"), {"data": data["z,1.jpg"], "label": 3, "weight": 2500.0,
                                "caption": b"", "count": 5, "mixed": b"1.5"}),
        ])

    def test_tsv_and_txt_with_tabs(self):
        _, data = self.files(["p,1.png", "q.png"])
        body = "p,1.png\t4\tcat\t0.25\nq.png\t6\tdog\t0.001\n"
        fields = LIST_FIELDS + [("col2", BYTES, VAR), ("col3", F64, INLINE)]
        want = [("p,1.png", {"data": data["p,1.png"], "label": 4, "col2": b"cat", "col3": 0.25}),
                ("q.png", {"data": data["q.png"], "label": 6, "col2": b"dog", "col3": 1e-3})]
        for name in ("l.tsv", "l.txt"):
            out = os.path.join(self.tmp, "ds-" + name)
            self.pack(self.write_list(name, body), out=out)
            self.check_dataset(out, "list", fields, want)

    def test_paths_relative_to_the_list_not_the_cwd(self):
        _, data = self.files(["img/0.png"])
        self.write_list("sub/../l.csv", "img/0.png,1\n")
        elsewhere = os.path.join(self.tmp, "elsewhere")
        os.makedirs(elsewhere)
        run("pack", os.path.join("..", "files", "l.csv"), "-o", self.out, "--quiet", cwd=elsewhere,
            check=0)
        self.check_dataset(self.out, "list", LIST_FIELDS, [("img/0.png", {"data": data["img/0.png"], "label": 1})])

    def test_missing_file(self):
        self.files(["a.png"])
        lst = self.write_list("l.csv", "a.png,1\nnope.png,2\n")
        self.assert_fails(lst, "l.csv:2:", "nope.png", "No such file")

    def test_label_not_an_integer(self):
        self.files(["a.png", "b.png"])
        lst = self.write_list("l.csv", "path,label\na.png,1\nb.png,cat\n")
        self.assert_fails(lst, "l.csv:3: label 'cat' is not an integer")

    def test_ragged_row(self):
        self.files(["a.png", "b.png"])
        lst = self.write_list("l.csv", "a.png,1\nb.png,2,extra\n")
        self.assert_fails(lst, "l.csv:2:", "3 cells, expected 2")

    def test_empty_lists(self):
        for i, text in enumerate(["", "\n\n", "path,label\n"]):
            lst = self.write_list(f"e{i}.csv", text)
            self.assert_fails(lst, f"e{i}.csv", "no rows")

    def test_duplicate_key_names_both_lines(self):
        self.files(["a.png"])
        lst = self.write_list("l.csv", "a.png,1\n./a.png,2\n")
        self.assert_fails(lst, "l.csv:2: key 'a.png' repeats line 1")

    def test_file_over_the_value_limit(self):
        root, _ = self.files(["a.png"])
        with open(os.path.join(root, "big.bin"), "wb") as f:
            f.truncate(2**30 + 1)  # sparse: nothing is written
        self.assert_fails(self.write_list("l.csv", "a.png,1\nbig.bin,2\n"), "l.csv:2:", "big.bin",
                          "at most")

    def test_bad_header_name_and_key(self):
        self.files(["a.png"])
        self.assert_fails(self.write_list("h.csv", "path,label,my col\na.png,1,2\n"),
                          "h.csv:1:", "'my col'")
        self.assert_fails(self.write_list("k.csv", "../files/a.png,1\n"), "k.csv:1:", "../files/a.png")
        self.assert_fails(self.write_list("q.csv", 'a.png,1\n"b.png,2\n'), "q.csv:2:", "not closed")
        # One row to the parser, it failed as "no rows (a list holds path,label rows)".
        self.assert_fails(self.write_list("m.csv", "a.png,1\ra.png,2\r"), "m.csv:",
                          "end in a CR alone")

    def test_a_first_row_with_a_number_or_a_file_is_data_not_a_header(self):
        # Taken as a header, each of these rows was dropped without a word (exit 0, one
        # sample fewer, and the further cells became field names). Now each is data, and
        # its label is refused naming the line.
        self.files(["a.png", "b.png"])
        for label in ("1_000", '"1,000"', "\u22121", "\uff11", "O", "label", "-"):
            with self.subTest(label=label):
                lst = self.write_list("f.csv", f"a.png,{label},0.5\nb.png,1,0.25\n")
                self.assert_fails(lst, "f.csv:1:", "label")
        # A real header: a path cell that is no file, a name for a label.
        self.pack(self.write_list("h.csv", "path,label,weight\na.png,1,0.5\nb.png,2,0.25\n"))
        j = json.loads(run("inspect", self.out, "--json").stdout)
        self.assertEqual(([f["name"] for f in j["fields"]], j["samples"]),
                         (["data", "label", "weight"], 2))
        # inspect: a variable-length field has no one size (it said "0 bytes")
        text = run("inspect", self.out).stdout
        self.assertRegex(text, r"\n  data +bytes +\(\*,\) +any size  payload, variable length\n")
        self.assertRegex(text, r"\n  label +int64 +\(\) +8 bytes  inline in the index\n")

    def test_export_writes_the_files_and_a_list_that_packs_the_same(self):
        root, data = self.files(["a/x 1.bin", "b/y.bin"])
        lst = self.write_list("l.csv", 'path,label,caption,score\na/x 1.bin,4,"c, d",0.25\nb/y.bin,2,e,-1\n')
        self.pack(lst)
        exp = os.path.join(self.tmp, "export")
        run("export", self.out, "-o", exp, check=0)
        for name, value in data.items():
            with open(os.path.join(exp, name), "rb") as f:
                self.assertEqual(f.read(), value)
        with open(os.path.join(exp, "list.csv")) as f:
            self.assertEqual(f.read(), 'path,label,caption,score\na/x 1.bin,4,"c, d",0.25\nb/y.bin,2,e,-1\n')
        again = self.pack(os.path.join(exp, "list.csv"), out=os.path.join(self.tmp, "again"))
        a, b = list(sfspec.read_records(again)), list(sfspec.read_records(self.out))
        self.assertEqual([k for k, _ in a], [k for k, _ in b])
        for (key, ra), (_, rb) in zip(a, b):
            self.assertEqual(sorted(ra), sorted(rb))
            for name in ra:
                self.assertEqual(bytes(ra[name]), bytes(rb[name]), f"{key}.{name}")


TAR_FIELDS = [("cls", BYTES, VAR), ("seg.png", BYTES, VAR), ("txt", BYTES, VAR)]


class TarInput(Base):
    def samples(self, keys, prefix=""):
        """Members of samples with fields cls, seg.png and txt (in a shuffled order)."""
        members, want = [], []
        for k in keys:
            vals = {"cls": str(len(want)).encode(), "seg.png": self.blob(), "txt": self.blob(50)}
            want.append((prefix + k, vals))
            for f in self.rng.permutation(sorted(vals)):
                members.append((f"{prefix}{k}.{f}", vals[f]))
        return members, want

    def test_single_tar_with_directories_and_dot_slash(self):
        members, want = self.samples(["000001", "000002", "000010"], prefix="dir/")
        members = [("dir", None)] + [("./" + n if i % 2 else n, d) for i, (n, d) in enumerate(members)]
        path = os.path.join(self.tmp, "one.tar")
        make_tar(path, members)
        self.pack(path)
        self.check_dataset(self.out, "tar", TAR_FIELDS, want)

    def test_export_gives_back_the_members(self):
        members, _ = self.samples(["a/1", "a/2", "b/1"])
        path = os.path.join(self.tmp, "one.tar")
        make_tar(path, members)
        self.pack(path)
        exp = os.path.join(self.tmp, "export")
        run("export", self.out, "-o", exp, check=0)
        got = {}
        for d, _, names in os.walk(exp):
            for n in names:
                with open(os.path.join(d, n), "rb") as f:
                    got[os.path.relpath(os.path.join(d, n), exp)] = f.read()
        self.assertEqual(got, dict(members))

    def test_tar_gz(self):
        members, want = self.samples([f"s{i}" for i in range(20)])
        path = os.path.join(self.tmp, "one.tar.gz")
        make_tar(path, members, "w:gz")
        self.pack(path)
        self.check_dataset(self.out, "tar", TAR_FIELDS, want)

    def make_dir_of_tars(self):
        d = os.path.join(self.tmp, "tars")
        os.makedirs(d)
        want = []
        # Natural order: shard-2 before shard-10.
        # shard-11's long names take pax headers: shards that start inside it
        # open it at a sample's first header, pax header included.
        for i, (name, mode, prefix) in enumerate([("shard-2.tar", "w", ""),
                                                  ("shard-10.tar.gz", "w:gz", ""),
                                                  ("shard-11.tar", "w", "p" * 120 + "/")]):
            members, w = self.samples([f"{i}-{j:03d}" for j in range(40)], prefix=prefix)
            make_tar(os.path.join(d, name), members, mode)
            want += w
        return d, want

    def test_directory_of_tars_and_determinism(self):
        d, want = self.make_dir_of_tars()
        a = self.pack(d, "-j1", "--shard-size", "64KiB", out=os.path.join(self.tmp, "j1"))
        b = self.pack(d, "-j2", "--shard-size", "64KiB", out=os.path.join(self.tmp, "j2"))
        self.check_dataset(a, "tar", TAR_FIELDS, want)
        self.assertGreater(len(sfspec.read_manifest(a)["shards"]), 4)
        self.assertEqual(sorted(os.listdir(a)), sorted(os.listdir(b)))
        for name in os.listdir(a):
            with open(os.path.join(a, name), "rb") as fa, open(os.path.join(b, name), "rb") as fb:
                self.assertEqual(fa.read(), fb.read(), name)

    def test_folder_of_tars_with_other_folders(self):
        # Folders without images are skipped, as ever; one with an image makes the folder an
        # ImageFolder too, which auto-detection refuses rather than drop either.
        d, want = self.make_dir_of_tars()
        os.makedirs(os.path.join(d, "logs", "old"))
        with open(os.path.join(d, "logs", "old", "run.txt"), "w") as f:
            f.write("x")
        self.pack(d, out=os.path.join(self.tmp, "auto"))
        self.check_dataset(os.path.join(self.tmp, "auto"), "tar", TAR_FIELDS, want)
        with open(os.path.join(d, "logs", "old", "plot.png"), "wb") as f:
            f.write(b"x")
        self.assert_fails(d, d + ": this folder holds the inputs of more than one format: tar (3 tar files, e.g. "
                          "'shard-10.tar.gz') and imagefolder (1 class folder with images: 'logs'); cannot tell "
                          "which one to pack: name it with --input-format tar or --input-format imagefolder")
        self.pack(d, "--input-format", "tar", out=os.path.join(self.tmp, "named"))
        self.check_dataset(os.path.join(self.tmp, "named"), "tar", TAR_FIELDS, want)

    def bad(self, members, mode="w", name="bad.tar"):
        path = os.path.join(self.tmp, name)
        make_tar(path, members, mode)
        return path

    def test_malformed_tars(self):
        garbage = os.path.join(self.tmp, "garbage.tar")
        with open(garbage, "wb") as f:
            f.write(self.blob(5000))
        self.assert_fails(garbage, "garbage.tar:")
        members, _ = self.samples(["a", "b"])
        good = self.bad(members)
        with open(good, "rb") as f:
            raw = f.read()
        with tarfile.open(good) as t:
            last = t.getmembers()[-1]
        # In the first member's data; one byte short of the last member's.
        for cut in (700, last.offset_data + max(last.size, 1) - 1):
            trunc = os.path.join(self.tmp, f"trunc{cut}.tar")
            with open(trunc, "wb") as f:
                f.write(raw[:cut])
            self.assert_fails(trunc, f"trunc{cut}.tar:", "runcated")
        gz = self.bad(members, "w:gz", "g.tar.gz")
        with open(gz, "rb") as f:
            raw = f.read()
        with open(gz, "wb") as f:
            f.write(raw[:len(raw) // 2])
        self.assert_fails(gz, "g.tar.gz:")

    def test_a_tar_must_end_whole(self):
        # libarchive (like GNU tar) takes a tar that simply stops after a member, never reads
        # past the end-of-archive marker, and skips the CRC-32 of a gzip: each lost or changed
        # samples without a word.
        members, want = self.samples(["a", "b", "c"])
        good = self.bad(members, name="good.tar")
        with open(good, "rb") as f:
            raw = f.read()
        with tarfile.open(good) as t:
            ms = t.getmembers()
        marker = ms[-1].offset_data + -(-ms[-1].size // 512) * 512  # the two zero blocks start here

        def variant(name, data):
            path = os.path.join(self.tmp, name)
            with open(path, "wb") as f:
                f.write(data)
            return path

        # Cut at a member's end (after sample a's three members): refused, naming that member.
        self.assert_fails(variant("cut.tar", raw[:ms[3].offset]), "cut.tar: no end-of-archive marker after its "
                          f"last member '{ms[2].name}'", "cut short")
        # One zero block of the marker's two is the end all the same (GNU tar: "a lone zero block").
        self.pack(variant("lone.tar", raw[:marker + 512]), out=os.path.join(self.tmp, "lone"))
        self.check_dataset(os.path.join(self.tmp, "lone"), "tar", TAR_FIELDS, want)
        # A second tar appended (cat a.tar b.tar): refused, rather than packing a's samples alone.
        other, _ = self.samples(["d"])
        with open(self.bad(other, name="other.tar"), "rb") as f:
            self.assert_fails(variant("cat.tar", raw + f.read()), "cat.tar: data after the end-of-archive "
                              f"marker (a byte that is not zero at byte {len(raw)}")
        # gzip: a CRC-32 that does not match, in the trailer or from a changed stored byte.
        gz = zlib.compressobj(6, zlib.DEFLATED, 31)
        gz = gz.compress(raw) + gz.flush()
        bad_crc = bytearray(gz)
        bad_crc[-8] ^= 1
        self.assert_fails(variant("crc.tar.gz", bytes(bad_crc)), "crc.tar.gz: damaged gzip data (zlib: "
                          "incorrect data check")
        stored = zlib.compressobj(0, zlib.DEFLATED, 31)
        stored = bytearray(stored.compress(raw) + stored.flush())
        first = raw.index(want[0][1]["seg.png"][:64])
        stored[stored.index(raw[first:first + 64]) + 10] ^= 0x20  # a byte of sample a's value
        self.assert_fails(variant("flip.tar.gz", bytes(stored)), "flip.tar.gz: damaged gzip data",
                          "incorrect data check")
        # Two gzip members that make one tar, then zero padding: whole, and packed.
        halves = [zlib.compressobj(6, zlib.DEFLATED, 31) for _ in range(2)]
        two = b"".join(h.compress(part) + h.flush()
                       for h, part in zip(halves, (raw[:4096], raw[4096:]))) + bytes(100)
        self.pack(variant("two.tar.gz", two), out=os.path.join(self.tmp, "two"))
        self.check_dataset(os.path.join(self.tmp, "two"), "tar", TAR_FIELDS, want)

    def test_sample_missing_or_extra_field(self):
        self.assert_fails(self.bad([("a.x", b"1"), ("a.y", b"2"), ("b.x", b"3")]),
                          "bad.tar:", "'b'", "'y'")
        self.assert_fails(self.bad([("a.x", b"1"), ("b.x", b"3"), ("b.z", b"4")]),
                          "bad.tar:", "b.z", "'z'")

    def test_key_repeated_later(self):
        self.assert_fails(self.bad([("a.x", b"1"), ("b.x", b"2"), ("a.x", b"3")]),
                          "bad.tar:", "member 'a.x'", "key 'a' appears again")
        d = os.path.join(self.tmp, "two")
        os.makedirs(d)
        make_tar(os.path.join(d, "1.tar"), [("k.x", b"1")])
        make_tar(os.path.join(d, "2.tar"), [("k.x", b"2")])
        self.assert_fails(d, "2.tar:", "key 'k' appears again", "1.tar")

    def test_symlink_and_bad_names(self):
        path = os.path.join(self.tmp, "sym.tar")
        with tarfile.open(path, "w") as t:
            add_member(t, "a.x", b"1")
            add_member(t, "b.x", kind=tarfile.SYMTYPE, linkname="a.x")
        self.assert_fails(path, "sym.tar:", "'b.x'", "symbolic link")
        self.assert_fails(self.bad([("noext", b"1")]), "bad.tar:", "'noext'", "KEY.FIELD")
        self.assert_fails(self.bad([("a/../b.x", b"1")]), "bad.tar:", "a/../b.x")
        self.assert_fails(self.bad([("a.x", b"1"), ("a.x", b"2")]), "bad.tar:", "field 'x' twice")

    def test_utf8_names(self):
        for fmt, name in ((tarfile.PAX_FORMAT, "pax.tar"), (tarfile.GNU_FORMAT, "gnu.tar")):
            path = os.path.join(self.tmp, name)
            with tarfile.open(path, "w", format=fmt) as t:
                for n in ("é/001.x", "日本/002.x"):
                    add_member(t, n, n.encode())
            out = self.pack(path, out=os.path.join(self.tmp, "ds-" + name))
            self.check_dataset(out, "tar", [("x", BYTES, VAR)],
                               [("é/001", {"x": "é/001.x".encode()}), ("日本/002", {"x": "日本/002.x".encode()})])

    def test_member_over_the_value_limit(self):
        # Only the header: discovery refuses before it would read the data.
        ti = tarfile.TarInfo("big.bin")
        ti.size = 2**30 + 1
        path = os.path.join(self.tmp, "big.tar")
        with open(path, "wb") as f:
            f.write(ti.tobuf())
        self.assert_fails(path, "big.tar:", "'big.bin'", "at most")

    def test_empty_tar(self):
        self.assert_fails(self.bad([("d", None)]), "bad.tar", "no members")


if __name__ == "__main__":
    unittest.main()
