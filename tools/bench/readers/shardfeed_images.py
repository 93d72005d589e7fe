"""shardfeed.Loader with images decoded in its I/O threads: RandomResizedCrop(224)
+ flip, uint8 [B, 3, 224, 224] tensors, global shuffle.

    python3 shardfeed_images.py DATA_DIR BATCH EPOCHS   (DATA_DIR/shards: an ImageFolder pack)
"""
import json
import os
import sys
import time

import shardfeed

d, batch, epochs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
loader = shardfeed.Loader(os.path.join(d, "shards"), batch_size=batch, shuffle="global", seed=0,
                          transforms={"image": shardfeed.image.RandomResizedCrop(224, flip=0.5)})
for b in loader:  # warm-up epoch
    pass
t = time.perf_counter()
n = 0
for _ in range(epochs):
    for b in loader:
        n += len(b["label"])
        int(b["image"][-1, 0, 0, 0])
        int(b["label"][-1])
print(json.dumps(dict(samples=n, seconds=time.perf_counter() - t, bytes=n * (3 * 224 * 224 + 8))))
