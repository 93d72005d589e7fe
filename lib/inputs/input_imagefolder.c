/* ImageFolder input: ROOT/<class>/[folders/]<file>. Each file's bytes are stored
 * unchanged in the variable-length field "image"; "label" is the index of
 * its class among the sorted class names. Classes, folders and files are
 * ordered exactly as torchvision.datasets.ImageFolder orders them, so
 * labels and sample order match it: class folders sorted by name; within a
 * class, folders (followed through symlinks) sorted by path, then the
 * files of each folder sorted by name, keeping files whose name ends with
 * one of torchvision's image extensions (case-insensitive). Bytewise
 * order of UTF-8 names is Python's code point order. Export writes each
 * image back to ROOT/<key> (the key is the path), byte for byte the tree. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error_internal.h"
#include "le.h"
#include "shard_file.h"
#include "input_util.h"

/* torchvision.datasets.folder.IMG_EXTENSIONS */
static const char *const image_ext[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp",
                                        ".pgm", ".tif", ".tiff", ".webp"};

enum { F_IMAGE, F_LABEL };

typedef struct if_priv {
    uint32_t *labels; /* [sample] */
} if_priv;

typedef struct strvec {
    char **v;
    size_t n, cap;
} strvec;

static int strvec_push(strvec *s, char *str)
{
    if (!str)
        return sf_fail(-ENOMEM, "out of memory");
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        char **v = realloc(s->v, cap * sizeof *v);
        if (!v) {
            free(str);
            return sf_fail(-ENOMEM, "out of memory");
        }
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = str;
    return 0;
}

static void strvec_free(strvec *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    memset(s, 0, sizeof *s);
}

static int is_image_name(const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof image_ext / sizeof image_ext[0]; i++) {
        size_t e = strlen(image_ext[i]);
        if (n >= e && strcasecmp(name + n - e, image_ext[i]) == 0)
            return 1;
    }
    return 0;
}

/* One entry of a folder, stat'ed once (following symlinks, as os.walk
 * with followlinks=True does). */
typedef struct entry {
    char *name;
    int err;         /* errno of the stat, 0 when it worked */
    int is_dir, is_reg;
    uint64_t size;
    uint64_t mtime_ns;
    dev_t dev;
    ino_t ino;
} entry;

typedef struct entries {
    entry *v;
    size_t n, cap;
} entries;

static void entries_free(entries *e)
{
    for (size_t i = 0; i < e->n; i++)
        free(e->v[i].name);
    free(e->v);
    memset(e, 0, sizeof *e);
}

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const entry *)a)->name, ((const entry *)b)->name);
}

/* Reads folder `path` once. A failed stat is kept with the entry: it only
 * matters for a file that would be packed. */
static int list_dir(const char *path, entries *out)
{
    DIR *d = opendir(path);
    if (!d)
        return sf_fail(SF_E_INPUT, "%s: cannot open folder: %s", path, sf_errno_text(errno));
    int rc = 0;
    struct dirent *de;
    errno = 0;
    while (!rc && (de = readdir(d)) != NULL) {
        const char *n = de->d_name;
        if (n[0] == '.' && (!n[1] || (n[1] == '.' && !n[2])))
            continue;
        if (out->n == out->cap) {
            size_t cap = out->cap ? out->cap * 2 : 64;
            entry *v = realloc(out->v, cap * sizeof *v);
            if (!v) {
                rc = sf_fail(-ENOMEM, "out of memory");
                break;
            }
            out->v = v;
            out->cap = cap;
        }
        entry *e = &out->v[out->n];
        memset(e, 0, sizeof *e);
        struct stat st;
        if (fstatat(dirfd(d), n, &st, 0) != 0) {
            e->err = errno;
        } else {
            e->is_dir = S_ISDIR(st.st_mode);
            e->is_reg = S_ISREG(st.st_mode);
            e->size = (uint64_t)st.st_size;
            e->mtime_ns = input_mtime_ns(&st);
            e->dev = st.st_dev;
            e->ino = st.st_ino;
        }
        if (!(e->name = strdup(n))) {
            rc = sf_fail(-ENOMEM, "out of memory");
            break;
        }
        out->n++;
        errno = 0;
    }
    if (!rc && errno)
        rc = sf_fail(SF_E_INPUT, "%s: reading folder: %s", path, strerror(errno));
    closedir(d);
    if (!rc && out->n > 1)
        qsort(out->v, out->n, sizeof *out->v, cmp_entry); /* bytewise: Python's order for UTF-8 */
    return rc;
}

