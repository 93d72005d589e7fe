"""`shardfeed pack` of an ImageFolder tree (ROOT/<class>/<image>): sample order and
labels equal torchvision's ImageFolder, class names in the manifest, export back to
the same tree byte for byte, clear errors for bad trees.

Run by ctest (SHARDFEED, SF_TEST_TMP in the environment) or by hand:
  SHARDFEED=build/shardfeed /usr/bin/python3 tests/cli/test_imagefolder.py -v
"""
import io
import json
import os
import sys
import tarfile
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import ScratchTest, run  # noqa: E402
import sfspec  # noqa: E402

try:
    from PIL import Image
except ImportError:  # python3-pil
    Image = None
try:
    import torchvision
except ImportError:  # python3-torchvision
    torchvision = None

# Names with spaces, non-ASCII letters, a hidden folder (torchvision takes it as a
# class too) and an upper-case extension.
CLASSES = ["cat", "dog house", "Größe", "été", "日本", ".hidden"]


def make_tree(root, classes=CLASSES, per_dir=2, seed=0):
    """PNG and JPEG files in each class, in the class folder and in nested folders
    whose names sort differently as paths than as a depth-first walk ("sub a" vs
    "sub/x"), plus files torchvision skips (no image extension)."""
    rng = np.random.default_rng(seed)
    for c in classes:
        for sub in ["", "sub a", "sub/x"]:
            d = os.path.join(root, c, sub)
            os.makedirs(d, exist_ok=True)
            for i in range(per_dir):
                a = rng.integers(0, 255, (6 + i, 7, 3), dtype=np.uint8)
                Image.fromarray(a).save(os.path.join(d, f"img {i}.png"))
                Image.fromarray(a).save(os.path.join(d, f"IMG_{i}.JPG"), format="JPEG")
        with open(os.path.join(root, c, "notes.txt"), "w") as f:
            f.write("not an image")
    with open(os.path.join(root, "README"), "w") as f:
        f.write("not a class")


def tree_files(root):
    out = {}
    for d, _, files in os.walk(root):
        for name in files:
            p = os.path.join(d, name)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = f.read()
    return out


