/*
 * weight_store.c — opens a checkpoint directory: picks the weight files (single or sharded via an index
 * JSON), memory-maps each read-only, parses it with the matching format parser and merges all tensors into
 * one list sorted by name for bsearch lookups. Data stays in the mappings until weight_store_close.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf_llama.h"
#include "loader_util.h"
#include "errbuf.h"

#define MAX_SHARDS 4096
#define MAX_INDEX_BYTES (64u * 1024u * 1024u)

typedef int (*parse_fn)(const uint8_t *, uint64_t, const char *, tensor_list *, char *, size_t);

typedef struct {
    char *path;
    void *addr;   /* NULL for an empty file */
    size_t len;
} mapped_file;

struct weight_store {
    const char *format;
    mapped_file *files;
    size_t nfiles;
    tensor_list list; /* sorted by name */
};

static char *join(const char *dir, const char *name) {
    size_t dl = strlen(dir), nl = strlen(name);
    int slash = dl && dir[dl - 1] == '/';
    char *p = malloc(dl + nl + 2);
    if (p) snprintf(p, dl + nl + 2, "%s%s%s", dir, slash ? "" : "/", name);
    return p;
}

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Maps dir/name, parses it into ws->list. */
static int add_file(weight_store *ws, const char *dir, const char *name, parse_fn parse, char *err, size_t errlen) {
    mapped_file *f = &ws->files[ws->nfiles];
    memset(f, 0, sizeof *f);
    if (!(f->path = join(dir, name))) return errbuf_fail(err, errlen, "out of memory");
    ws->nfiles++; /* from here on weight_store_close releases it */
    int fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errbuf_fail(err, errlen, "%s: cannot open: %s", f->path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return errbuf_fail(err, errlen, "%s: not a regular file", f->path);
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        return errbuf_fail(err, errlen, "%s: too large to map on this platform", f->path);
    }
    f->len = (size_t)st.st_size;
    if (f->len) {
        void *a = mmap(NULL, f->len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (a == MAP_FAILED) {
            close(fd);
            return errbuf_fail(err, errlen, "%s: mmap failed: %s", f->path, strerror(errno));
        }
        f->addr = a;
    }
    close(fd);
    static const uint8_t empty[1];
    return parse(f->addr ? f->addr : empty, f->len, f->path, &ws->list, err, errlen);
}

/* The whole of a small text file (an index JSON), or NULL with a message. */
static char *read_text(const char *path, size_t *len, char *err, size_t errlen) {
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        errbuf_fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    char *text = NULL;
    if (fstat(fileno(fp), &st) != 0 || st.st_size < 0 || (uint64_t)st.st_size > MAX_INDEX_BYTES) {
        errbuf_fail(err, errlen, "%s: not a readable file of at most %u bytes", path, MAX_INDEX_BYTES);
    } else if (!(text = malloc((size_t)st.st_size + 1))) {
        errbuf_fail(err, errlen, "out of memory");
    } else if ((*len = fread(text, 1, (size_t)st.st_size, fp)) != (size_t)st.st_size) {
        errbuf_fail(err, errlen, "%s: read error", path);
        free(text);
        text = NULL;
    }
    fclose(fp);
    return text;
}

/* A shard name from an index must name a file directly inside dir. */
static int plain_name(const char *s) {
    return s[0] && !strchr(s, '/') && !strchr(s, '\\') && !strstr(s, "..") && strcmp(s, ".") != 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static const mapped_file *file_named(const weight_store *ws, const char *dir, const char *shard) {
    size_t dl = strlen(dir);
    for (size_t i = 0; i < ws->nfiles; i++) {
        const char *p = ws->files[i].path + dl;
        if (*p == '/') p++;
        if (strcmp(p, shard) == 0) return &ws->files[i];
    }
    return NULL;
}

static int cmp_entry_name(const void *key, const void *e) { return strcmp(key, ((const tensor_entry *)e)->name); }

const tensor_entry *weight_store_find(const weight_store *ws, const char *name) {
    if (!ws || !name || !ws->list.count) return NULL;
    return bsearch(name, ws->list.items, ws->list.count, sizeof(tensor_entry), cmp_entry_name);
}

/* Sorts the merged list (weight_store_find needs it) and rejects a name defined twice. */
static int sort_and_check(weight_store *ws, const char *dir, char *err, size_t errlen) {
    long d = ld_list_sort_find_dup(&ws->list);
    if (d < 0) return 0;
    const tensor_entry *a = &ws->list.items[d], *b = &ws->list.items[d + 1];
    if (a->file == b->file) return errbuf_fail(err, errlen, "%s: tensor '%s' is defined twice", a->file, a->name);
    return errbuf_fail(err, errlen, "%s: tensor '%s' is in both %s and %s", dir, a->name, a->file, b->file);
}

/* Loads a sharded checkpoint described by dir/index ({"weight_map": {tensor: shard file}}). */
static int open_index(weight_store *ws, const char *dir, const char *index, parse_fn parse, char *err,
                      size_t errlen) {
    char *ipath = join(dir, index);
    if (!ipath) return errbuf_fail(err, errlen, "out of memory");
    int rc = -1;
    const char **names = NULL;
    json_t *root = NULL;
    json_error_t je;
    size_t n;
    char *text = read_text(ipath, &n, err, errlen);
    if (!text) goto done;
    root = json_loadb(text, n, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!root) {
        errbuf_fail(err, errlen, "%s: not valid JSON: %s (line %d, column %d)", ipath, je.text, je.line, je.column);
        goto done;
    }
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm) || json_object_size(wm) == 0) {
        errbuf_fail(err, errlen, "%s: no 'weight_map' object of tensor name -> shard file", ipath);
        goto done;
    }
    size_t nn = 0, cap = json_object_size(wm);
    if (!(names = malloc(cap * sizeof *names))) {
        errbuf_fail(err, errlen, "out of memory");
        goto done;
    }
    const char *key;
    json_t *v;
    json_object_foreach(wm, key, v) {
        if (!json_is_string(v)) {
            errbuf_fail(err, errlen, "%s: weight_map['%s'] must be a file name string", ipath, key);
            goto done;
        }
        if (!plain_name(json_string_value(v))) {
            errbuf_fail(err, errlen, "%s: shard name '%s' must be a plain file name inside the directory", ipath,
                        json_string_value(v));
            goto done;
        }
        names[nn++] = json_string_value(v);
    }
    qsort(names, nn, sizeof *names, cmp_str);
    size_t u = 0;
    for (size_t i = 0; i < nn; i++)
        if (u == 0 || strcmp(names[u - 1], names[i]) != 0) names[u++] = names[i];
    if (u > MAX_SHARDS) {
        errbuf_fail(err, errlen, "%s: %zu shards (limit %d)", ipath, u, MAX_SHARDS);
        goto done;
    }
    if (!(ws->files = calloc(u, sizeof *ws->files))) {
        errbuf_fail(err, errlen, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < u; i++)
        if (add_file(ws, dir, names[i], parse, err, errlen)) goto done;
    if (sort_and_check(ws, dir, err, errlen)) goto done;
    /* the index must agree with the shards; a mismatch means a mixed-up or partial download */
    json_object_foreach(wm, key, v) {
        const tensor_entry *t = weight_store_find(ws, key);
        const mapped_file *f = file_named(ws, dir, json_string_value(v));
        if (!t || !f || t->file != f->path) {
            errbuf_fail(err, errlen, "%s: weight_map puts '%s' in %s, but that shard does not hold it", ipath, key,
                        json_string_value(v));
            goto done;
        }
    }
    rc = 0;
done:
    free(names);
    json_decref(root);
    free(ipath);
    return rc;
}

typedef struct {
    const char *name;
    int sharded;
    parse_fn parse;
    const char *format;
} weight_file_kind;

/* Opens the first of kinds[] present in dir. */
static int open_first(const char *dir, const weight_file_kind *kinds, int n_kinds, const char *looked_for,
                      weight_store **out, char *err, size_t errlen) {
    *out = NULL;
    struct stat st;
    if (stat(dir, &st) != 0) return errbuf_fail(err, errlen, "%s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return errbuf_fail(err, errlen, "%s: not a directory", dir);
    int k = -1;
    for (int i = 0; i < n_kinds && k < 0; i++) {
        char *p = join(dir, kinds[i].name);
        if (!p) return errbuf_fail(err, errlen, "out of memory");
        if (is_file(p)) k = i;
        free(p);
    }
    if (k < 0) return errbuf_fail(err, errlen, "%s: no weights found (looked for %s)", dir, looked_for);
    weight_store *ws = calloc(1, sizeof *ws);
    if (!ws) return errbuf_fail(err, errlen, "out of memory");
    ws->format = kinds[k].format;
    int rc;
    if (kinds[k].sharded) {
        rc = open_index(ws, dir, kinds[k].name, kinds[k].parse, err, errlen);
    } else {
        ws->files = calloc(1, sizeof *ws->files);
        rc = ws->files ? add_file(ws, dir, kinds[k].name, kinds[k].parse, err, errlen)
                       : errbuf_fail(err, errlen, "out of memory");
        if (rc == 0) rc = sort_and_check(ws, dir, err, errlen);
    }
    if (rc) {
        weight_store_close(ws);
        return -1;
    }
    *out = ws;
    return 0;
}

int weight_store_open(const char *dir, weight_store **out, char *err, size_t errlen) {
    static const weight_file_kind kinds[] = {
        {"model.safetensors", 0, safetensors_parse, "safetensors"},
        {"model.safetensors.index.json", 1, safetensors_parse, "safetensors"},
        {"pytorch_model.bin", 0, torch_zip_parse, "pytorch"},
        {"pytorch_model.bin.index.json", 1, torch_zip_parse, "pytorch"},
    };
    return open_first(dir, kinds, 4,
                      "model.safetensors, model.safetensors.index.json, pytorch_model.bin, "
                      "pytorch_model.bin.index.json",
                      out, err, errlen);
}

int weight_store_open_adapter(const char *dir, weight_store **out, char *err, size_t errlen) {
    static const weight_file_kind kinds[] = {
        {"adapter_model.safetensors", 0, safetensors_parse, "safetensors"},
        {"adapter_model.bin", 0, torch_zip_parse, "pytorch"},
    };
    return open_first(dir, kinds, 2, "adapter_model.safetensors, adapter_model.bin", out, err, errlen);
}

int weight_store_open_gguf(const char *path, weight_store **out, char *err, size_t errlen) {
    *out = NULL;
    if (!is_file(path)) return errbuf_fail(err, errlen, "%s: not a readable file", path);
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, (size_t)(slash - path + 1)) : strdup(".");
    weight_store *ws = calloc(1, sizeof *ws);
    if (!dir || !ws || !(ws->files = calloc(1, sizeof *ws->files))) {
        free(dir);
        weight_store_close(ws);
        return errbuf_fail(err, errlen, "out of memory");
    }
    ws->format = "gguf";
    int rc = add_file(ws, dir, slash ? slash + 1 : path, gguf_weights_parse, err, errlen);
    if (rc == 0) rc = sort_and_check(ws, dir, err, errlen);
    free(dir);
    if (rc) {
        weight_store_close(ws);
        return -1;
    }
    *out = ws;
    return 0;
}

void weight_store_close(weight_store *ws) {
    if (!ws) return;
    tensor_list_free(&ws->list);
    for (size_t i = 0; i < ws->nfiles; i++) {
        if (ws->files[i].addr) munmap(ws->files[i].addr, ws->files[i].len);
        free(ws->files[i].path);
    }
    free(ws->files);
    free(ws);
}

size_t weight_store_count(const weight_store *ws) { return ws ? ws->list.count : 0; }

const tensor_entry *weight_store_at(const weight_store *ws, size_t i) {
    return ws && i < ws->list.count ? &ws->list.items[i] : NULL;
}

const char *weight_store_format(const weight_store *ws) { return ws ? ws->format : ""; }
