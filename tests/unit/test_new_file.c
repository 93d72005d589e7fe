/* Unit tests for lib/base/new_file.c, every method forced in turn (the probe
 * picks O_TMPFILE on ext4 and tmpfs, so export alone would never run the
 * others): the file has no final name until the commit, a commit never
 * replaces what is there (file, symlink, dangling symlink), a discard or a
 * refused commit leaves nothing, the permissions asked for hold. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "new_file.h"
#include "unit_helpers.h"

static char g_root[256];
static int g_dirfd = -1;

static void setup(void)
{
    snprintf(g_root, sizeof g_root, "newfile-XXXXXX");
    cr_assert_not_null(mkdtemp(g_root), "mkdtemp: %s", strerror(errno));
    g_dirfd = open(g_root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    cr_assert_geq(g_dirfd, 0);
}

static void teardown(void)
{
    if (g_dirfd >= 0)
        close(g_dirfd);
    if (g_root[0])
        unit_rm_tree(g_root);
}

TestSuite(new_file, .init = setup, .fini = teardown, .timeout = 60);

static const sf_new_file_method all_methods[] = {SF_NEW_FILE_TMPFILE_EMPTY_PATH, SF_NEW_FILE_TMPFILE_PROC,
                                                 SF_NEW_FILE_RENAME, SF_NEW_FILE_LINK, SF_NEW_FILE_DIRECT};
#define N_METHODS (sizeof all_methods / sizeof all_methods[0])

/* The names in the scratch folder, sorted, joined by spaces ("" when empty). */
static const char *entries(void)
{
    static char out[1024];
    char names[16][256];
    int n = 0;
    DIR *d = opendir(g_root);
    cr_assert_not_null(d);
    struct dirent *de;
    while ((de = readdir(d)) != NULL && n < 16)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            snprintf(names[n++], sizeof names[0], "%s", de->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], (int (*)(const void *, const void *))strcmp);
    out[0] = '\0';
    for (int i = 0; i < n; i++)
        snprintf(out + strlen(out), sizeof out - strlen(out), "%s%s", i ? " " : "", names[i]);
    return out;
}

static void put(const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", g_root, name);
    unit_write_file(path, (const uint8_t *)text, strlen(text));
}

static const char *contents(const char *path)
{
    static char buf[256];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    cr_assert_geq(n, 0);
    buf[n] = '\0';
    return buf;
}

/* Whether this process can use method m: AT_EMPTY_PATH without
 * CAP_DAC_READ_SEARCH fails at the link (ENOENT), so a probe commit tells.
 * Not a skip of the whole test: the other methods are still checked. */
static int usable(sf_new_file_method m)
{
    if (m != SF_NEW_FILE_TMPFILE_EMPTY_PATH)
        return 1;
    sf_new_file p;
    cr_assert_eq(sf_new_file_open(&p, g_dirfd, "cap-probe", m, 0644), 0);
    int rc = sf_new_file_commit(&p);
    if (rc == -ENOENT) {
        cr_log_warn("linkat AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH: not checked");
        return 0;
    }
    cr_assert_eq(rc, 0, "%s", strerror(-rc));
    cr_assert_eq(unlinkat(g_dirfd, "cap-probe", 0), 0);
    return 1;
}

static void open_new(sf_new_file *nf, sf_new_file_method m, const char *name)
{
    int rc = sf_new_file_open(nf, g_dirfd, name, m, 0644);
    cr_assert_eq(rc, 0, "method %d: open: %s", m, strerror(-rc));
    cr_assert_geq(nf->fd, 0);
}

static void each_method(void (*check)(sf_new_file_method))
{
    for (size_t i = 0; i < N_METHODS; i++) {
        check(all_methods[i]);
        unit_rm_tree(g_root);
        cr_assert_eq(mkdir(g_root, 0777), 0);
        close(g_dirfd);
        g_dirfd = open(g_root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    }
}

static void named_only_when_committed(sf_new_file_method m)
{
    if (!usable(m))
        return;
    sf_new_file nf;
    open_new(&nf, m, "f");
    cr_assert_eq(write(nf.fd, "hel", 3), 3);
    /* Mid-write (where a kill would land): the final name holds nothing. */
    struct stat st;
    int named = fstatat(g_dirfd, "f", &st, AT_SYMLINK_NOFOLLOW) == 0;
    cr_assert_eq(named, m == SF_NEW_FILE_DIRECT, "method %d: named before the commit (%s)", m, entries());
    if (m == SF_NEW_FILE_RENAME || m == SF_NEW_FILE_LINK)
        cr_assert_eq(strncmp(entries(), ".shardfeed-tmp.", 15), 0, "method %d: %s", m, entries());
    cr_assert_eq(write(nf.fd, "lo", 2), 2);
    cr_assert_eq(sf_new_file_commit(&nf), 0, "method %d", m);
    cr_assert_eq(nf.fd, -1);
    cr_assert_str_eq(entries(), "f", "method %d", m);
    char path[512];
    snprintf(path, sizeof path, "%s/f", g_root);
    cr_assert_str_eq(contents(path), "hello", "method %d", m);
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0644 & ~(mode_t)022, "method %d: mode %o", m, st.st_mode & 0777);
}

