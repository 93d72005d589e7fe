/* shardfeed — the streaming reader: batches of samples in a deterministic
 * per-epoch order, split across ranks, read ahead into a fixed set of batch
 * slots with io_uring, pread or mmap, every record checked against its
 * checksum.
 *
 * Life cycle:
 *
 *   sf_reader_opts o = SF_READER_OPTS_INIT;
 *   o.batch_size = 32; o.shuffle = SF_READER_SHUFFLE_GLOBAL; o.seed = 1;
 *   sf_reader *r;
 *   if (sf_reader_open(&r, "data/train", &o) != 0) { puts(sf_last_error()); ... }
 *   for (uint64_t epoch = 0; epoch < 10; epoch++) {
 *       sf_reader_set_epoch(r, epoch);
 *       const sf_batch *b;
 *       while ((rc = sf_reader_next(&b, r)) == 0 && b) {
 *           ... b->fields[k].data, b->ids, b->size ...
 *           sf_reader_release(r, b);
 *       }
 *   }
 *   sf_reader_close(r);
 *
 * Order and ranks: the epoch's order depends only on (seed, epoch, shuffle
 * mode); batches are cut with a global batch of batch_size * world_size, so
 * every rank gets the same number of batches, and the union over ranks is
 * the dataset (plus wrap-around padding for uneven = PAD, minus the tail for
 * drop_last / uneven = DROP). See lib/reader/sampler.h for the exact rules.
 * Options that leave an epoch without a batch (the tail dropped, and
 * batch_size * world_size above the dataset's size) are SF_E_INVALID at open.
 *
 * Memory: all batch data lives in one page-aligned anonymous mapping (the
 * slab) of `prefetch` slots allocated at open; nothing is allocated per
 * batch or per record afterwards (each I/O thread makes its hash state, and
 * for compressed fields its staging buffer, when it starts). A slot holds,
 * for each field, a dense [batch_size, ...] array (fixed and inline fields;
 * each array starts on a page boundary) or packed bytes + offsets
 * (variable-length fields, capacity the largest sum of batch_size values of
 * that field in the dataset: the values of the longest batch it can make,
 * found at open; batch_size is capped at the samples an epoch has).
 *
 * Compressed fields (zstd, SPEC.md "Compression") come out exactly as they
 * would uncompressed. Each such record is read whole -- compressed values
 * into a staging buffer of the I/O thread, sized at open to the largest
 * record's compressed bytes -- checked against its checksum (which covers
 * the stored bytes), then decompressed by that thread straight into the
 * slot with its own ZSTD_DCtx. A value that does not decompress as SPEC.md
 * requires is a corrupt record (SF_E_CORRUPT naming file, record and field,
 * or substituted with on_corrupt = SKIP). Opening such a reader reads each
 * compressed variable-length value's frame header once (one small read per
 * value, 4 bytes kept per value) so that slots and offsets are known before
 * the data is read.
 *
 * Threads: sf_reader_next, set_epoch, restore, close and the trace functions
 * belong to one consumer thread; sf_reader_release and sf_reader_stats may
 * be called from any thread. The reader runs its own I/O threads.
 */
#ifndef SHARDFEED_READER_H
#define SHARDFEED_READER_H

#include <stddef.h>
#include <stdint.h>

#include "shardfeed/dataset.h"
#include "shardfeed/error.h"
#include "shardfeed/remote.h"
#include "shardfeed/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sf_reader sf_reader;

/* Sample order within an epoch. */
enum sf_reader_shuffle {
    SF_READER_SHUFFLE_NONE = 0,   /* dataset order */
    SF_READER_SHUFFLE_GLOBAL = 1, /* a full permutation per epoch */
    SF_READER_SHUFFLE_BLOCK = 2   /* runs of block_size consecutive ids, shuffled in windows:
                                     near-sequential I/O, cheaper on cold storage; on data
                                     not in the page cache each block's bytes are asked of
                                     the kernel (posix_fadvise WILLNEED) about a window
                                     before they are read (not with O_DIRECT or a URL;
                                     $SHARDFEED_READAHEAD=0: never) */
};

/* What happens to the last global batch when it is not full (world_size > 1). */
enum sf_reader_uneven {
    SF_READER_UNEVEN_PAD = 0, /* pad by wrapping around to the start of the epoch's order */
    SF_READER_UNEVEN_DROP = 1 /* cut it to a multiple of world_size */
};

