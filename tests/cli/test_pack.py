"""End-to-end tests of `shardfeed pack`, `verify`, `inspect` and `export`.

Run by ctest with SHARDFEED (the binary), SF_TEST_TMP (scratch space on the
build's file system) in the environment; or by hand:
  SHARDFEED=build/shardfeed /usr/bin/python3 tests/cli/test_pack.py -v
"""
import filecmp
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import SHARDFEED, ScratchTest, run, write_samples  # noqa: E402
import sfspec  # noqa: E402


def dataset_files(d):
    return sorted(f for f in os.listdir(d))


class Base(ScratchTest):
    def setUp(self):
        super().setUp()
        self.inp = os.path.join(self.tmp, "in")
        self.out = os.path.join(self.tmp, "ds")

    def assert_exported_equal(self, inp, ds):
        exp = os.path.join(self.tmp, "export")
        shutil.rmtree(exp, ignore_errors=True)
        run("export", ds, "-o", exp, check=0)
        self.assertEqual(sorted(os.listdir(exp)), sorted(os.listdir(inp)))
        for name in os.listdir(inp):
            a, b = np.load(os.path.join(inp, name)), np.load(os.path.join(exp, name))
            self.assertEqual(a.shape, b.shape, name)
            self.assertEqual(a.dtype.newbyteorder("<"), b.dtype.newbyteorder("<"), name)
            np.testing.assert_array_equal(a, b, err_msg=name)
            self.assertTrue(b.flags.c_contiguous)


class RoundTrip(Base):
    def test_pack_verify_export_equal(self):
        write_samples(self.inp, 30)
        p = run("pack", self.inp, "-o", self.out, check=0)
        self.assertIn("packed 30 samples", p.stdout)
        run("verify", self.out, check=0)
        self.assert_exported_equal(self.inp, self.out)

    def test_every_dtype_and_scalar(self):
        os.makedirs(self.inp)
        dtypes = ["bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64",
                  "int64", "float16", "float32", "float64", "complex64", "complex128"]
        rng = np.random.default_rng(1)
        for i in range(4):
            for j, dt in enumerate(dtypes):
                a = (rng.standard_normal((2, 3)) * 100)
                if np.dtype(dt).kind == "c":
                    a = a + 1j * a[::-1]
                np.save(os.path.join(self.inp, f"f{j}_{i}.npy"), a.astype(dt))
            np.save(os.path.join(self.inp, f"scalar_{i}.npy"), np.float64(i + 0.5))
            np.save(os.path.join(self.inp, f"flag_{i}.npy"), np.bool_(i % 2))
        run("pack", self.inp, "-o", self.out, check=0)
        run("verify", self.out, check=0)
        self.assert_exported_equal(self.inp, self.out)

    def test_big_endian_and_fortran_order_are_converted(self):
        os.makedirs(self.inp)
        rng = np.random.default_rng(2)
        ref = {}
        for i in range(5):
            a = rng.standard_normal((3, 4, 5))
            ref[i] = a
            variants = [a.astype(">f8"), np.asfortranarray(a), np.asfortranarray(a.astype(">f8")),
                        a.astype("<f8")]
            np.save(os.path.join(self.inp, f"x_{i}.npy"), variants[i % 4])
        run("pack", self.inp, "-o", self.out, check=0)
        for key, rec in sfspec.read_records(self.out):
            self.assertEqual(rec["x"].dtype, np.dtype("<f8"))
            np.testing.assert_array_equal(rec["x"], ref[int(key)])

    def test_natural_key_order_and_spec_layout(self):
        os.makedirs(self.inp)
        for k in ["10", "2", "1", "a10", "a9", "007"]:
            np.save(os.path.join(self.inp, f"v_{k}.npy"), np.arange(1024, dtype=np.int32))
        run("pack", self.inp, "-o", self.out, check=0)
        keys = [k for k, _ in sfspec.read_records(self.out)]
        self.assertEqual(keys, ["1", "2", "007", "10", "a9", "a10"])

    def test_labels_inline_and_images_aligned(self):
        write_samples(self.inp, 5, shape=(3, 16, 16))
        run("pack", self.inp, "-o", self.out, "--align", "512", check=0)
        m = sfspec.read_manifest(self.out)
        by_name = {f["name"]: f for f in m["fields"]}
        self.assertEqual(by_name["label"]["storage"], 2)  # inline
        self.assertEqual(by_name["img"]["storage"], 0)
        self.assertEqual(m["align"], 512)
        info = json.loads(run("inspect", self.out, "--json", check=0).stdout)
        self.assertEqual(info["samples"], 5)
        self.assertEqual([f["name"] for f in info["fields"]], ["img", "label"])
        self.assertEqual(info["fields"][0]["shape"], [3, 16, 16])
        self.assertEqual(info["fields"][1]["storage"], "inline")
        text = run("inspect", self.out, check=0).stdout
        self.assertIn("float32", text)
        self.assertIn("(3, 16, 16)", text)


