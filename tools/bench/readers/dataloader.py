"""torch DataLoader over the per-sample .npy files (np.load per item), shuffled;
EXTRA: the number of workers. pin_memory when CUDA is present."""
import os
import time

import numpy as np
import torch

import common

s = common.setup()
workers = int(s.extra[0])


class Npy(torch.utils.data.Dataset):
    def __len__(self):
        return s.n

    def __getitem__(self, i):
        return (torch.from_numpy(np.load(os.path.join(s.d, "npy", f"img_{i}.npy"))),
                torch.from_numpy(np.load(os.path.join(s.d, "npy", f"label_{i}.npy"))))


loader = torch.utils.data.DataLoader(Npy(), batch_size=s.batch, shuffle=True, num_workers=workers,
                                     persistent_workers=workers > 0,
                                     pin_memory=torch.cuda.is_available())
for b in loader:  # warm-up epoch (and worker start)
    pass
t = time.perf_counter()
n = 0
for _ in range(s.epochs):
    for img, label in loader:
        n += len(label)
        float(img.reshape(-1)[0])
        float(label[-1])
common.report(s, n, time.perf_counter() - t)