enum sf_reader_engine {
    SF_ENGINE_AUTO = 0,  /* shards in the page cache at open (a mincore sample: warm data is
                            memcpy work): mmap (no system call per record; on x86-64 with
                            AVX2 each record copied and hashed in one pass), except pread for
                            records with compressed fields whose stored bytes are not small
                            (> 64 KiB, or variable-length); otherwise (cold, or O_DIRECT)
                            io_uring, and pread (with a one-line notice) where io_uring is
                            blocked (ENOSYS, EPERM, EACCES) or its rings exceed
                            RLIMIT_MEMLOCK (ENOMEM); cold compressed fields: pread (below).
                            Both warm cases fall back to pread when the shards need more maps
                            than the budget (SF_ENGINE_MMAP). A dataset at a URL: range
                            requests in mode direct; in mode cache its shards count as warm
                            (no sample: that would download them), mmap for small stored
                            records where every shard stays pinned in the cache (their maps
                            follow the cache's pins) and pread otherwise. The measurements
                            behind it: README "Engines" */
    SF_ENGINE_URING = 1, /* io_uring, one ring per I/O thread, reads straight into the slots */
    SF_ENGINE_PREAD = 2, /* pread(2) from a pool of threads */
    SF_ENGINE_MMAP = 3   /* memcpy from read-only memory maps of the shards; each shard read
                            stays mapped until the dataset closes (at a URL: while the reader
                            pins it in the cache), so a dataset of more shards
                            than the map budget (half of vm.max_map_count, or
                            $SHARDFEED_MAP_LIMIT) is refused at open (SF_E_UNSUPPORTED) and AUTO
                            picks pread for it instead */
};
/* A dataset with compressed fields is read by the pread engine when URING, or
 * AUTO on cold shards, is asked for (records are staged and decompressed
 * synchronously, so io_uring has nothing to add); AUTO on warm shards of
 * small records picks MMAP as above; MMAP stays MMAP. stats.engine says which. */

/* O_DIRECT (bypass the page cache: cold reads without evicting anything).
 * Possible when every payload field's file offset and size and its place in
 * the slot are multiples of 4096: pack with --align 4096 (or more) and use
 * fields whose byte size is a multiple of 4096. Not with the mmap engine, nor
 * for datasets with compressed fields (their records are staged). */
enum sf_reader_direct {
    SF_DIRECT_AUTO = 0, /* O_DIRECT when the dataset's shards are larger than the memory
                           the page cache may use ($SHARDFEED_PAGE_CACHE_BYTES, else the
                           physical memory or the cgroup's memory.max when smaller), so
                           that every epoch reads from disk anyway, and its records
                           average 64 KiB or more, and O_DIRECT is possible (else
                           buffered, never an error): cold reads of 602 KB records
                           measured 1.4-2x faster without the page cache; a dataset that
                           fits stays buffered, its later epochs warm. Not for a URL.
                           stats.direct_reason says which and why */
    SF_DIRECT_ON = 1,   /* O_DIRECT, or SF_E_UNSUPPORTED from open saying why not */
    SF_DIRECT_OFF = 2   /* buffered */
};

enum sf_reader_verify {
    SF_VERIFY_ON = 0, /* default: hash each record's payload in the slot, compare with its index entry */
    SF_VERIFY_OFF = 1
};

enum sf_reader_on_corrupt {
    SF_ON_CORRUPT_ERROR = 0, /* sf_reader_next fails with SF_E_CHECKSUM naming file, record, offset */
    SF_ON_CORRUPT_SKIP = 1   /* substitute the next intact sample (id+1, id+2, ... modulo the
                                dataset size); counted in stats and in the batch. Records lost
                                to a shard cut short while it is read are substituted too */
};

/* Where batches are delivered. */
enum sf_reader_device {
    SF_DEVICE_CPU = 0,  /* batches stay in the (host) slab */
    SF_DEVICE_CUDA = 1, /* cuda:device_index: the slab is page-locked, each slot has a CUDA
                           stream, an event and a device buffer from a pool allocated at open;
                           a ready batch is copied with cudaMemcpyAsync on its slot's stream */
    SF_DEVICE_HOST_COPY = 2 /* for tests and CI: a copy thread stands in for the GPU, with
                               the same slot protocol and "device" buffers in host memory */
};

