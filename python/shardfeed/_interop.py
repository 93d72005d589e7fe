"""A Loader as a torch.utils.data.IterableDataset, for frameworks that only take a torch
DataLoader (Lightning's Trainer, Hugging Face's Trainer). Imported only when the adapter is
asked for (Loader.as_iterable_dataset), so that shardfeed itself does not need torch."""
from torch.utils.data import IterableDataset, get_worker_info


class LoaderDataset(IterableDataset):
    """The batches of a shardfeed.Loader as an IterableDataset. Iterate it with
    torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0): the batches are already
    made, and a Loader does not survive the fork of a DataLoader worker. Yields the Loader's
    tuples (fields=), or plain dicts of its fields: DataLoader rebuilds every mapping it passes
    on, so Batch attributes would not survive it anyway."""

    def __init__(self, loader):
        self.loader = loader

    def __iter__(self):
        if get_worker_info() is not None:
            raise RuntimeError("shardfeed: iterate the Loader's IterableDataset with "
                               "num_workers=0: shardfeed's own I/O threads make the batches, "
                               "and a Loader does not survive the fork of a worker")
        for batch in self.loader:
            yield batch if isinstance(batch, tuple) else dict(batch)

    def __len__(self):
        """Batches per epoch on this rank."""
        return len(self.loader)

    def set_epoch(self, epoch):
        """Sets the Loader's epoch (Loader.set_epoch), as DistributedSampler.set_epoch."""
        self.loader.set_epoch(epoch)