class Progress(Base):
    """The progress bar shows on a terminal only; --quiet prints nothing; the summary
    says what was packed."""

    def test_bar_on_a_terminal(self):
        import pty
        write_samples(self.inp, 40)
        master, slave = pty.openpty()
        p = subprocess.run([SHARDFEED, "pack", self.inp, "-o", self.out, "-j1"], stdout=subprocess.PIPE,
                           stderr=slave, text=True)
        os.close(slave)
        tty = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO once the writer side is closed and drained
                break
            if not chunk:
                break
            tty += chunk
        os.close(master)
        self.assertEqual(p.returncode, 0)
        text = tty.decode()
        self.assertIn("[##############################] 100%  40/40 samples", text)
        self.assertIn("ETA 0:00", text)
        self.assertIn("packed 40 samples into 1 shards", p.stdout)

    def test_no_bar_without_a_terminal_and_quiet_is_silent(self):
        write_samples(self.inp, 10)
        p = run("pack", self.inp, "-o", self.out, check=0)
        self.assertEqual(p.stderr, "")
        self.assertRegex(p.stdout, r"^packed 10 samples into 1 shards in .*MB/s\n$")
        p = run("pack", self.inp, "-o", self.out, "--force", "--quiet", check=0)
        self.assertEqual((p.stdout, p.stderr), ("", ""))


class Determinism(Base):
    def test_j1_j2_and_reruns_byte_identical(self):
        write_samples(self.inp, 40, shape=(3, 32, 32))
        outs = []
        for jobs in ["1", "2", "2"]:
            d = os.path.join(self.tmp, f"ds{len(outs)}")
            run("pack", self.inp, "-o", d, "-j", jobs, "--shard-size", "64KiB", check=0)
            outs.append(d)
        files = dataset_files(outs[0])
        self.assertGreater(len(files), 3)
        for d in outs[1:]:
            self.assertEqual(dataset_files(d), files)
            match, mismatch, errors = filecmp.cmpfiles(outs[0], d, files, shallow=False)
            self.assertEqual((mismatch, errors), ([], []))

    def test_shard_size_suffixes(self):
        write_samples(self.inp, 20, shape=(3, 32, 32))
        run("pack", self.inp, "-o", self.out, "--shard-size", "0.05MiB", check=0)
        # 3 records of 12 KiB, the 4 KiB header block and the index fit in 0.05 MiB
        self.assertEqual(len(sfspec.read_manifest(self.out)["shards"]), 7)
        p = run("pack", self.inp, "-o", self.out + "x", "--shard-size", "12XB")
        self.assertEqual(p.returncode, 1)
        self.assertIn("--shard-size", p.stderr)


