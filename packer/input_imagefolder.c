/* ImageFolder input: ROOT/<class>/[folders/]<file>. Each file's bytes are stored
 * unchanged in the variable-length field "image"; "label" is the index of
 * its class among the sorted class names. Classes, folders and files are
 * ordered exactly as torchvision.datasets.ImageFolder orders them, so
 * labels and sample order match it: class folders sorted by name; within a
 * class, folders (followed through symlinks) sorted by path, then the
 * files of each folder sorted by name, keeping files whose name ends with
 * one of torchvision's image extensions (case-insensitive). Bytewise
 * order of UTF-8 names is Python's code point order. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/error_internal.h"
#include "format/le.h"
#include "format/shard_file.h"
#include "pack_internal.h"

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

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Bytewise order (Python's code point order for UTF-8). An empty vector
 * has no array to hand qsort. */
static void strvec_sort(strvec *s)
{
    if (s->n > 1)
        qsort(s->v, s->n, sizeof *s->v, cmp_str);
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

/* Lists dir: sub-folders into *dirs and files into *files (names only),
 * following symlinks like os.walk(followlinks=True). */
static int list_dir(const char *path, strvec *dirs, strvec *files)
{
    DIR *d = opendir(path);
    if (!d)
        return sf_fail(SF_E_INPUT, "%s: cannot open folder: %s", path, strerror(errno));
    int rc = 0;
    struct dirent *de;
    errno = 0;
    while (!rc && (de = readdir(d)) != NULL) {
        const char *n = de->d_name;
        if (n[0] == '.' && (!n[1] || (n[1] == '.' && !n[2])))
            continue;
        struct stat st;
        if (fstatat(dirfd(d), n, &st, 0) != 0) {
            rc = sf_fail(SF_E_INPUT, "%s/%s: %s", path, n, strerror(errno));
            break;
        }
        if (S_ISDIR(st.st_mode))
            rc = dirs ? strvec_push(dirs, strdup(n)) : 0;
        else
            rc = strvec_push(files, strdup(n));
        errno = 0;
    }
    if (!rc && errno)
        rc = sf_fail(SF_E_INPUT, "%s: reading folder: %s", path, strerror(errno));
    closedir(d);
    return rc;
}

typedef struct walk {
    const char *root;
    dev_t dev[64];
    ino_t ino[64];
    int depth;
    strvec rel; /* every folder of the class, relative to ROOT */
} walk;

/* Collects `rel` (a folder relative to ROOT) and, recursively, its
 * sub-folders. A folder that is its own ancestor (a symlink loop) is an
 * error: os.walk would go round it forever. */
static int collect_dirs(walk *w, const char *rel)
{
    char *path = pack_path_join(w->root, rel);
    if (!path)
        return sf_fail(-ENOMEM, "out of memory");
    struct stat st;
    int rc = 0;
    if (stat(path, &st) != 0) {
        rc = sf_fail(SF_E_INPUT, "%s: %s", path, strerror(errno));
        goto out;
    }
    for (int i = 0; i < w->depth; i++)
        if (w->dev[i] == st.st_dev && w->ino[i] == st.st_ino) {
            rc = sf_fail(SF_E_INPUT, "%s: symlink loop (the folder contains itself)", path);
            goto out;
        }
    if (w->depth == (int)(sizeof w->dev / sizeof w->dev[0])) {
        rc = sf_fail(SF_E_LIMIT, "%s: folders nested more than 64 deep", path);
        goto out;
    }
    if ((rc = strvec_push(&w->rel, strdup(rel))))
        goto out;
    strvec subs = {0}, files = {0};
    if ((rc = list_dir(path, &subs, &files)) == 0) {
        w->dev[w->depth] = st.st_dev;
        w->ino[w->depth] = st.st_ino;
        w->depth++;
        for (size_t i = 0; i < subs.n && !rc; i++) {
            char *sub = pack_path_join(rel, subs.v[i]);
            rc = sub ? collect_dirs(w, sub) : sf_fail(-ENOMEM, "out of memory");
            free(sub);
        }
        w->depth--;
    }
    strvec_free(&subs);
    strvec_free(&files);
out:
    free(path);
    return rc;
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

/* The samples of class `c`, in torchvision's order. */
static int scan_class(pack_input *in, found *fo, const char *root, const char *cls, uint32_t c)
{
    walk w = {.root = root};
    int rc = collect_dirs(&w, cls);
    if (!rc)
        /* sorted(os.walk(...)) orders folders by their whole path. */
        strvec_sort(&w.rel);
    size_t before = fo->keys.n;
    for (size_t d = 0; d < w.rel.n && !rc; d++) {
        char *path = pack_path_join(root, w.rel.v[d]);
        strvec files = {0};
        rc = path ? list_dir(path, NULL, &files) : sf_fail(-ENOMEM, "out of memory");
        if (!rc)
            strvec_sort(&files);
        for (size_t i = 0; i < files.n && !rc; i++) {
            char *key = pack_path_join(w.rel.v[d], files.v[i]);
            if (!key) {
                rc = sf_fail(-ENOMEM, "out of memory");
                break;
            }
            if (!is_image_name(files.v[i])) {
                if (in->skipped++ == 0)
                    snprintf(in->skipped_example, sizeof in->skipped_example, "%s/%s", root, key);
                free(key);
                continue;
            }
            if (!sf_valid_key(key, strlen(key))) {
                rc = sf_fail(SF_E_INPUT,
                             "%s/%s: the path is not a valid sample key (at most %u bytes of "
                             "UTF-8 without control characters)",
                             root, key, SF_MAX_KEY);
                free(key);
                break;
            }
            struct stat st;
            char *full = pack_path_join(root, key);
            if (!full) {
                free(key);
                rc = sf_fail(-ENOMEM, "out of memory");
                break;
            }
            int serr = stat(full, &st) != 0 ? errno : 0;
            if (serr || !S_ISREG(st.st_mode)) {
                rc = sf_fail(SF_E_INPUT, "%s: %s", full, serr ? strerror(serr) : "not a regular file");
                free(full);
                free(key);
                break;
            }
            free(full);
            rc = add_sample(fo, key, c, (uint64_t)st.st_size);
        }
        strvec_free(&files);
        free(path);
    }
    if (!rc && fo->keys.n == before)
        rc = sf_fail(SF_E_INPUT,
                     "%s/%s: class folder has no image files (torchvision's extensions: .jpg .jpeg "
                     ".png .ppm .bmp .pgm .tif .tiff .webp)",
                     root, cls);
    strvec_free(&w.rel);
    return rc;
}

static void if_free(pack_input *in)
{
    if_priv *p = in->priv;
    if (p)
        free(p->labels);
    free(p);
    in->priv = NULL;
}

static int if_cursor_open(const pack_input *in, void **cursor)
{
    (void)in;
    *cursor = NULL;
    return 0;
}

static void if_cursor_close(void *cursor)
{
    (void)cursor;
}

static int if_read(void *cursor, const pack_input *in, uint64_t sample, uint32_t field, uint8_t *dst)
{
    (void)cursor;
    const if_priv *p = in->priv;
    if (field == F_LABEL) {
        sf_put_le64(dst, p->labels[sample]);
        return 0;
    }
    uint64_t size = in->sizes[sample * 2 + F_IMAGE];
    char *path = pack_path_join(in->path, in->keys[sample]);
    if (!path)
        return sf_fail(-ENOMEM, "out of memory");
    int rc = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        rc = sf_fail(SF_E_INPUT, "%s: cannot open: %s", path, strerror(errno));
    else if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != size)
        rc = sf_fail(SF_E_INPUT, "%s: input changed while packing (size %llu, was %llu)", path,
                     (unsigned long long)st.st_size, (unsigned long long)size);
    else if ((rc = sf_pread_full(fd, dst, size, 0)))
        rc = sf_fail(SF_E_INPUT, "%s: read failed: %s", path, sf_strerror(rc));
    if (fd >= 0)
        close(fd);
    free(path);
    return rc;
}

static const pack_input_ops imagefolder_ops = {"imagefolder", if_cursor_open, if_read, if_cursor_close,
                                               if_free};

static void schema_of(sf_schema *s)
{
    memset(s, 0, sizeof *s);
    s->field_count = 2;
    sf_field *img = &s->fields[F_IMAGE], *lab = &s->fields[F_LABEL];
    snprintf(img->name, sizeof img->name, "image");
    img->dtype = SF_DT_BYTES;
    img->ndim = 1;
    img->storage = SF_STORE_VAR;
    snprintf(lab->name, sizeof lab->name, "label");
    lab->dtype = SF_DT_I64;
    lab->ndim = 0;
    lab->storage = SF_STORE_INLINE;
    lab->item_size = 8;
}

int pack_input_imagefolder(pack_input *in, const char *root)
{
    in->ops = &imagefolder_ops;
    if_priv *p = calloc(1, sizeof *p);
    if (!p)
        return sf_fail(-ENOMEM, "out of memory");
    in->priv = p;
    strvec classes = {0}, files = {0};
    int rc = list_dir(root, &classes, &files);
    if (!rc && classes.n == 0)
        rc = sf_fail(SF_E_INPUT, "%s: no class folders (ImageFolder input is ROOT/<class>/<image>)", root);
    if (!rc && classes.n > UINT32_MAX)
        rc = sf_fail(SF_E_LIMIT, "%s: too many classes", root);
    /* torchvision ignores files directly under ROOT; so do we, counting them. */
    for (size_t i = 0; i < files.n; i++)
        if (in->skipped++ == 0)
            snprintf(in->skipped_example, sizeof in->skipped_example, "%s/%s", root, files.v[i]);
    if (!rc)
        strvec_sort(&classes);
    found fo = {0};
    for (size_t c = 0; c < classes.n && !rc; c++)
        rc = scan_class(in, &fo, root, classes.v[c], (uint32_t)c);
    schema_of(&in->schema);
    if (!rc)
        rc = sf_schema_finish(&in->schema);
    if (!rc)
        rc = pack_input_alloc(in, fo.keys.n);
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
        in->class_names = classes.v;
        in->class_count = (uint32_t)classes.n;
        classes.v = NULL;
        classes.n = 0;
    }
    strvec_free(&fo.keys);
    free(fo.labels);
    free(fo.sizes);
    strvec_free(&classes);
    strvec_free(&files);
    return rc;
}