/* A folder of a class and what it holds. */
typedef struct folder {
    char *rel; /* relative to ROOT */
    entries list;
} folder;

typedef struct walk {
    const char *root;
    dev_t dev[64];
    ino_t ino[64];
    int depth;
    folder *f; /* every folder of the class */
    size_t n, cap;
} walk;

static void walk_free(walk *w)
{
    for (size_t i = 0; i < w->n; i++) {
        free(w->f[i].rel);
        entries_free(&w->f[i].list);
    }
    free(w->f);
}

/* Reads folder `rel` (relative to ROOT; dev/ino from its stat) and,
 * recursively, its sub-folders. A folder that is its own ancestor (a
 * symlink loop) is an error: os.walk would go round it forever. */
static int collect(walk *w, const char *rel, dev_t dev, ino_t ino)
{
    char *path = input_path_join(w->root, rel);
    if (!path)
        return sf_fail(-ENOMEM, "out of memory");
    int rc = 0;
    for (int i = 0; i < w->depth && !rc; i++)
        if (w->dev[i] == dev && w->ino[i] == ino)
            rc = sf_fail(SF_E_INPUT, "%s: symlink loop (the folder contains itself)", path);
    if (!rc && w->depth == (int)(sizeof w->dev / sizeof w->dev[0]))
        rc = sf_fail(SF_E_LIMIT, "%s: folders nested more than 64 deep", path);
    if (!rc && w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 16;
        folder *f = realloc(w->f, cap * sizeof *f);
        rc = f ? 0 : sf_fail(-ENOMEM, "out of memory");
        if (f) {
            w->f = f;
            w->cap = cap;
        }
    }
    size_t me = w->n;
    if (!rc) {
        memset(&w->f[me], 0, sizeof w->f[me]);
        w->n++;
        w->f[me].rel = strdup(rel);
        rc = w->f[me].rel ? list_dir(path, &w->f[me].list) : sf_fail(-ENOMEM, "out of memory");
    }
    free(path);
    if (rc)
        return rc;
    w->dev[w->depth] = dev;
    w->ino[w->depth] = ino;
    w->depth++;
    /* Index, not pointer: the recursion may move w->f. */
    for (size_t i = 0; i < w->f[me].list.n && !rc; i++) {
        const entry *e = &w->f[me].list.v[i];
        if (!e->is_dir)
            continue;
        char *sub = input_path_join(rel, e->name);
        rc = sub ? collect(w, sub, e->dev, e->ino) : sf_fail(-ENOMEM, "out of memory");
        free(sub);
    }
    w->depth--;
    return rc;
}

static int cmp_folder(const void *a, const void *b)
{
    return strcmp(((const folder *)a)->rel, ((const folder *)b)->rel);
}

typedef struct found {
    strvec keys;
    uint32_t *labels;
    uint64_t *sizes;
    size_t cap;
} found;

static int add_sample(found *fo, char *key, uint32_t label, uint64_t size)
{
    if (fo->keys.n == fo->cap) {
        size_t cap = fo->cap ? fo->cap * 2 : 1024;
        uint32_t *l = realloc(fo->labels, cap * sizeof *l);
        if (l)
            fo->labels = l;
        uint64_t *s = realloc(fo->sizes, cap * sizeof *s);
        if (s)
            fo->sizes = s;
        if (!l || !s) {
            free(key);
            return sf_fail(-ENOMEM, "out of memory");
        }
        fo->cap = cap;
    }
    fo->labels[fo->keys.n] = label;
    fo->sizes[fo->keys.n] = size;
    return strvec_push(&fo->keys, key);
}

/* One file of a class folder: a sample, or skipped (not an image name). */
static int add_file(input_set *in, found *fo, const char *root, const char *dir, const entry *e,
                    uint32_t c)
{
    char *key = input_path_join(dir, e->name);
    if (!key)
        return sf_fail(-ENOMEM, "out of memory");
    if (!is_image_name(e->name)) {
        if (in->skipped++ == 0)
            snprintf(in->skipped_example, sizeof in->skipped_example, "%s/%s", root, key);
        free(key);
        return 0;
    }
    int rc = 0;
    char why[600];
    if (!sf_key_check(key, strlen(key), why, sizeof why))
        rc = sf_fail(SF_E_INPUT, "%s/%s: the path is not a valid sample key: %s", root, key, why);
    else if (e->err || !e->is_reg)
        rc = sf_fail(SF_E_INPUT, "%s/%s: %s", root, key, e->err ? strerror(e->err) : "not a regular file");
    if (rc) {
        free(key);
        return rc;
    }
    input_note_file(in, key, e->size, e->mtime_ns);
    return add_sample(fo, key, c, e->size);
}