class BadInput(Base):
    def assert_fails_naming(self, needle, *extra):
        p = run("pack", self.inp, "-o", self.out, *extra)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn(needle, p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.out, "manifest.sfm")))
        self.assertNotEqual(run("verify", self.out).returncode, 0)
        return p.stderr

    def test_mismatched_shape(self):
        write_samples(self.inp, 5)
        np.save(os.path.join(self.inp, "img_3.npy"), np.zeros((3, 8, 9), np.float32))
        err = self.assert_fails_naming("img_3.npy")
        self.assertIn("(3, 8, 9)", err)
        self.assertIn("(3, 8, 8)", err)

    def test_mismatched_dtype(self):
        write_samples(self.inp, 5)
        np.save(os.path.join(self.inp, "label_4.npy"), np.int32(1))
        err = self.assert_fails_naming("label_4.npy")
        self.assertIn("int32", err)

    def test_missing_label(self):
        write_samples(self.inp, 5)
        os.remove(os.path.join(self.inp, "label_2.npy"))
        err = self.assert_fails_naming("label_2.npy")
        self.assertIn("missing", err)
        self.assertIn("field 'label' is in 4 of the 5 samples", err)

    def test_a_field_of_one_odd_file_names_that_file(self):
        # A stray mask_3.npy makes 'mask' a field that every other sample lacks: the message
        # named mask_0.npy alone, a file that never existed, not the odd one.
        write_samples(self.inp, 5)
        np.save(os.path.join(self.inp, "mask_3.npy"), np.int64(1))
        err = self.assert_fails_naming("mask_0.npy")
        self.assertIn("field 'mask' is in 1 of the 5 samples, e.g. ", err)
        self.assertIn("mask_3.npy", err)

    def test_an_output_folder_in_the_input_is_named_as_the_cause(self):
        # pack makes the output folder (and its lock) before it reads the input: an output that
        # is the input folder, or inside it, failed as "DIR/.shardfeed.lock: not a .npy file",
        # blaming a file pack itself had made.
        write_samples(self.inp, 3)
        before = sorted(os.listdir(self.inp))
        p = run("pack", self.inp, "-o", self.inp)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn(f"{self.inp}: the output folder is the same as the input folder {self.inp}, "
                      "so pack read it as input (", p.stderr)
        self.assertIn("write the output elsewhere", p.stderr)
        self.assertEqual(sorted(os.listdir(self.inp)), before)
        inside = os.path.join(self.inp, "out")
        p = run("pack", self.inp, "-o", inside)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn(f"{inside}: the output folder is inside the input folder {self.inp}", p.stderr)
        # An output beside the input is no part of it.
        self.assertEqual(run("pack", self.inp, "-o", self.inp + "-out").returncode, 0)

    def test_too_many_fields_names_the_folder(self):
        os.makedirs(self.inp)
        for f in range(65):
            np.save(os.path.join(self.inp, f"f{f}_0.npy"), np.float32(0))
        self.assertIn(f"{self.inp}: more than 64 distinct fields", self.assert_fails_naming("f0"))

    def test_non_npy_file(self):
        write_samples(self.inp, 3)
        open(os.path.join(self.inp, "notes.txt"), "w").write("hi")
        self.assertIn("not a .npy file", self.assert_fails_naming("notes.txt"))

    def test_truncated_npy(self):
        write_samples(self.inp, 3)
        path = os.path.join(self.inp, "img_1.npy")
        data = open(path, "rb").read()
        open(path, "wb").write(data[:-10])
        self.assertIn("truncated", self.assert_fails_naming("img_1.npy"))

    def test_garbage_npy(self):
        write_samples(self.inp, 3)
        open(os.path.join(self.inp, "img_2.npy"), "wb").write(b"PK\x03\x04 definitely not numpy")
        self.assert_fails_naming("img_2.npy")

    def test_object_array_refused(self):
        os.makedirs(self.inp)
        np.save(os.path.join(self.inp, "o_0.npy"), np.array([{"a": 1}], dtype=object),
                allow_pickle=True)
        self.assertIn("not supported", self.assert_fails_naming("o_0.npy"))

    def test_zero_size_array_refused_as_such(self):
        # It said "shape dimension 1 is 0 or too large", as a 1 GiB array did.
        os.makedirs(self.inp)
        np.save(os.path.join(self.inp, "z_0.npy"), np.zeros((3, 0), np.float32))
        self.assertIn("dimension 1 is 0 (a zero-size array", self.assert_fails_naming("z_0.npy"))

    def test_output_not_creatable(self):
        write_samples(self.inp, 3)
        blocker = os.path.join(self.tmp, "file")
        open(blocker, "w").write("x")
        p = run("pack", self.inp, "-o", os.path.join(blocker, "ds"))
        self.assertEqual(p.returncode, 1)
        self.assertIn(os.path.join(blocker, "ds"), p.stderr)

    @unittest.skipIf(os.geteuid() == 0, "root writes into read-only directories")
    def test_output_not_writable(self):
        write_samples(self.inp, 3)
        os.makedirs(self.out)
        os.chmod(self.out, 0o555)
        self.assert_fails_naming(self.out)

    def test_input_untouched_on_failure(self):
        write_samples(self.inp, 5)
        np.save(os.path.join(self.inp, "img_4.npy"), np.zeros((2,), np.float32))
        before = {n: open(os.path.join(self.inp, n), "rb").read() for n in os.listdir(self.inp)}
        self.assert_fails_naming("img_4.npy")
        after = {n: open(os.path.join(self.inp, n), "rb").read() for n in os.listdir(self.inp)}
        self.assertEqual(before, after)