/* ---- images: decode, crop, resize and flip in the I/O threads -------------
 *
 * A variable-length field of encoded images (JPEG, PNG, WebP: an
 * ImageFolder's "image", a list's "data", a tar's "jpg") can be delivered as
 * fixed-size uint8 pixels instead of bytes: the I/O thread that reads a
 * record (and checks its checksum) decodes it straight into the batch slot.
 * The batch field then reads like any fixed field: storage FIXED, dtype
 * UINT8, ndim 3, shape [C, H, W] (layout CHW) or [H, W, C] (HWC), item_size
 * C*H*W; the slot is sized by that shape, not by the encoded values.
 *
 * Transforms follow torchvision: RANDOM_RESIZED_CROP is
 * RandomResizedCrop((height, width), scale, ratio) (its parameter sampling:
 * 10 tries, then the centre crop), CENTER_CROP is Resize(resize) (the
 * shorter side) then CenterCrop((height, width)), both bilinear with
 * antialiasing (antialias=True); flip is RandomHorizontalFlip(flip). JPEGs
 * are decoded at the smallest DCT scale (1/8 .. 8/8) that still has as many
 * pixels as the output takes, and only in the rows and columns the crop
 * needs (exact = 1 decodes at full scale). Randomness is a pure function of
 * (seed, epoch, sample id, field): the same pixels with any number of I/O
 * threads, any engine, any world size, and after sf_reader_restore.
 * EXIF orientation is ignored, as torchvision's decoders do.
 *
 * An image that does not decode (damaged, truncated, more than max_pixels
 * pixels -- refused from its header, before anything is allocated) is a
 * corrupt sample: with on_corrupt = ERROR sf_reader_next fails with
 * SF_E_CORRUPT naming the shard, record, key and why; with SKIP it is
 * substituted as a sample that fails its checksum is
 * (stats.corrupt_substitutions). Options that do not fit the data fail with
 * SKIP too, naming the key: an image in a format the transforms do not
 * decode (BMP, TIFF, GIF: SF_E_UNSUPPORTED) and, for DECODE, an image of
 * another size than the output's (SF_E_SCHEMA); substituting them would drop
 * every such image without a word. DECODE without a size takes the first
 * sample's (with SKIP, the first intact sample's). */
enum sf_image_mode {
    SF_IMAGE_NONE = 0,
    SF_IMAGE_DECODE = 1,              /* no resizing: every image must be height x width */
    SF_IMAGE_RANDOM_RESIZED_CROP = 2, /* RandomResizedCrop((height, width), scale, ratio) */
    SF_IMAGE_CENTER_CROP = 3          /* Resize(resize) + CenterCrop((height, width)) */
};

enum sf_image_layout {
    SF_IMAGE_CHW = 0, /* [C, H, W] per sample (torchvision's tensors) */
    SF_IMAGE_HWC = 1  /* [H, W, C] per sample */
};

#define SF_IMAGE_OPTS_VERSION 1
/* PIL's limit (twice Image.MAX_IMAGE_PIXELS, where it raises
 * DecompressionBombError): about 179 million pixels. */
#define SF_IMAGE_DEFAULT_MAX_PIXELS 178956970ull

/* One field's transform. Every member's zero value means its default. */
typedef struct sf_image_opts {
    unsigned version;     /* SF_IMAGE_OPTS_VERSION */
    const char *field;    /* the variable-length field of encoded images */
    int mode;             /* enum sf_image_mode */
    uint32_t height, width; /* output size; DECODE: 0 (both) = the size of sample 0's image */
    uint32_t resize;      /* CENTER_CROP: the shorter side's size before the crop;
                             0: max(height, width) */
    double scale_min, scale_max; /* RANDOM_RESIZED_CROP: area fraction; 0, 0: 0.08, 1.0 */
    double ratio_min, ratio_max; /* RANDOM_RESIZED_CROP: aspect (w / h); 0, 0: 3/4, 4/3 */
    double flip;          /* probability of a horizontal flip, 0..1 */
    int layout;           /* enum sf_image_layout */
    uint32_t channels;    /* 0 or 3: RGB; 1: gray (PIL's "L": ITU-R 601-2 luma) */
    uint64_t max_pixels;  /* larger images are refused; 0: SF_IMAGE_DEFAULT_MAX_PIXELS */
    int exact;            /* nonzero: decode JPEGs at full scale (slower; within 1 of
                             torchvision on every pixel instead of a mean within 2) */
} sf_image_opts;