@unittest.skipIf(Image is None, "python3-pil is not installed")
class ImageFolder(ScratchTest):
    def setUp(self):
        super().setUp()
        self.root = os.path.join(self.tmp, "tree")
        self.out = os.path.join(self.tmp, "ds")

    def pack(self, *extra, check=0, root=None):
        return run("pack", root or self.root, "-o", self.out, "-j2", *extra, check=check)

    @unittest.skipIf(torchvision is None, "python3-torchvision is not installed")
    def test_order_and_labels_match_torchvision(self):
        make_tree(self.root)
        p = self.pack()
        self.assertIn(f"skipped {len(CLASSES) + 1} file(s)", p.stdout)
        tv = torchvision.datasets.ImageFolder(self.root)
        m = sfspec.read_manifest(self.out)
        self.assertEqual(sfspec.class_names(m), tv.classes)
        self.assertEqual(m["metadata"]["source"], b"imagefolder")
        self.assertEqual([f["name"] for f in m["fields"]], ["image", "label"])
        records = list(sfspec.read_records(self.out))
        self.assertEqual(len(records), len(tv.samples))
        for (key, v), (path, label) in zip(records, tv.samples):
            self.assertEqual(os.path.join(self.root, key), path)
            self.assertEqual(int(v["label"]), label, key)
            with open(path, "rb") as f:
                self.assertEqual(v["image"], f.read(), key)
        run("verify", self.out, check=0)

    def test_export_recreates_the_tree(self):
        make_tree(self.root)
        self.pack()
        exp = os.path.join(self.tmp, "export")
        run("export", self.out, "-o", exp, check=0)
        want = {k: v for k, v in tree_files(self.root).items()
                if k.lower().endswith((".png", ".jpg")) and os.sep in k}
        self.assertEqual(tree_files(exp), want)

    def test_inspect_shows_classes(self):
        make_tree(self.root, classes=["b", "a c", "Ä"])
        self.pack()
        info = json.loads(run("inspect", "--json", self.out, check=0).stdout)
        self.assertEqual(info["source"], "imagefolder")
        self.assertEqual(info["classes"], ["a c", "b", "Ä"])
        text = run("inspect", self.out, check=0).stdout
        self.assertIn("classes   3: 0=a c, 1=b, 2=Ä", text)

    def test_deterministic_across_jobs(self):
        make_tree(self.root)
        a, b = os.path.join(self.tmp, "a"), os.path.join(self.tmp, "b")
        run("pack", self.root, "-o", a, "-j1", "--shard-size", "20KiB", check=0)
        run("pack", self.root, "-o", b, "-j2", "--shard-size", "20KiB", check=0)
        self.assertGreater(len(os.listdir(a)), 3)
        self.assertEqual(tree_files(a), tree_files(b))

    def test_resume_keeps_finished_shards(self):
        make_tree(self.root)
        self.pack("--shard-size", "20KiB")
        before = tree_files(self.out)
        os.remove(os.path.join(self.out, "manifest.sfm"))
        os.remove(os.path.join(self.out, "shard-000001.sfs"))
        p = self.pack("--shard-size", "20KiB")
        self.assertIn("finished shards kept", p.stdout)
        self.assertEqual(tree_files(self.out), before)

    def test_root_that_also_holds_a_tar_is_refused_until_the_format_is_named(self):
        # Detection took the tar (.npy files, then tars, then class folders) and packed its one
        # member, exit 0, every class dropped without a word.
        make_tree(self.root, classes=["cat", "dog"])
        with tarfile.open(os.path.join(self.root, "extras.tar"), "w") as t:
            ti = tarfile.TarInfo("000.txt")
            ti.size = 1
            t.addfile(ti, io.BytesIO(b"z"))
        p = self.pack(check=1)
        self.assertIn(self.root + ": this folder holds the inputs of more than one format: tar (1 tar file: "
                      "'extras.tar') and imagefolder (2 class folders with images, e.g. 'cat'); cannot tell which "
                      "one to pack: name it with --input-format tar or --input-format imagefolder", p.stderr)
        self.assertFalse(os.path.exists(self.out))
        # Named, either packs: the classes (the tar skipped among ROOT's files), or the tar alone.
        p = self.pack("--input-format", "imagefolder")
        self.assertIn("skipped 4 file(s)", p.stdout)  # README, extras.tar, 2 notes.txt
        m = sfspec.read_manifest(self.out)
        self.assertEqual((m["metadata"]["source"], sfspec.class_names(m)), (b"imagefolder", ["cat", "dog"]))
        files = tree_files(self.root)
        got = {k: bytes(v["image"]) for k, v in sfspec.read_records(self.out)}
        self.assertEqual(got, {k: v for k, v in files.items() if k.lower().endswith((".png", ".jpg"))})
        tar_out = os.path.join(self.tmp, "tar")
        run("pack", self.root, "-o", tar_out, "--input-format", "tar", check=0)
        self.assertEqual(sfspec.read_manifest(tar_out)["metadata"]["source"], b"tar")
        self.assertEqual([(k, bytes(v["txt"])) for k, v in sfspec.read_records(tar_out)], [("000", b"z")])

    def assert_fails(self, *needles, root=None):
        p = self.pack(check=1, root=root)
        for n in needles:
            self.assertIn(n, p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.out, "manifest.sfm")))

    def test_empty_class_folder(self):
        make_tree(self.root, classes=["a", "b"])
        os.makedirs(os.path.join(self.root, "empty"))
        self.assert_fails("empty: class folder has no image files")

    def test_class_folder_with_only_other_files(self):
        make_tree(self.root, classes=["a"])
        os.makedirs(os.path.join(self.root, "txt"))
        with open(os.path.join(self.root, "txt", "x.txt"), "w") as f:
            f.write("x")
        self.assert_fails("txt: class folder has no image files")

    def test_unreadable_files(self):
        make_tree(self.root, classes=["a"])
        broken = os.path.join(self.root, "a", "gone.jpg")
        os.symlink(os.path.join(self.tmp, "nowhere.jpg"), broken)
        self.assert_fails("a/gone.jpg: No such file or directory")
        os.remove(broken)
        fifo = os.path.join(self.root, "a", "pipe.png")
        os.mkfifo(fifo)
        self.assert_fails("a/pipe.png: not a regular file")
        os.remove(fifo)
        if os.geteuid() != 0:  # root reads a mode-000 file anyway
            locked = os.path.join(self.root, "a", "locked.png")
            with open(locked, "wb") as f:
                f.write(b"x")
            os.chmod(locked, 0)
            self.assert_fails("locked.png", "Permission denied")

    def test_symlink_loop(self):
        make_tree(self.root, classes=["a"])
        os.symlink("..", os.path.join(self.root, "a", "up"))
        self.assert_fails("symlink loop")

    def test_no_class_folders(self):
        os.makedirs(self.root)
        with open(os.path.join(self.root, "x.png"), "wb") as f:
            f.write(b"x")
        p = run("pack", self.root, "-o", self.out, "--input-format", "imagefolder", check=1)
        self.assertIn("no class folders", p.stderr)

    def test_key_too_long(self):
        make_tree(self.root, classes=["a"])
        name = "x" * 250 + ".png"
        with open(os.path.join(self.root, "a", name), "wb") as f:
            f.write(b"x")
        self.assert_fails(name, "not a valid sample key")

    def test_compressed_images_verify(self):
        make_tree(self.root, classes=["a", "b"])
        self.pack("--compress", "image=zstd:5")
        m = sfspec.read_manifest(self.out)
        self.assertEqual([f["codec"] for f in m["fields"]], [1, 0])
        run("verify", self.out, check=0)
        p = self.pack("--compress", "label=zstd", check=1)
        self.assertIn("inline", p.stderr)
        p = self.pack("--compress", "nope=zstd", check=1)
        self.assertIn("no field 'nope' (fields: image, label)", p.stderr)
        p = self.pack("--compress", "image=lz4", check=1)
        self.assertIn("unknown codec 'lz4'", p.stderr)
        # A field named twice: one level was dropped without a word.
        for args in (["--compress", "image=zstd:19,image=zstd:1"],
                     ["--compress", "image=zstd:19", "--compress", "image=zstd"]):
            p = self.pack(*args, check=1)
            self.assertIn("compress option image: the field is named twice (once at level 19)", p.stderr)


if __name__ == "__main__":
    unittest.main()
