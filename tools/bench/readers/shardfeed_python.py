"""shardfeed.Loader, global shuffle, torch tensors (numpy without torch). EXTRA: the dataset's
folder in DATA_DIR (default shards; shards-zstd for the compressed set)."""
import os
import time

import common
import shardfeed

s = common.setup()
shards = s.extra[0] if s.extra else "shards"
loader = shardfeed.Loader(os.path.join(s.d, shards), batch_size=s.batch, shuffle="global", seed=0)
for b in loader:  # warm-up epoch
    pass
t = time.perf_counter()
n = 0
for _ in range(s.epochs):
    for b in loader:
        n += len(b["label"])
        float(b["img"].reshape(-1)[0])
        float(b["label"][-1])
common.report(s, n, time.perf_counter() - t)
