"""`shardfeed bench --image`: the reader's image path from the command line
(issue 14), run in every build including the ASan+UBSan one: random resized
crops with flips, centre crops, decode without resizing, on every engine with
1 and 4 I/O threads; a damaged, a hostile (a PNG claiming 65535x65535) and a
non-image sample stop the run naming the key, or are substituted with
--skip-corrupt; malformed --image arguments are usage errors.

  SHARDFEED=build/shardfeed /usr/bin/python3 tests/cli/test_bench_image.py -v
"""
import json
import os
import struct
import subprocess
import sys
import unittest
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import SOURCE_DIR, ScratchTest, run  # noqa: E402

try:
    import PIL  # noqa: F401
    import skimage.data  # noqa: F401
    HAVE = True
except ImportError:
    HAVE = False


def bomb_png():
    c = b"IHDR" + struct.pack(">IIBBBBB", 65535, 65535, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + c + struct.pack(">I", zlib.crc32(c)) + bytes(64)


@unittest.skipUnless(HAVE, "needs python3-pil and python3-skimage")
class BenchImageTest(ScratchTest):
    def make(self, count, extra=None):
        tree = os.path.join(self.tmp, "tree")
        subprocess.run(["/usr/bin/python3", os.path.join(SOURCE_DIR, "tools", "make-image-tree.py"), tree,
                        "--count", str(count), "--classes", "3"], check=True, capture_output=True)
        for name, data in (extra or {}).items():
            with open(os.path.join(tree, name), "wb") as f:
                f.write(data)
        ds = os.path.join(self.tmp, "ds")
        run("pack", tree, "-o", ds, "--quiet", check=0)
        return ds

    def bench(self, ds, *args, check=0):
        return run("bench", ds, "--batch-size", 4, "--json", *args, check=check)

    def test_every_mode_engine_and_thread_count(self):
        ds = self.make(12)
        for image in ("image=rrc:48:flip", "image=center:40:48:hwc", "image=rrc:32:gray:exact"):
            for engine in ("auto", "pread", "mmap"):
                for threads in (1, 4):
                    p = self.bench(ds, "--image", image, "--engine", engine, "--threads", threads,
                                   "--shuffle", "global", "--epochs", 2)
                    out = json.loads(p.stdout)
                    self.assertEqual(out["samples"], 24, p.stdout)

    def test_damaged_images_name_their_key_or_are_substituted(self):
        with open(os.path.join(SOURCE_DIR, "tests", "fuzz", "corpus", "fuzz_image", "rgb.jpg"), "rb") as f:
            jpg = f.read()[1:]
        ds = self.make(6, {"class_00/bad_cut.jpg": jpg[:len(jpg) // 2], "class_01/bad_bomb.png": bomb_png(),
                           "class_02/bad_text.jpg": b"plain text"})
        p = self.bench(ds, "--image", "image=rrc:32", check=2)  # EXIT_CORRUPT: the data is bad
        self.assertIn("class_00/bad_cut.jpg", p.stderr)
        self.assertIn("the image does not decode", p.stderr)
        self.assertIn("shard-000000.sfs: record", p.stderr)
        p = self.bench(ds, "--image", "image=rrc:32", "--skip-corrupt")
        self.assertEqual(json.loads(p.stdout)["corrupt_substitutions"], 3, p.stdout)

    def test_bad_image_arguments_are_usage_errors(self):
        ds = self.make(3)
        for bad in ("image", "=rrc:32", "image=rrc", "image=rrc:0", "image=crop:32", "image=rrc:32:flip=2",
                    "image=rrc:32:sideways"):
            p = self.bench(ds, "--image", bad, check=1)  # EXIT_USAGE
            self.assertIn("--image takes", p.stderr)
        p = self.bench(ds, "--image", "label=rrc:32", check=1)
        self.assertIn("not a variable-length field", p.stderr)

    def test_decode_of_another_size_is_an_error_even_with_skip(self):
        # Decode() takes every image at one size: one of another size is a configuration error
        # naming the sample and both sizes, never a corrupt sample that --skip-corrupt drops.
        from PIL import Image
        tree = os.path.join(self.tmp, "tree")
        img = Image.fromarray(skimage.data.astronaut()).resize((40, 30))
        for c in range(2):
            os.makedirs(os.path.join(tree, "class_%d" % c))
            for i in range(3):
                img.save(os.path.join(tree, "class_%d" % c, "img_%d.jpg" % i), quality=90)
        img.resize((50, 30)).save(os.path.join(tree, "class_1", "img_1.jpg"), quality=90)
        ds = os.path.join(self.tmp, "ds")
        run("pack", tree, "-o", ds, "--quiet", check=0)
        for skip in ([], ["--skip-corrupt"]):
            for engine in ("pread", "mmap"):
                p = self.bench(ds, "--image", "image=decode", "--engine", engine, *skip, check=1)
                self.assertIn("key 'class_1/img_1.jpg'", p.stderr)
                self.assertIn("(sample 4)", p.stderr)
                self.assertIn("image of 50x30 pixels (width x height), but Decode does not resize and this batch's images are 40x30", p.stderr)
                self.assertNotIn("does not decode", p.stderr)
        # Without the odd one, the same run delivers every image.
        os.remove(os.path.join(tree, "class_1", "img_1.jpg"))
        run("pack", tree, "-o", ds, "--quiet", "--force", check=0)
        p = self.bench(ds, "--image", "image=decode", "--skip-corrupt")
        self.assertEqual(json.loads(p.stdout)["corrupt_substitutions"], 0, p.stdout)

    def test_decoding_is_its_own_stage_in_the_verdict(self):
        # Decoding is not reading: a run limited by decoding says decode-bound, with the decode
        # time apart from the I/O time; the same dataset read as bytes decodes nothing.
        ds = self.make(16)
        p = self.bench(ds, "--image", "image=rrc:64:flip", "--threads", 1, "--epochs", 3)
        j = json.loads(p.stdout)
        self.assertEqual(j["verdict"], "decode-bound", p.stdout)
        self.assertGreater(j["decode_thread_s"], j["io_thread_s"], p.stdout)
        self.assertGreater(j["fractions"]["decode_share"], j["fractions"]["io_share"], p.stdout)
        text = run("bench", ds, "--batch-size", 4, "--image", "image=rrc:64", "--threads", 1, check=0).stdout
        self.assertIn("verdict: decode-bound", text)
        self.assertRegex(text, r"\d+\.\d+ s decoding images")
        j = json.loads(self.bench(ds, "--threads", 1, "--epochs", 3).stdout)
        self.assertEqual(j["decode_thread_s"], 0, j)
        self.assertNotEqual(j["verdict"], "decode-bound", j)


if __name__ == "__main__":
    unittest.main()