#define SF_IMAGE_OPTS_INIT                                                                         \
    {SF_IMAGE_OPTS_VERSION, NULL, SF_IMAGE_NONE, 0, 0, 0, 0, 0, 0, 0, 0, SF_IMAGE_CHW, 0, 0, 0}

#define SF_READER_OPTS_VERSION 3 /* 2: images, num_images; 3: remote */
#define SF_READER_DEFAULT_BATCH 32u
#define SF_READER_DEFAULT_PREFETCH 4u
/* prefetch 0 with small slots: read-ahead deep enough to ride out a late
 * wake (a slot of small records fills in tens of microseconds) */
#define SF_READER_SMALL_SLOT_PREFETCH_BYTES (2u << 20)
#define SF_READER_MAX_AUTO_PREFETCH 8u

/* Every member's zero value means its default. */
typedef struct sf_reader_opts {
    unsigned version;     /* SF_READER_OPTS_VERSION */
    uint32_t batch_size;  /* samples per batch per rank; 0: 32 */
    int shuffle;          /* enum sf_reader_shuffle */
    uint32_t block_size;  /* BLOCK: consecutive ids per run; 0: 64 */
    uint32_t window;      /* BLOCK: positions shuffled together; 0: 16 × block_size */
    uint64_t seed;
    uint32_t rank;        /* this process's rank, < world_size */
    uint32_t world_size;  /* 0: 1 */
    int drop_last;        /* nonzero: drop the last partial global batch */
    int uneven;           /* enum sf_reader_uneven */
    uint32_t prefetch;    /* batch slots (read-ahead + held by the caller); 0: as many
                           * as make 2 MiB, at least 4 and at most 8 (4 for slots of
                           * 512 KiB or more and for a dataset at a URL, and past 4
                           * only as many as the open-file cap has shards for;
                           * sf_reader_stats says which) */
    int engine;           /* enum sf_reader_engine */
    int direct;           /* enum sf_reader_direct */
    int verify;           /* enum sf_reader_verify */
    int on_corrupt;       /* enum sf_reader_on_corrupt */
    uint32_t io_threads;  /* I/O threads; 0: chosen from the engine, the record size and the CPU count */
    uint32_t queue_depth; /* io_uring: reads in flight per ring; 0: 32 */
    int device;           /* enum sf_reader_device */
    int device_index;     /* CUDA device ordinal (cuda:N) */
    /* version 2: */
    const sf_image_opts *images; /* num_images transforms, one per field (above); the
                                    reader copies them at open */
    uint32_t num_images;
    /* version 3: */
    const sf_remote_opts *remote; /* a dataset at a URL (shardfeed/remote.h): how it is read;
                                     NULL: the defaults (mode cache) */
} sf_reader_opts;

#define SF_READER_OPTS_INIT                                                                        \
    {SF_READER_OPTS_VERSION, 0, SF_READER_SHUFFLE_NONE, 0, 0, 0, 0, 0, 0, SF_READER_UNEVEN_PAD,   \
     0, SF_ENGINE_AUTO, SF_DIRECT_AUTO, SF_VERIFY_ON, SF_ON_CORRUPT_ERROR, 0, 0, SF_DEVICE_CPU, 0, \
     NULL, 0, NULL}

/* One field of a batch (dtype and storage: shardfeed/types.h). */
typedef struct sf_batch_field {
    const char *name;
    sf_dtype dtype;
    sf_storage storage;
    size_t elem_size;      /* bytes per element */
    uint32_t ndim;         /* per-sample shape (fixed and inline fields) */
    uint64_t shape[8];
    uint64_t item_size;    /* bytes per sample (fixed, inline); 0 for variable length */
    void *data;            /* fixed, inline: dense [size, shape...], C order, little-endian;
                              variable: the samples' bytes packed back to back */
    const uint64_t *offsets; /* variable: size + 1 byte offsets into data; NULL otherwise */
    uint64_t bytes;        /* bytes of data in use */
    void *device_data;     /* device != CPU: the same bytes in device memory, valid once
                              the batch's device_event has completed; NULL on CPU. (Offsets
                              of variable-length fields stay in host memory.) */
} sf_batch_field;