/* The samples of class `c` (a folder entry of ROOT), in torchvision's order. */
static int scan_class(input_set *in, found *fo, const char *root, const entry *cls, uint32_t c)
{
    walk w = {.root = root};
    int rc = collect(&w, cls->name, cls->dev, cls->ino);
    /* sorted(os.walk(...)) orders folders by their whole path. */
    if (!rc && w.n > 1)
        qsort(w.f, w.n, sizeof *w.f, cmp_folder);
    size_t before = fo->keys.n;
    for (size_t d = 0; d < w.n && !rc; d++)
        for (size_t i = 0; i < w.f[d].list.n && !rc; i++)
            if (!w.f[d].list.v[i].is_dir)
                rc = add_file(in, fo, root, w.f[d].rel, &w.f[d].list.v[i], c);
    if (!rc && fo->keys.n == before)
        rc = sf_fail(SF_E_INPUT,
                     "%s/%s: class folder has no image files (torchvision's extensions: .jpg .jpeg "
                     ".png .ppm .bmp .pgm .tif .tiff .webp)",
                     root, cls->name);
    walk_free(&w);
    return rc;
}

static void if_free(input_set *in)
{
    if_priv *p = in->priv;
    if (p)
        free(p->labels);
    free(p);
    in->priv = NULL;
}

static int if_read(void *cursor, const input_set *in, uint64_t sample, uint32_t field, uint8_t *dst)
{
    (void)cursor;
    const if_priv *p = in->priv;
    if (field == F_LABEL) {
        sf_put_le64(dst, p->labels[sample]);
        return 0;
    }
    uint64_t size = in->sizes[sample * 2 + F_IMAGE];
    char *path = input_path_join(in->path, in->keys[sample]);
    if (!path)
        return sf_fail(-ENOMEM, "out of memory");
    int rc = 0;
    struct stat st;
    int fd = input_open_file(path, &st);
    if (fd < 0)
        rc = fd;
    else if ((uint64_t)st.st_size != size)
        rc = sf_fail(SF_E_INPUT, "%s: input changed while packing (size %llu, was %llu)", path,
                     (unsigned long long)st.st_size, (unsigned long long)size);
    else if ((rc = sf_pread_full(fd, dst, size, 0)))
        rc = sf_fail(SF_E_INPUT, "%s: read failed: %s", path, sf_strerror(rc));
    if (fd >= 0)
        close(fd);
    free(path);
    return rc;
}

static void schema_of(sf_schema *s)
{
    memset(s, 0, sizeof *s);
    s->field_count = 2;
    sf_field *img = &s->fields[F_IMAGE], *lab = &s->fields[F_LABEL];
    snprintf(img->name, sizeof img->name, "image");
    img->dtype = SF_DTYPE_BYTES;
    img->ndim = 1;
    img->storage = SF_STORAGE_VARIABLE;
    snprintf(lab->name, sizeof lab->name, "label");
    lab->dtype = SF_DTYPE_INT64;
    lab->ndim = 0;
    lab->storage = SF_STORAGE_INLINE;
    lab->item_size = 8;
}