def temp_name(name, dataset_id):
    """The packer's temporary name for NAME in a run of dataset_id."""
    return f".{name}.{dataset_id:016x}.tmp"


def snapshot(d):
    """Every file of d with its inode, mtime and bytes: equal snapshots mean
    nothing was written, replaced or removed."""
    out = {}
    for name in sorted(os.listdir(d)):
        st = os.lstat(os.path.join(d, name))
        with open(os.path.join(d, name), "rb") as f:
            out[name] = (st.st_ino, st.st_mtime_ns, f.read())
    return out


class OutputDirectory(Base):
    def pack_twins(self):
        """Inputs A and B: the same names and sizes (so the same dataset_id),
        other values; with their reference packs."""
        self.a, self.b = self.inp, os.path.join(self.tmp, "in_b")
        write_samples(self.a, 30, shape=(3, 32, 32), seed=1)
        write_samples(self.b, 30, shape=(3, 32, 32), seed=2)
        self.ref_a, self.ref_b = os.path.join(self.tmp, "ref_a"), os.path.join(self.tmp, "ref_b")
        run("pack", self.a, "-o", self.ref_a, "--shard-size", "64KiB", check=0)
        run("pack", self.b, "-o", self.ref_b, "--shard-size", "64KiB", check=0)
        self.assertEqual(sfspec.read_manifest(self.ref_a)["dataset_id"],
                         sfspec.read_manifest(self.ref_b)["dataset_id"])

    def assert_same_files(self, a, b):
        self.assertEqual(dataset_files(a), dataset_files(b))
        match, mismatch, errors = filecmp.cmpfiles(a, b, dataset_files(a), shallow=False)
        self.assertEqual((mismatch, errors), ([], []))

    def test_complete_dataset_rerun_is_a_noop_other_content_refused_then_forced(self):
        self.pack_twins()
        shutil.copytree(self.ref_a, self.out)
        before = snapshot(self.out)
        p = run("pack", self.a, "-o", self.out, "--shard-size", "64KiB", check=0)
        self.assertIn("already complete", p.stdout)
        self.assertEqual(snapshot(self.out), before)  # nothing written
        # The same names and sizes with other values are not "this dataset".
        p = run("pack", self.b, "-o", self.out, "--shard-size", "64KiB")
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertIn("different shardfeed dataset", p.stderr)
        self.assertIn("force option", p.stderr)
        self.assertEqual(snapshot(self.out), before)
        run("pack", self.b, "-o", self.out, "--shard-size", "64KiB", "--force", check=0)
        self.assert_same_files(self.out, self.ref_b)
        run("verify", self.out, check=0)

    def test_a_forced_pack_that_fails_leaves_the_dataset_it_was_to_replace(self):
        """pack --force over a complete dataset, failing on its first shard (a file size limit
        makes the write fail, as a full disk would): exit 1 naming the cause, and the dataset
        there is as it was, file for file (no temporary, no lock left). Was: --force removed
        the old manifest and shards before writing, so a failed pack left neither."""
        self.pack_twins()
        shutil.copytree(self.ref_a, self.out)
        before = snapshot(self.out)

        def small_files():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (16384, 16384))

        p = subprocess.run([SHARDFEED, "pack", self.b, "-o", self.out, "--shard-size", "64KiB", "--force"],
                           capture_output=True, text=True, preexec_fn=small_files)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("File too large", p.stderr)
        self.assertIn(f"the dataset in {self.out} is as it was", p.stderr)
        self.assertEqual(snapshot(self.out), before)
        run("verify", self.out, check=0)

    def test_a_forced_pack_killed_while_writing_leaves_the_dataset_it_was_to_replace(self):
        """pack --force over a complete dataset, SIGKILLed once its first shard is written:
        every final name still holds the old dataset's bytes (only the run's temporaries and
        its lock file are added), so the folder still reads as the old dataset; the same
        command again replaces it. Was: the old manifest and shards were gone at once."""
        a, b = self.inp, os.path.join(self.tmp, "in_b")
        write_samples(a, 400, shape=(3, 32, 32), seed=1)
        write_samples(b, 400, shape=(3, 32, 32), seed=2)
        ref_b = os.path.join(self.tmp, "ref_b")
        run("pack", a, "-o", self.out, "--shard-size", "64KiB", check=0)
        run("pack", b, "-o", ref_b, "--shard-size", "64KiB", check=0)
        before = snapshot(self.out)
        cmd = [SHARDFEED, "pack", b, "-o", self.out, "--shard-size", "64KiB", "--force", "-j", "1"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # The temporaries stay until every shard is written: a poll sees them.
        while proc.poll() is None and not any(n.startswith(".shard-") for n in os.listdir(self.out)):
            pass
        proc.kill()
        self.assertEqual(proc.wait(), -signal.SIGKILL, "the pack ended before it was killed")
        after = snapshot(self.out)
        added = sorted(set(after) - set(before))
        self.assertTrue(added and all(n.startswith(".shard-") or n == ".shardfeed.lock" for n in added), added)
        self.assertEqual({n: after[n] for n in before}, before)
        run("verify", self.out, check=0)
        run(*cmd[1:], check=0)
        self.assert_same_files(self.out, ref_b)

    def test_damaged_complete_dataset_is_not_called_complete(self):
        write_samples(self.inp, 5)
        run("pack", self.inp, "-o", self.out, check=0)
        path = os.path.join(self.out, "shard-000000.sfs")
        data = bytearray(open(path, "rb").read())
        data[4096 + 7] ^= 1  # a record's byte: header, index and footer still agree
        with open(path, "wb") as f:
            f.write(data)
        p = run("pack", self.inp, "-o", self.out)
        self.assertEqual(p.returncode, 1)
        self.assertIn("shard-000000.sfs", p.stderr)
        run("pack", self.inp, "-o", self.out, "--force", check=0)
        run("verify", self.out, check=0)

    def test_resume_keeps_no_shard_of_another_input_with_the_same_names_and_sizes(self):
        self.pack_twins()
        shutil.copytree(self.ref_a, self.out)
        # What a kill -9 of `pack A` leaves: no manifest, A's shards, a temporary.
        os.remove(os.path.join(self.out, "manifest.sfm"))
        dataset_id = sfspec.read_manifest(self.ref_a)["dataset_id"]
        with open(os.path.join(self.out, temp_name("shard-000000.sfs", dataset_id)), "wb") as f:
            f.write(b"partial")
        p = run("pack", self.b, "-o", self.out, "--shard-size", "64KiB", check=0)
        self.assertNotIn("kept", p.stdout)
        self.assert_same_files(self.out, self.ref_b)
        run("verify", self.out, check=0)

    def test_different_dataset_refused(self):
        write_samples(self.inp, 5)
        run("pack", self.inp, "-o", self.out, check=0)
        other = os.path.join(self.tmp, "other")
        write_samples(other, 6, seed=3)
        p = run("pack", other, "-o", self.out)
        self.assertEqual(p.returncode, 1)
        self.assertIn("different", p.stderr)
        run("verify", self.out, check=0)  # untouched

    def test_foreign_file_refused_even_with_force(self):
        write_samples(self.inp, 3)
        os.makedirs(self.out)
        open(os.path.join(self.out, "precious.txt"), "w").write("keep me")
        for extra in ([], ["--force"]):
            p = run("pack", self.inp, "-o", self.out, *extra)
            self.assertEqual(p.returncode, 1)
            self.assertIn("precious.txt", p.stderr)
        self.assertEqual(open(os.path.join(self.out, "precious.txt")).read(), "keep me")

    def test_a_foreign_folder_is_called_a_folder(self):
        write_samples(self.inp, 3)
        os.makedirs(os.path.join(self.out, "notes"))
        for extra in ([], ["--force"]):
            p = run("pack", self.inp, "-o", self.out, *extra, check=1)
            self.assertIn("notes: output directory holds a folder shardfeed did not write", p.stderr)
        os.symlink(self.inp, os.path.join(self.out, "link"))
        os.rmdir(os.path.join(self.out, "notes"))
        p = run("pack", self.inp, "-o", self.out, check=1)
        self.assertIn("link: output directory holds a symlink shardfeed did not write", p.stderr)
        self.assertEqual(os.listdir(self.out), ["link"])

    def test_files_named_like_shardfeeds_are_never_removed(self):
        """Only a file that carries a dataset_id (a header or manifest that
        decodes, a temporary named with one) is shardfeed's."""
        write_samples(self.inp, 3)
        ref = os.path.join(self.tmp, "ref")
        run("pack", self.inp, "-o", ref, check=0)
        real_shard = os.path.join(ref, "shard-000000.sfs")
        cases = {".x.tmp": b"user data", "shard-000001.sfs": b"not a shard at all" * 20,
                 "manifest.sfm": b"\x89SFMANI\n but not really" * 5, ".shard-000000.sfs.tmp.tmp": b"x",
                 temp_name("shard-000000.sfs", 1).replace(".tmp", "g.tmp"): b"x"}
        for name, data in list(cases.items()) + [("shard-000002.sfs", None)]:
            with self.subTest(name):
                shutil.rmtree(self.out, ignore_errors=True)
                os.makedirs(self.out)
                path = os.path.join(self.out, name)
                if data is None:  # a symlink to a real shard is not a file shardfeed wrote
                    os.symlink(real_shard, path)
                else:
                    with open(path, "wb") as f:
                        f.write(data)
                for extra in ([], ["--force"]):
                    p = run("pack", self.inp, "-o", self.out, *extra)
                    self.assertEqual(p.returncode, 1, p.stdout)
                    self.assertIn(name, p.stderr)
                    self.assertIn("did not write", p.stderr)
                    self.assertEqual(os.listdir(self.out), [name])
                    if data is None:
                        self.assertEqual(os.readlink(path), real_shard)
                    else:
                        self.assertEqual(open(path, "rb").read(), data)

    def test_a_seven_digit_shard_of_a_dataset_is_its_shard(self):
        # SF_SHARD_NAME_FMT writes shard 1,000,000 and on with seven digits; pack took only six
        # for shardfeed's, so such a shard (of an earlier, larger pack) was a foreign file that
        # even --force refused. Now it is a shard of another dataset, replaced with --force.
        write_samples(self.inp, 3)
        os.makedirs(self.out)
        other = os.path.join(self.tmp, "other")
        write_samples(os.path.join(self.tmp, "other-npy"), 4, seed=3)
        run("pack", os.path.join(self.tmp, "other-npy"), "-o", other, check=0)
        shutil.copy(os.path.join(other, "shard-000000.sfs"), os.path.join(self.out, "shard-1000000.sfs"))
        p = run("pack", self.inp, "-o", self.out)
        self.assertEqual(p.returncode, 1)
        self.assertIn("different shardfeed dataset (shard-1000000.sfs", p.stderr)
        run("pack", self.inp, "-o", self.out, "--force", check=0)
        self.assertNotIn("shard-1000000.sfs", os.listdir(self.out))
        run("verify", self.out, check=0)

    def test_temporaries_of_another_dataset_removed_only_with_force(self):
        write_samples(self.inp, 3)
        os.makedirs(self.out)
        other = os.path.join(self.out, temp_name("shard-000000.sfs", 0x1234))
        with open(other, "wb") as f:
            f.write(b"half a shard")
        p = run("pack", self.inp, "-o", self.out)
        self.assertEqual(p.returncode, 1)
        self.assertIn("different shardfeed dataset", p.stderr)
        self.assertTrue(os.path.exists(other))
        run("pack", self.inp, "-o", self.out, "--force", check=0)
        self.assertFalse(os.path.exists(other))
        run("verify", self.out, check=0)

    def test_rerun_after_interruption_completes_identically(self):
        write_samples(self.inp, 30, shape=(3, 32, 32))
        ref = os.path.join(self.tmp, "ref")
        run("pack", self.inp, "-o", ref, "--shard-size", "64KiB", check=0)
        shutil.copytree(ref, self.out)
        dataset_id = sfspec.read_manifest(ref)["dataset_id"]
        # What a kill -9 leaves: no manifest, some shards, a temporary file,
        # and the lock file (its lock gone with the process).
        os.remove(os.path.join(self.out, "manifest.sfm"))
        names = [n for n in dataset_files(self.out) if n.startswith("shard-")]
        os.remove(os.path.join(self.out, names[-1]))
        open(os.path.join(self.out, temp_name(names[-1], dataset_id)), "wb").write(b"partial")
        open(os.path.join(self.out, ".shardfeed.lock"), "w").write("shardfeed lock: pack pid 1 on gone\n")
        # A finished shard damaged afterwards is not kept.
        damaged = os.path.join(self.out, names[1])
        data = bytearray(open(damaged, "rb").read())
        data[5000] ^= 1
        open(damaged, "wb").write(data)
        p = run("pack", self.inp, "-o", self.out, "--shard-size", "64KiB", check=0)
        self.assertIn(f"{len(names) - 2} finished shards kept", p.stdout)
        self.assert_same_files(ref, self.out)  # no temporary, no lock file left


class Lock(Base):
    """One pack or merge at a time writes a folder: OUT/.shardfeed.lock."""

    def hold_lock(self, content):
        import fcntl
        os.makedirs(self.out, exist_ok=True)
        f = open(os.path.join(self.out, ".shardfeed.lock"), "w")
        f.write(content)
        f.flush()
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self.addCleanup(f.close)
        return f

    def test_second_pack_refused_naming_the_holder(self):
        write_samples(self.inp, 5)
        self.hold_lock("shardfeed lock: pack pid 4242 on somehost\n")
        p = run("pack", self.inp, "-o", self.out)
        self.assertEqual(p.returncode, 1)
        self.assertIn(f"another shardfeed pack (pid 4242 on somehost) is writing {self.out}", p.stderr)
        self.assertEqual(os.listdir(self.out), [".shardfeed.lock"])
        p = run("merge", self.out, "-o", self.out)
        self.assertEqual(p.returncode, 1)
        self.assertIn("is writing", p.stderr)

    def test_lock_file_of_a_dead_run_taken_and_removed(self):
        write_samples(self.inp, 5)
        os.makedirs(self.out)
        open(os.path.join(self.out, ".shardfeed.lock"), "w").write("shardfeed lock: pack pid 1 on gone\n")
        run("pack", self.inp, "-o", self.out, check=0)
        self.assertNotIn(".shardfeed.lock", os.listdir(self.out))
        run("verify", self.out, check=0)

    def test_a_users_file_named_like_the_lock_is_kept(self):
        write_samples(self.inp, 5)
        os.makedirs(self.out)
        path = os.path.join(self.out, ".shardfeed.lock")
        open(path, "w").write("my notes")
        for extra in ([], ["--force"]):
            p = run("pack", self.inp, "-o", self.out, *extra)
            self.assertEqual(p.returncode, 1)
            self.assertIn(".shardfeed.lock", p.stderr)
        self.assertEqual(open(path).read(), "my notes")

    def test_failed_pack_leaves_no_folder_it_made(self):
        os.makedirs(self.inp)
        p = run("pack", self.inp, "-o", self.out)
        self.assertEqual(p.returncode, 1)
        self.assertFalse(os.path.exists(self.out))


class Limits(Base):
    def test_out_of_file_descriptors_says_which_limit(self):
        write_samples(self.inp, 5)
        seen = 0
        # The first descriptors past stdin/out/err: each limit runs out at
        # another open (the lock, the input folder, the output folder...).
        for nofile in range(4, 8):
            shutil.rmtree(self.out, ignore_errors=True)
            p = run("pack", self.inp, "-o", self.out, "-j", "1", nofile=nofile)
            if p.returncode != 0:
                self.assertEqual(p.returncode, 1, p.stderr)
                self.assertIn("ulimit -n", p.stderr)
                seen += 1
        self.assertGreater(seen, 0)


class PipesAndDevices(Base):
    def test_list_that_is_a_fifo_is_refused_not_waited_on(self):
        os.makedirs(self.inp)
        fifo = os.path.join(self.inp, "list.csv")
        os.mkfifo(fifo)
        p = run("pack", fifo, "-o", self.out, timeout=60)
        self.assertEqual(p.returncode, 1)
        self.assertIn(f"{fifo}: a FIFO, not a regular file", p.stderr)


class Corruption(Base):
    def setUp(self):
        super().setUp()
        write_samples(self.inp, 6, shape=(3, 16, 16))
        run("pack", self.inp, "-o", self.out, "--shard-size", "12KiB", check=0)

    def flip_and_verify(self, name, offset):
        path = os.path.join(self.out, name)
        data = bytearray(open(path, "rb").read())
        data[offset] ^= 0x10
        open(path, "wb").write(data)
        p = run("verify", self.out)
        data[offset] ^= 0x10
        open(path, "wb").write(data)
        self.assertEqual(p.returncode, 2, f"{name}@{offset}: {p.stdout}{p.stderr}")
        self.assertIn(name, p.stdout)
        return p.stdout

    def test_every_region_detected(self):
        shard = "shard-000000.sfs"
        size = os.path.getsize(os.path.join(self.out, shard))
        regions = {"header": 20, "header padding": 1000, "record": 4096 + 100,
                   "record padding": 4096 + 3072 + 5, "index": size - 64 - 10,
                   "footer": size - 30, "end magic": size - 1}
        for what, off in regions.items():
            with self.subTest(what):
                out = self.flip_and_verify(shard, off)
                if what == "record":
                    self.assertIn("record 0", out)
                    self.assertIn("checksum", out)
                if what == "record padding":
                    self.assertIn("byte %d" % off, out)
        for off in range(0, os.path.getsize(os.path.join(self.out, "manifest.sfm")), 37):
            self.flip_and_verify("manifest.sfm", off)

    def test_truncation_and_missing_and_extra_shard(self):
        path = os.path.join(self.out, "shard-000001.sfs")
        data = open(path, "rb").read()
        for cut in [0, 100, 4096, len(data) - 65, len(data) - 1]:
            open(path, "wb").write(data[:cut])
            p = run("verify", self.out)
            self.assertEqual(p.returncode, 2, cut)
            self.assertIn("shard-000001.sfs", p.stdout)
        os.remove(path)
        p = run("verify", self.out)
        self.assertEqual(p.returncode, 2)
        self.assertIn("missing", p.stdout)
        open(path, "wb").write(data)
        shutil.copy(path, os.path.join(self.out, "shard-000099.sfs"))
        p = run("verify", self.out)
        self.assertEqual(p.returncode, 2)
        self.assertIn("shard-000099.sfs", p.stdout)
        # Shard 1,000,000 and on have seven digits (SPEC.md: up to 2^20 shards): it is a shard
        # name too, which verify did not see as one.
        os.remove(os.path.join(self.out, "shard-000099.sfs"))
        shutil.copy(path, os.path.join(self.out, "shard-1000000.sfs"))
        p = run("verify", self.out)
        self.assertEqual(p.returncode, 2)
        self.assertRegex(p.stdout, r"shard-1000000.sfs .*shard file not listed in the manifest")

    def test_json_report(self):
        res = json.loads(run("verify", self.out, "--json", check=0).stdout)
        self.assertTrue(res["ok"])
        self.assertEqual(res["records"], 6)
        path = os.path.join(self.out, "shard-000000.sfs")
        data = bytearray(open(path, "rb").read())
        data[4096 + 17] ^= 1
        open(path, "wb").write(data)
        p = run("verify", self.out, "--json")
        self.assertEqual(p.returncode, 2)
        res = json.loads(p.stdout)
        self.assertFalse(res["ok"])
        self.assertEqual(len(res["problems"]), 1)
        self.assertEqual(res["problems"][0]["record"], 0)
        self.assertEqual(res["problems"][0]["error"], "checksum mismatch")
        # export refuses to write the damaged record
        self.assertEqual(run("export", self.out, "-o", os.path.join(self.tmp, "e")).returncode, 2)

    def test_json_reports_are_utf8_whatever_the_path(self):
        # A path byte that is not UTF-8 was written raw: not JSON (RFC 8259 wants UTF-8), and
        # json.loads failed. Such a byte is U+FFFD now, as Python's errors="replace" makes it.
        odd = os.path.join(os.fsencode(self.tmp), b"ds\xff")
        shutil.copytree(os.fsencode(self.out), odd)
        for args, field in (([b"inspect", odd, b"--json"], "path"),
                            ([b"verify", odd + b"-gone", b"--json"], "error")):
            p = subprocess.run([os.fsencode(SHARDFEED), *args], capture_output=True)
            doc = json.loads(p.stdout.decode("utf-8"))  # strict: fails on a raw 0xff
            self.assertIn("ds\ufffd", doc[field], args)
        p = subprocess.run([os.fsencode(SHARDFEED), b"verify", odd, b"--json"], capture_output=True)
        self.assertTrue(json.loads(p.stdout.decode("utf-8"))["ok"])

    def test_usage_errors_exit_1(self):
        self.assertEqual(run("verify").returncode, 1)
        self.assertEqual(run("verify", os.path.join(self.tmp, "nope")).returncode, 1)
        self.assertEqual(run("pack", self.inp).returncode, 1)
        self.assertEqual(run("frobnicate").returncode, 1)


if __name__ == "__main__":
    unittest.main()
