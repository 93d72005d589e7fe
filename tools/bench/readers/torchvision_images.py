"""torchvision's ImageFolder + DataLoader(num_workers=W) with the same transforms
as shardfeed's image rows: RandomResizedCrop(224) + RandomHorizontalFlip, PIL
decode, uint8 tensors (PILToTensor), shuffled batches.

    python3 torchvision_images.py DATA_DIR BATCH EPOCHS WORKERS   (DATA_DIR/tree: the ImageFolder)
"""
import json
import os
import sys
import time

import torch
from torchvision import datasets, transforms

d, batch, epochs, workers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
tf = transforms.Compose([transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(),
                         transforms.PILToTensor()])
ds = datasets.ImageFolder(os.path.join(d, "tree"), transform=tf)
dl = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers,
                                 persistent_workers=workers > 0)
for x, y in dl:  # warm-up epoch
    pass
t = time.perf_counter()
n = 0
for _ in range(epochs):
    for x, y in dl:
        n += len(y)
        int(x[-1, 0, 0, 0])
print(json.dumps(dict(samples=n, seconds=time.perf_counter() - t, bytes=n * (3 * 224 * 224 + 8))))