static int if_discover(input_set *in, const char *root)
{
    if_priv *p = calloc(1, sizeof *p);
    if (!p)
        return sf_fail(-ENOMEM, "out of memory");
    in->priv = p;
    entries top = {0};
    int rc = list_dir(root, &top);
    size_t nclass = 0;
    for (size_t i = 0; i < top.n; i++) {
        if (top.v[i].is_dir)
            nclass++;
        else if (in->skipped++ == 0) /* torchvision ignores files under ROOT; so do we, counting them */
            snprintf(in->skipped_example, sizeof in->skipped_example, "%s/%s", root, top.v[i].name);
    }
    if (!rc && nclass == 0)
        rc = sf_fail(SF_E_INPUT, "%s: no class folders (ImageFolder input is ROOT/<class>/<image>)", root);
    if (!rc && nclass > UINT32_MAX)
        rc = sf_fail(SF_E_LIMIT, "%s: too many classes", root);
    char **classes = rc ? NULL : calloc(nclass, sizeof *classes);
    if (!rc && !classes)
        rc = sf_fail(-ENOMEM, "out of memory");
    found fo = {0};
    uint32_t c = 0;
    for (size_t i = 0; i < top.n && !rc; i++) {
        if (!top.v[i].is_dir)
            continue;
        classes[c] = strdup(top.v[i].name);
        rc = classes[c] ? scan_class(in, &fo, root, &top.v[i], c) : sf_fail(-ENOMEM, "out of memory");
        c++;
    }
    /* Owned by `in` from here, so input_free frees them on failure too. */
    in->class_names = classes;
    in->class_count = c;
    schema_of(&in->schema);
    if (!rc)
        rc = sf_schema_finish(&in->schema);
    if (!rc)
        rc = input_alloc(in, fo.keys.n);
    if (!rc) {
        for (size_t i = 0; i < fo.keys.n; i++) {
            in->keys[i] = fo.keys.v[i];
            in->sizes[i * 2 + F_IMAGE] = fo.sizes[i];
            in->sizes[i * 2 + F_LABEL] = 8;
            in->bytes_in += fo.sizes[i] + 8;
        }
        fo.keys.n = 0; /* the keys now belong to `in` */
        p->labels = fo.labels;
        fo.labels = NULL;
    }
    strvec_free(&fo.keys);
    free(fo.labels);
    free(fo.sizes);
    entries_free(&top);
    return rc;
}

/* A folder holding a folder (a class). */
static int if_detect(const char *name, int is_dir)
{
    (void)name;
    return is_dir;
}

/* Below folder `fd` (closed here), an image file at any depth, folders
 * followed through symlinks as discovery follows them; `anc` holds the
 * folders above it, so that a symlink loop ends the search. */
static int holds_image(int fd, dev_t *anc_dev, ino_t *anc_ino, int depth)
{
    struct stat st;
    DIR *d = NULL;
    int loop = fstat(fd, &st) != 0 || depth == 64;
    for (int i = 0; i < depth && !loop; i++)
        loop = anc_dev[i] == st.st_dev && anc_ino[i] == st.st_ino;
    if (loop || !(d = fdopendir(fd))) {
        close(fd);
        return 0;
    }
    anc_dev[depth] = st.st_dev;
    anc_ino[depth] = st.st_ino;
    int hit = 0;
    struct dirent *de;
    while (!hit && (de = readdir(d)) != NULL) {
        const char *n = de->d_name;
        if (n[0] == '.' && (!n[1] || (n[1] == '.' && !n[2])))
            continue;
        int sub = -1;
        if (de->d_type == DT_DIR || de->d_type == DT_UNKNOWN || de->d_type == DT_LNK)
            sub = openat(dirfd(d), n, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (sub >= 0)
            hit = holds_image(sub, anc_dev, anc_ino, depth + 1);
        else
            hit = de->d_type != DT_DIR && is_image_name(n);
    }
    closedir(d);
    return hit;
}

/* Detection, when the root also holds another format's entries: a class
 * folder counts only when it holds an image (a folder it cannot read holds
 * none). Stops at the first image. */
static int if_detect_confirm(int dirfd, const char *name)
{
    dev_t dev[64];
    ino_t ino[64];
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    return fd >= 0 && holds_image(fd, dev, ino, 0);
}

static void if_value_source(char *buf, size_t cap, const input_set *in, uint64_t sample, uint32_t field)
{
    (void)field;
    snprintf(buf, cap, "%s/%s", in->path, in->keys[sample]);
}

const input_format input_format_imagefolder = {
    .name = "imagefolder",
    .dir_hint = "class folders",
    .dir_count = {"class folder with images", "class folders with images"},
    .detect = if_detect,
    .detect_confirm = if_detect_confirm,
    .discover = if_discover,
    .cursor_open = input_no_cursor_open,
    .read = if_read,
    .cursor_close = input_no_cursor_close,
    .free = if_free,
    .value_source = if_value_source,
    /* ROOT/<class>/<file>, byte for byte the packed tree: the key is the path. */
    .export = {.layout = input_data_file_layout, .file_name = input_data_file_name},
};