typedef struct sf_batch {
    uint64_t epoch;
    uint64_t index;        /* batch number within the epoch for this rank */
    uint32_t size;         /* samples in the batch: batch_size, or fewer for a short last batch */
    uint32_t num_fields;   /* fields in schema order */
    const sf_batch_field *fields;
    const uint64_t *ids;   /* size global sample ids, as the order scheduled them */
    const uint64_t *source_ids; /* size ids whose data the batch holds: equal to ids except
                                   where a corrupt sample was substituted (on_corrupt = SKIP) */
    uint32_t substituted;  /* how many samples of this batch were substituted */
    int device;            /* enum sf_reader_device the batch was delivered to */
    void *device_stream;   /* CUDA: the slot's cudaStream_t that carries the copy */
    void *device_event;    /* CUDA: a cudaEvent_t recorded after the copy: make your stream
                              wait on it (cudaStreamWaitEvent) before using device_data */
} sf_batch;

/* Opens the dataset in `dir`, a folder or a URL (as sf_dataset_open_ex
 * does with opts->remote: manifest, shard headers, footers and indexes are
 * checked), allocates the slab and starts
 * the I/O threads. Reading starts with the first sf_reader_next; the reader
 * is at epoch 0, batch 0. opts may be NULL for all defaults.
 * Errors: SF_E_INVALID (bad option, message names it), SF_E_UNSUPPORTED
 * (direct = ON not possible, engine not available), -ENOMEM, or any
 * sf_dataset_open error. */
SF_API int sf_reader_open(sf_reader **out, const char *dir, const sf_reader_opts *opts);

/* Stops the I/O threads and frees everything, batches still held included.
 * NULL ok. */
SF_API void sf_reader_close(sf_reader *r);

/* Positions the reader at the start of `epoch`. Read-ahead already done for
 * that position is kept; anything else is discarded. Batches the caller
 * holds stay valid until released. Right after sf_reader_restore, before any
 * sf_reader_next, set_epoch of the restored epoch keeps the restored
 * position (so the loop above, started at state.epoch, resumes mid-epoch
 * instead of replaying it); another epoch moves to its start as usual.
 * SF_E_INVALID for an epoch above SF_MAX_EPOCH (below). */
SF_API int sf_reader_set_epoch(sf_reader *r, uint64_t epoch);

/* Batches per epoch for this rank: the same for every epoch and every rank. */
SF_API uint64_t sf_reader_num_batches(const sf_reader *r);
/* Samples per epoch for this rank (padding included, drops excluded). */
SF_API uint64_t sf_reader_samples_per_epoch(const sf_reader *r);
/* The dataset the reader reads, as it opened it (its id, size and schema:
 * shardfeed/dataset.h), or NULL for NULL. Borrowed: valid until
 * sf_reader_close; so that a caller describes what is read without opening
 * the path again (which may meanwhile hold another dataset). */
SF_API const sf_dataset *sf_reader_dataset(const sf_reader *r);

/* The next batch, in order. Returns 0 with *out set; at the end of an epoch
 * returns 0 with *out = NULL once, and moves on to the next epoch (so a
 * following call returns that epoch's first batch). Blocks while the batch
 * is being read. A batch stays valid, and its slot is never reused, until
 * sf_reader_release.
 * Errors: SF_E_STATE when the caller holds all `prefetch` batches (release
 * one first; sf_last_error() lists the (epoch, index) of the batches
 * held); SF_E_CHECKSUM (on_corrupt = ERROR) with sf_last_error() naming the
 * shard file, record and byte offset; SF_E_TRUNCATED (on_corrupt = ERROR)
 * naming them when the shard file was cut short since open (every engine,
 * mmap included: never SIGBUS); -errno for an I/O error.
 * After an error the position is unchanged: calling again retries the same
 * batch, reading it then (not when the error was returned), so a cause
 * mended between the calls is seen. */
SF_API int sf_reader_next(const sf_batch **out, sf_reader *r);

/* Gives a batch's slot back. SF_E_INVALID for a batch not held: one released
 * already, also by another thread at the same time (the slot is given back
 * once). With a device, the caller must be done with device_data: use
 * sf_reader_release_after when work using it may still be queued. */
SF_API int sf_reader_release(sf_reader *r, const sf_batch *batch);

/* Gives a batch's slot back once the work queued so far on `stream` (a
 * cudaStream_t, NULL: none) has finished: the next copy into the slot's
 * device buffer waits for it on the GPU, not the host. The call never
 * waits on the host, also when the batch's own copy is still queued
 * (behind the caller's earlier work, when its GPU runs behind): the I/O
 * thread that refills the slot waits for that copy first
 * (device_slot_wait_seconds). */