Test(new_file, every_method_names_the_file_only_when_committed)
{
    umask(022);
    each_method(named_only_when_committed);
}

/* What `name` is made of before the commit: a file, a symlink to a file
 * outside, a dangling symlink. */
static void plant(const char *what)
{
    if (strcmp(what, "file") == 0) {
        put("f", "precious");
        return;
    }
    char target[512];
    snprintf(target, sizeof target, "%s-outside", g_root);
    if (strcmp(what, "symlink") == 0)
        unit_write_file(target, (const uint8_t *)"precious", 8);
    else
        unlink(target);
    char link[512];
    snprintf(link, sizeof link, "%s/f", g_root);
    cr_assert_eq(symlink(target, link), 0, "%s", strerror(errno));
}

static void check_planted(const char *what, sf_new_file_method m)
{
    char target[512], link[512];
    snprintf(target, sizeof target, "%s-outside", g_root);
    snprintf(link, sizeof link, "%s/f", g_root);
    cr_assert_str_eq(entries(), "f", "%s, method %d: a temporary is left", what, m);
    if (strcmp(what, "file") == 0) {
        cr_assert_str_eq(contents(link), "precious", "%s, method %d", what, m);
        return;
    }
    struct stat st;
    cr_assert_eq(lstat(link, &st), 0);
    cr_assert(S_ISLNK(st.st_mode), "%s, method %d: the symlink was replaced", what, m);
    if (strcmp(what, "symlink") == 0)
        cr_assert_str_eq(contents(target), "precious", "method %d: written through the symlink", m);
    else
        cr_assert_neq(access(target, F_OK), 0, "method %d: created the dangling symlink's target", m);
    unlink(target);
}

static void never_replaces(sf_new_file_method m)
{
    if (!usable(m))
        return;
    static const char *const planted[] = {"file", "symlink", "dangling"};
    for (size_t k = 0; k < 3; k++) {
        plant(planted[k]);
        sf_new_file nf;
        int rc = sf_new_file_open(&nf, g_dirfd, "f", m, 0644);
        if (m == SF_NEW_FILE_DIRECT) {
            cr_assert_eq(rc, -EEXIST, "%s: open %d", planted[k], rc);
        } else {
            cr_assert_eq(rc, 0);
            cr_assert_eq(write(nf.fd, "new", 3), 3);
            rc = sf_new_file_commit(&nf);
            cr_assert_eq(rc, -EEXIST, "%s, method %d: commit %d", planted[k], m, rc);
            cr_assert_eq(nf.fd, -1);
        }
        check_planted(planted[k], m);
        cr_assert_eq(unlinkat(g_dirfd, "f", 0), 0);
    }
}

Test(new_file, no_method_replaces_a_file_or_a_symlink)
{
    each_method(never_replaces);
}

static void discard_leaves_nothing(sf_new_file_method m)
{
    if (!usable(m))
        return;
    sf_new_file nf;
    open_new(&nf, m, "f");
    cr_assert_eq(write(nf.fd, "partial", 7), 7);
    sf_new_file_discard(&nf);
    cr_assert_eq(nf.fd, -1);
    cr_assert_str_eq(entries(), "", "method %d", m);
    sf_new_file_discard(&nf); /* a second discard is a no-op */
}

Test(new_file, discard_leaves_nothing)
{
    each_method(discard_leaves_nothing);
}

Test(new_file, permissions_less_the_umask)
{
    umask(027);
    sf_new_file nf;
    open_new(&nf, SF_NEW_FILE_RENAME, "r");
    cr_assert_eq(sf_new_file_commit(&nf), 0);
    char path[512];
    struct stat st;
    snprintf(path, sizeof path, "%s/r", g_root);
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0640, "mode %o", st.st_mode & 0777);
    umask(022);
}

Test(new_file, refuses_a_path_or_an_empty_name)
{
    sf_new_file nf;
    cr_assert_eq(sf_new_file_open(&nf, g_dirfd, "a/b", SF_NEW_FILE_TMPFILE_PROC, 0644), -EINVAL);
    cr_assert_eq(sf_new_file_open(&nf, g_dirfd, "", SF_NEW_FILE_RENAME, 0644), -EINVAL);
    cr_assert_str_eq(entries(), "");
}

/* The probe picks an unnamed file where the kernel and file system have
 * O_TMPFILE (ext4 and tmpfs here), linked with AT_EMPTY_PATH where this
 * process may, else through /proc; and leaves nothing. */
Test(new_file, probe_picks_tmpfile_and_leaves_nothing)
{
    int fd = openat(g_dirfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0)
        cr_skip_test("no O_TMPFILE here: %s", strerror(errno));
    close(fd);
    if (access("/proc/self/fd", F_OK) != 0)
        cr_skip_test("no /proc");
    sf_new_file_method m = sf_new_file_probe(g_dirfd);
    cr_assert(m == SF_NEW_FILE_TMPFILE_EMPTY_PATH || m == SF_NEW_FILE_TMPFILE_PROC, "method %d", m);
    cr_assert_str_eq(entries(), "");
}