SF_API int sf_reader_release_after(sf_reader *r, const sf_batch *batch, void *stream);

/* Blocks until a device batch's copy has completed (for callers without a
 * CUDA stream of their own). 0 at once for CPU batches. SF_E_INVALID for a
 * batch that is not one of r's (another reader's, CPU or not), and for a
 * device batch released already. */
SF_API int sf_batch_wait(sf_reader *r, const sf_batch *batch);

/* Makes `stream` wait for a device batch's copy without blocking the host:
 * work queued on it from now on sees the batch's device_data (CUDA:
 * cudaStreamWaitEvent(stream, batch->device_event)). `stream` is a
 * cudaStream_t (cudaStreamLegacy and cudaStreamPerThread included) or, for
 * SF_DEVICE_HOST_COPY, an sf_host_stream. Release such a batch with
 * sf_reader_release_after on the same stream. 0 at once for CPU batches;
 * SF_E_INVALID for a NULL stream (use sf_batch_wait), for a batch that
 * is not one of r's, and for a device batch released already. */
SF_API int sf_batch_wait_on(sf_reader *r, const sf_batch *batch, void *stream);

/* ---- SF_DEVICE_HOST_COPY's streams (for tests) ----------------------------
 *
 * The host-copy device's stand-in for a consumer's CUDA stream: work queued
 * on it runs in order on a thread of its own. Pass it where a cudaStream_t
 * goes (sf_batch_wait_on, sf_reader_release_after): the device records and
 * waits on events in stream order as CUDA does, so a test sees, without a
 * GPU, what a missing wait or fence does. The device counts two hazards
 * (sf_host_stream_hazards, each also printed on stderr): a read queued on a
 * stream that runs before the copy of the memory it reads has landed (the
 * stream did not wait for the batch), and a copy into a slot's device memory
 * while a read queued on a stream before the slot's release has not run yet
 * (the release did not fence that stream). */
typedef struct sf_host_stream sf_host_stream;

SF_API int sf_host_stream_create(sf_host_stream **out);
/* Runs what is queued on it first (a held stream is let go). NULL ok. */
SF_API void sf_host_stream_destroy(sf_host_stream *s);
/* Queues a consumer's "kernel": copies len bytes of host-copy device memory
 * at src to dst once the stream reaches it. */
SF_API int sf_host_stream_read(sf_host_stream *s, void *dst, const void *src, size_t len);
/* While on, the stream starts nothing (its queue grows). */
SF_API int sf_host_stream_hold(sf_host_stream *s, int on);
/* Blocks until the stream has run everything queued; SF_E_STATE while held. */
SF_API int sf_host_stream_synchronize(sf_host_stream *s);
/* Hazards seen so far, over the process. */
SF_API uint64_t sf_host_stream_hazards(void);
/* Every host-copy copy first sleeps `us` microseconds (0: none), so that
 * copies are late. */
SF_API void sf_host_copy_set_delay_us(unsigned us);

/* The field called `name` of a batch, or NULL. */
SF_API const sf_batch_field *sf_batch_field_find(const sf_batch *b, const char *name);

/* The largest epoch sf_reader_set_epoch and sf_reader_restore take: 2^63 - 1.
 * The reader reads ahead into epoch + 1 and moves on to it at the end of
 * an epoch, so an epoch near 2^64 would wrap around to epoch 0 (its order
 * again) without a word; below 2^63 no run gets there, and an epoch also
 * fits a signed 64-bit integer (a torch tensor, most JSON readers). The
 * end of SF_MAX_EPOCH is the last: sf_reader_next keeps returning the end
 * (NULL), and the state stays (SF_MAX_EPOCH, num_batches). */
#define SF_MAX_EPOCH 0x7fffffffffffffffull

/* Resume state: O(1), independent of the dataset size. Save all of it. */
typedef struct sf_resume_state {
    uint64_t epoch;
    uint64_t next_batch; /* batch that sf_reader_next returns next; num_batches: the end marker */
    uint64_t order_id;   /* a digest of what decides the batches: the dataset (its id and
                          * size), batch_size, world_size, shuffle, seed, block_size, window,
                          * drop_last and uneven (not the rank); 0: not recorded */
} sf_resume_state;

/* Where the reader is now. After sf_reader_restore with this state (in this
 * or a new reader opened with the same options, on any rank) the batches
 * that follow are exactly those an uninterrupted run would have returned. */
SF_API int sf_reader_state(sf_resume_state *out, const sf_reader *r);
/* SF_E_INVALID when next_batch > num_batches, epoch > SF_MAX_EPOCH, or
 * order_id is not this reader's: a state of another dataset or other order
 * options would resume at a position in other batches (skipping or
 * repeating samples). A state with order_id 0 (made from a saved epoch and
 * next_batch alone) is taken unchecked. */
SF_API int sf_reader_restore(sf_reader *r, const sf_resume_state *state);

typedef struct sf_reader_statistics {
    uint64_t bytes_read;      /* payload bytes read from the shards (substitutes included) */
    uint64_t samples;         /* samples delivered in batches */
    uint64_t batches;         /* batches delivered */
    uint64_t corrupt_substitutions; /* samples of delivered batches replaced because their
                                       checksum failed */
    double wait_seconds;      /* time the caller spent blocked in sf_reader_next */
    double io_seconds;        /* I/O thread-seconds in reads (syscalls, ring waits, copies, and
                                 decompressing compressed fields); not image decoding */
    double checksum_seconds;  /* I/O thread-seconds hashing records */
    /* What the reader runs with, after defaults and fallbacks: */
    const char *engine;       /* "uring", "pread" or "mmap" */
    int direct;               /* 1: O_DIRECT */
    int registered_buffers;   /* io_uring: 1 when the whole slab is registered (reads go
                                 straight into fixed buffers) */
    uint64_t registered_bytes; /* io_uring: bytes of the slab registered as fixed buffers
                                  in every ring (all of it unless RLIMIT_MEMLOCK is small;
                                  then pieces that fit it) */
    uint32_t io_threads;
    uint32_t queue_depth;
    uint32_t prefetch;
    uint64_t slab_bytes;      /* size of the batch slab: prefetch slots, each sized for the
                                 largest batch the dataset can make (see the README, "Memory") */
    const char *device;       /* "cpu", "cuda" or "host-copy" */
    uint64_t device_bytes;    /* device memory held (constant after open) */
    /* Where the time went (for sf_reader_verdict): */
    double elapsed_seconds;   /* from the first sf_reader_next call to the latest return from it */
    double device_enqueue_seconds; /* I/O thread-seconds enqueuing device copies */
    double device_wait_seconds;    /* caller-seconds waiting for copies in sf_batch_wait (and
                                      recording release fences; a release never waits for
                                      a copy: see device_slot_wait_seconds) */
    uint64_t trace_events;    /* trace records kept so far (batches and spans; see below) */
    uint64_t trace_dropped;   /* records not kept because the trace was full */
    /* The device's own counts (device != CPU): */
    uint64_t device_copy_bytes;    /* bytes copied host to device */
    double device_copy_seconds;    /* time the copies took on the device (CUDA: timed with
                                      events on the slots' streams, counted when a slot's next
                                      copy is enqueued) */
    double device_stream_wait_seconds; /* time consumers' streams stalled on the device waiting
                                          for copies after sf_batch_wait_on (CUDA: timed with
                                          events around the wait; Python imports use it) */
    double decode_seconds;    /* I/O thread-seconds decoding, cropping and resizing images
                                 (image fields: sf_reader_opts.images) */
    const char *direct_reason; /* why direct is what it is, e.g. "auto: buffered (the dataset
                                  fits in memory, ...)" (static text) */
    double device_slot_wait_seconds; /* I/O thread-seconds waiting, before refilling a slot,
                                        for its last copy, which the device runs after the
                                        work a release fenced (sf_reader_release_after): a
                                        consumer whose GPU runs behind makes this grow, not
                                        its own waits */
} sf_reader_statistics;

SF_API int sf_reader_stats(sf_reader_statistics *out, const sf_reader *r);

/* ---- bottleneck verdict ----------------------------------------------------
 *
 * Which stage limits the rate at which the caller gets batches, from a
 * sf_reader_stats snapshot. The rule, in order:
 *
 *   copy_wait = device_wait_seconds + device_stream_wait_seconds
 *   stall = (wait_seconds + copy_wait) / elapsed_seconds
 *   1. stall < 0.10 (SF_VERDICT_STALL_MAX): "consumer-bound": batches were
 *      ready when the caller asked for them; the caller's own work per batch
 *      (the model step) sets the pace, and a faster reader would not help;
 *   2. copy_wait > wait_seconds: "copy-bound": the caller (on the host, or
 *      its streams on the device) waited more for device copies than for
 *      batches;
 *   3. otherwise the caller waited for the reader; the largest of the I/O
 *      threads' times names the stage: io_seconds "io-bound",
 *      checksum_seconds "checksum-bound", device_enqueue_seconds "copy-bound",
 *      decode_seconds (images) "decode-bound", device_slot_wait_seconds
 *      "consumer-bound": the reader waited for slots whose copies the device
 *      runs after the caller's own queued work, so the caller's GPU set the
 *      pace (a caller that queues steps without waiting for them runs ahead
 *      of its GPU until the reader's slots are all behind it); but
 *      "copy-bound" when the copies themselves took half of elapsed_seconds
 *      or more (device_copy_seconds): the slots waited for a busy copy
 *      engine.
 *
 * (Decompression of compressed fields is counted in io_seconds: a separate
 * "decompress-bound" verdict is not implemented.)
 * "none" when no batch was delivered yet. The fractions are reported with
 * it; io_busy below about 0.5 with a reader-side verdict means the I/O
 * threads idled while the caller waited: more prefetch or threads may help
 * more than faster storage. */
#define SF_VERDICT_STALL_MAX 0.10

typedef struct sf_reader_bottleneck {
    const char *verdict;   /* "io-bound", "checksum-bound", "copy-bound", "decode-bound",
                              "consumer-bound", or "none" (static strings) */
    double consumer_wait;  /* wait_seconds / elapsed_seconds */
    double device_wait;    /* copy_wait / elapsed_seconds */
    double io_busy;        /* (io + checksum + device_enqueue + decode) thread-seconds
                              / (io_threads * elapsed_seconds) */
    double io_share;       /* io_seconds / (io + checksum + device_enqueue + decode) */
    double checksum_share; /* checksum_seconds / (the same) */
    double copy_share;     /* device_enqueue_seconds / (the same) */
    double decode_share;   /* decode_seconds / (the same) */
} sf_reader_bottleneck;

SF_API int sf_reader_verdict(sf_reader_bottleneck *out, const sf_reader_statistics *st);

/* ---- tracing ----------------------------------------------------------------
 *
 * A trace records, for each batch, when it passed each stage of the
 * pipeline: submitted (slot prepared, its reads queued), claimed (first read
 * started), read (all reads complete), checksummed (all records hashed,
 * corrupt samples substituted), device copy enqueued and completed (device
 * != CPU; completion as observed by sf_batch_wait or the release, the copy
 * itself being asynchronous), handed (sf_reader_next returned it) and
 * released; plus spans of each I/O thread's work (per batch: time reading
 * and hashing) and of the caller's waits. Timestamps are CLOCK_MONOTONIC,
 * taken only while a trace runs, into memory allocated by
 * sf_reader_trace_start: nothing is allocated or locked per event.
 * (Decompression of compressed fields is part of the read stage, not a stage
 * of its own.)
 *
 * sf_reader_trace_start records the next `max_batches` batches scheduled
 * (read-ahead included; 0: as many as fit) and spans until
 * sf_reader_trace_write, which stops recording and writes the trace as
 * Chrome trace-event JSON (open it in https://ui.perfetto.dev or
 * chrome://tracing). A trace holds at most SF_TRACE_MAX_BATCHES batches and
 * SF_TRACE_MAX_SPANS spans (about 1M trace events, 35 MiB of memory at
 * most); what does not fit is counted in stats.trace_dropped. A trace's
 * memory is held until sf_reader_close; a reader may record several traces,
 * one after the other.
 * When the file cannot be written (-errno: a folder that is not there, a
 * full disk), recording has stopped but the trace is kept: call
 * sf_reader_trace_write again, with another path, to write the same trace;
 * sf_reader_trace_start instead starts a new one. Only a successful write
 * ends a trace.
 * Errors: SF_E_STATE (start while a trace runs, write without one),
 * -ENOMEM, -errno from writing the file. */
#define SF_TRACE_MAX_BATCHES 65536u
#define SF_TRACE_MAX_SPANS 524288u

SF_API int sf_reader_trace_start(sf_reader *r, uint64_t max_batches);
SF_API int sf_reader_trace_write(sf_reader *r, const char *path);

#ifdef __cplusplus
}
#endif
#endif
