/*
 * torch_pickle.c — the whitelist and semantics that make pickle.c a state-dict reader: which globals exist,
 * what calling them builds (dicts, storages, tensors), and the final walk from the result dict (or list of tensors,
 * named "0", "1", ... by position) to tensor_entry values. Tensors may be views into a storage (an offset) and
 * several may share one storage; nn.Parameters (_rebuild_parameter) are read as their tensor. Anything outside the whitelist is refused by name; nothing is ever executed.
 */
#include "torch_pickle.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "loader_util.h"
#include "pickle.h"

enum {
    K_ORDERED_DICT = 1, K_REBUILD_TENSOR_V2, K_REBUILD_PARAMETER, K_REBUILD_PARAMETER_WITH_STATE,
    K_STORAGE = 100, /* + tensor_dtype */
    K_DTYPE = 200,   /* + tensor_dtype: torch.float32 etc., accepted as values, never called */
};
enum { ST_OK = 0, ST_NONCONTIG, ST_RANGE };

#define MAX_NEST 4          /* {"state_dict": {...}} and the like */
#define MAX_NAME 1024
/* Shared sub-dicts could make the walk (and the list) exponential in the pickle size: cap both. A real
 * state dict has thousands of entries and well under a megabyte of names. */
#define MAX_VISITS (1u << 18)
#define MAX_NAME_BYTES (64u << 20)

typedef struct {
    torch_storage_fn storage;
    void *ctx;
} tp_ctx;

static const struct { const char *name; tensor_dtype dt; } storages[] = {
    {"FloatStorage", TENSOR_F32}, {"HalfStorage", TENSOR_F16},  {"BFloat16Storage", TENSOR_BF16},
    {"DoubleStorage", TENSOR_F64}, {"LongStorage", TENSOR_I64}, {"IntStorage", TENSOR_I32},
    {"ShortStorage", TENSOR_I16}, {"CharStorage", TENSOR_I8},   {"ByteStorage", TENSOR_U8},
    {"BoolStorage", TENSOR_BOOL},
};
static const struct { const char *name; tensor_dtype dt; } dtypes[] = {
    {"float32", TENSOR_F32}, {"float", TENSOR_F32},  {"float16", TENSOR_F16}, {"half", TENSOR_F16},
    {"bfloat16", TENSOR_BF16}, {"float64", TENSOR_F64}, {"double", TENSOR_F64}, {"int64", TENSOR_I64},
    {"long", TENSOR_I64}, {"int32", TENSOR_I32}, {"int", TENSOR_I32},   {"int16", TENSOR_I16},
    {"short", TENSOR_I16}, {"int8", TENSOR_I8},  {"uint8", TENSOR_U8},  {"bool", TENSOR_BOOL},
};

static bool eq(const char *s, size_t n, const char *lit) { return strlen(lit) == n && memcmp(s, lit, n) == 0; }

static int find_global(pk_vm *vm, const char *mod, size_t ml, const char *name, size_t nl, int64_t *kind) {
    *kind = 0;
    if (eq(mod, ml, "collections") && eq(name, nl, "OrderedDict")) *kind = K_ORDERED_DICT;
    if (eq(mod, ml, "torch._utils")) {
        if (eq(name, nl, "_rebuild_tensor_v2")) *kind = K_REBUILD_TENSOR_V2;
        if (eq(name, nl, "_rebuild_parameter")) *kind = K_REBUILD_PARAMETER;
        if (eq(name, nl, "_rebuild_parameter_with_state")) *kind = K_REBUILD_PARAMETER_WITH_STATE;
    }
    if (eq(mod, ml, "torch")) {
        for (size_t i = 0; i < sizeof storages / sizeof storages[0]; i++)
            if (eq(name, nl, storages[i].name)) *kind = K_STORAGE + storages[i].dt;
        for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
            if (eq(name, nl, dtypes[i].name)) *kind = K_DTYPE + dtypes[i].dt;
    }
    if (*kind) return 0;
    return pk_error(vm, "unsupported pickle global '%.*s.%.*s' (mnemo reads state dicts of tensors and never runs "
                        "pickled code)",
                    (int)(ml > 80 ? 80 : ml), mod, (int)(nl > 80 ? 80 : nl), name);
}

static bool is_int(pk_vm *vm, uint32_t o, int64_t min) {
    return vm->objs[o].type == PK_INT && vm->objs[o].v.i >= min;
}

/* ('storage', <XStorage>, key, location, numel) -> a storage bound to the archive's data/<key> bytes. */
static int persistent_load(pk_vm *vm, uint32_t pid, uint32_t *result) {
    const tp_ctx *c = vm->hooks->ctx;
    pk_obj *t = pk_at(vm, pid);
    if (t->type != PK_TUPLE || t->n != 5)
        return pk_error(vm, "persistent id is a %s of %u items, not ('storage', type, key, location, numel)",
                        pk_type_name(t->type), t->n);
    uint32_t tag = t->v.items[0], ty = t->v.items[1], key = t->v.items[2], loc = t->v.items[3], num = t->v.items[4];
    if (vm->objs[tag].type != PK_STR || !eq(vm->objs[tag].v.s.p, (size_t)vm->objs[tag].v.s.len, "storage"))
        return pk_error(vm, "persistent id is not a 'storage' record");
    if (vm->objs[ty].type != PK_GLOBAL || vm->objs[ty].v.i < K_STORAGE || vm->objs[ty].v.i >= K_DTYPE)
        return pk_error(vm, "storage record has no storage type");
    if (vm->objs[key].type != PK_STR || vm->objs[key].v.s.len == 0 || vm->objs[key].v.s.len > 256 ||
        vm->objs[loc].type != PK_STR || !is_int(vm, num, 0))
        return pk_error(vm, "malformed storage record (key, location, numel)");
    tensor_dtype dt = (tensor_dtype)(vm->objs[ty].v.i - K_STORAGE);
    const char *k = vm->objs[key].v.s.p;
    size_t kl = (size_t)vm->objs[key].v.s.len;
    uint64_t numel = (uint64_t)vm->objs[num].v.i, need, have;
    if (!ld_mul_u64(numel, tensor_dtype_size(dt), &need))
        return pk_error(vm, "storage '%.*s' size overflows", (int)kl, k);
    const uint8_t *data;
    if (c->storage(c->ctx, k, kl, &data, &have, vm->msg, sizeof vm->msg)) return -1;
    if (have < need)
        return pk_error(vm, "storage '%.*s' holds %llu bytes but %llu x %s needs %llu", (int)kl, k,
                        (unsigned long long)have, (unsigned long long)numel, tensor_dtype_name(dt),
                        (unsigned long long)need);
    int64_t rec = pk_new_tensor(vm);
    uint32_t o = rec < 0 ? PK_NIL : pk_new(vm, PK_STORAGE);
    if (o == PK_NIL) return -1;
    pk_tensor *s = &vm->tensors[rec];
    s->dtype = dt;
    s->data = data;
    s->numel = numel;
    s->nbytes = need;
    vm->objs[o].v.i = rec;
    *result = o;
    return 0;
}

/* _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata]). Layout problems are
 * recorded in status and reported by the walk, which knows the tensor's name. */
static int rebuild_tensor(pk_vm *vm, const pk_obj *args, uint32_t *result) {
    if (args->n != 6 && args->n != 7) return pk_error(vm, "_rebuild_tensor_v2 called with %u arguments", args->n);
    const uint32_t *a = args->v.items;
    if (vm->objs[a[0]].type != PK_STORAGE || !is_int(vm, a[1], 0) || vm->objs[a[2]].type != PK_TUPLE ||
        vm->objs[a[3]].type != PK_TUPLE || vm->objs[a[2]].n != vm->objs[a[3]].n)
        return pk_error(vm, "_rebuild_tensor_v2 arguments are not (storage, offset, size, stride, ...)");
    uint32_t ndim = vm->objs[a[2]].n;
    if (ndim > TENSOR_MAX_DIMS) return pk_error(vm, "tensor has %u dimensions (at most %d)", ndim, TENSOR_MAX_DIMS);
    int64_t srec = vm->objs[a[0]].v.i, off = vm->objs[a[1]].v.i;
    int64_t rec = pk_new_tensor(vm);
    uint32_t o = rec < 0 ? PK_NIL : pk_new(vm, PK_TENSOR);
    if (o == PK_NIL) return -1;
    const pk_tensor *s = &vm->tensors[srec];
    pk_tensor *t = &vm->tensors[rec];
    t->dtype = s->dtype;
    t->ndim = (int32_t)ndim;
    for (uint32_t i = 0; i < ndim; i++) {
        uint32_t d = vm->objs[a[2]].v.items[i], st = vm->objs[a[3]].v.items[i];
        if (!is_int(vm, d, 0) || vm->objs[st].type != PK_INT)
            return pk_error(vm, "tensor size/stride must be tuples of integers");
        t->shape[i] = vm->objs[d].v.i;
        t->stride[i] = vm->objs[st].v.i;
    }
    if (!ld_tensor_nbytes(t->dtype, t->ndim, t->shape, &t->nbytes)) return pk_error(vm, "tensor size overflows");
    t->numel = t->nbytes / tensor_dtype_size(t->dtype);
    t->offset = (uint64_t)off;
    t->storage_numel = s->numel;
    /* torch's rule: size-1 dims may have any stride; empty tensors are contiguous */
    uint64_t expect = 1;
    for (int32_t i = t->ndim - 1; i >= 0 && t->numel; i--) {
        if (t->shape[i] == 1) continue;
        if (t->stride[i] < 0 || (uint64_t)t->stride[i] != expect) t->status = ST_NONCONTIG;
        expect *= (uint64_t)t->shape[i]; /* cannot overflow: the byte count above did not */
    }
    uint64_t end;
    if (!ld_add_u64(t->offset, t->numel, &end) || end > s->numel) {
        if (!t->status) t->status = ST_RANGE;
    } else {
        t->data = s->data + t->offset * tensor_dtype_size(t->dtype);
    }
    vm->objs[o].v.i = rec;
    *result = o;
    return 0;
}

static int call(pk_vm *vm, uint32_t fn, uint32_t args, uint32_t *result) {
    int64_t kind = vm->objs[fn].v.i;
    const pk_obj *t = pk_at(vm, args);
    if (t->type != PK_TUPLE) return pk_error(vm, "malformed pickle: call arguments are a %s", pk_type_name(t->type));
    switch (kind) {
    case K_ORDERED_DICT:
        if (t->n != 0) return pk_error(vm, "OrderedDict called with arguments");
        *result = pk_new(vm, PK_DICT);
        return *result == PK_NIL ? -1 : 0;
    case K_REBUILD_TENSOR_V2: return rebuild_tensor(vm, t, result);
    case K_REBUILD_PARAMETER:
    case K_REBUILD_PARAMETER_WITH_STATE:
        if (t->n != (kind == K_REBUILD_PARAMETER ? 3u : 4u) || vm->objs[t->v.items[0]].type != PK_TENSOR)
            return pk_error(vm, "_rebuild_parameter arguments are not (tensor, requires_grad, hooks)");
        *result = t->v.items[0];
        return 0;
    default:
        return pk_error(vm, "pickle calls a torch %s directly, which a state dict never does",
                        kind >= K_DTYPE ? "dtype" : "storage type");
    }
}

/* BUILD: torch sets OrderedDict._metadata this way; it only matters to torch's own loader. */
static int build(pk_vm *vm, uint32_t obj, uint32_t state) {
    if (vm->objs[obj].type == PK_DICT) return 0;
    return pk_error(vm, "pickle sets the state of a %s, which a state dict never does",
                    pk_type_name(vm->objs[obj].type));
}

typedef struct {
    uint32_t visits;
    uint64_t name_bytes;
} walk_budget;

/* Appends every tensor under dict d, names prefixed by name[0..nlen). */
static int walk(pk_vm *vm, uint32_t d, char *name, size_t nlen, int depth, walk_budget *wb, const char *file,
                tensor_list *out) {
    const pk_obj *o = pk_at(vm, d);
    for (uint32_t i = 0; i < o->n; i++) {
        if (++wb->visits > MAX_VISITS) return pk_error(vm, "state dict has too many entries (limit %u)", MAX_VISITS);
        const pk_obj *k = pk_at(vm, o->v.items[2 * i]);
        uint32_t v = o->v.items[2 * i + 1];
        if (k->type != PK_STR)
            return pk_error(vm, "state dict key is a Python %s, not a string", pk_type_name(k->type));
        size_t kl = (size_t)k->v.s.len, l = nlen + (nlen ? 1 : 0) + kl;
        if (l > MAX_NAME || memchr(k->v.s.p, '\0', kl) || kl == 0)
            return pk_error(vm, "state dict key is empty, too long or holds a NUL byte");
        if (nlen) name[nlen] = '.';
        memcpy(name + l - kl, k->v.s.p, kl);
        name[l] = '\0';
        uint8_t vt = vm->objs[v].type;
        if (vt == PK_DICT) {
            if (depth >= MAX_NEST) return pk_error(vm, "'%s': dicts nested more than %d deep", name, MAX_NEST);
            if (walk(vm, v, name, l, depth + 1, wb, file, out)) return -1;
            continue;
        }
        if (vt != PK_TENSOR) return pk_error(vm, "'%s' is a Python %s, not a tensor", name, pk_type_name(vt));
        const pk_tensor *t = &vm->tensors[vm->objs[v].v.i];
        if (t->status == ST_NONCONTIG) {
            char shp[96], str[96];
            ld_format_shape(shp, sizeof shp, t->ndim, t->shape);
            ld_format_shape(str, sizeof str, t->ndim, t->stride);
            return pk_error(vm, "tensor '%s' is not contiguous (shape %s, stride %s): save it with .contiguous()",
                            name, shp, str);
        }
        if (t->status == ST_RANGE)
            return pk_error(vm, "tensor '%s' (offset %llu, %llu elements) lies outside its storage of %llu elements",
                            name, (unsigned long long)t->offset, (unsigned long long)t->numel,
                            (unsigned long long)t->storage_numel);
        if ((wb->name_bytes += l + 1) > MAX_NAME_BYTES) return pk_error(vm, "state dict names too long in total");
        if (ld_list_push(out, name, l, t->dtype, t->ndim, t->shape, t->data, t->nbytes, file))
            return pk_error(vm, "out of memory");
    }
    return 0;
}

/* A list of tensors (UIO-LLMs' checkpoint: torch.save(list_of_parameters)): entries named by position, "0", "1",
 * ...; every item must be a tensor. */
static int walk_list(pk_vm *vm, uint32_t l, const char *file, tensor_list *out) {
    const pk_obj *o = pk_at(vm, l);
    if (o->n > MAX_VISITS) return pk_error(vm, "list has too many entries (limit %u)", MAX_VISITS);
    for (uint32_t i = 0; i < o->n; i++) {
        uint32_t v = o->v.items[i];
        uint8_t vt = vm->objs[v].type;
        if (vt != PK_TENSOR) return pk_error(vm, "list item %u is a Python %s, not a tensor", i, pk_type_name(vt));
        const pk_tensor *t = &vm->tensors[vm->objs[v].v.i];
        if (t->status == ST_NONCONTIG) return pk_error(vm, "list item %u is not contiguous: save it with .contiguous()", i);
        if (t->status == ST_RANGE)
            return pk_error(vm, "list item %u (offset %llu, %llu elements) lies outside its storage of %llu elements", i,
                            (unsigned long long)t->offset, (unsigned long long)t->numel,
                            (unsigned long long)t->storage_numel);
        char name[16];
        int nl = snprintf(name, sizeof name, "%u", i);
        if (ld_list_push(out, name, (size_t)nl, t->dtype, t->ndim, t->shape, t->data, t->nbytes, file))
            return pk_error(vm, "out of memory");
    }
    return 0;
}

int torch_unpickle(const uint8_t *pkl, size_t len, torch_storage_fn storage, void *ctx, const char *file,
                   tensor_list *out, char *msg, size_t msglen) {
    tp_ctx c = {storage, ctx};
    pk_hooks hooks = {find_global, call, persistent_load, build, &c};
    pk_vm vm;
    uint32_t root;
    size_t start = out->count;
    int rc = pk_run(&vm, pkl, len, &hooks, &root);
    if (rc == 0 && vm.objs[root].type != PK_DICT && vm.objs[root].type != PK_LIST)
        rc = pk_error(&vm, "data.pkl holds a Python %s, not a state dict or a list of tensors",
                      pk_type_name(vm.objs[root].type));
    if (rc == 0 && vm.objs[root].type == PK_LIST) {
        rc = walk_list(&vm, root, file, out);
    } else if (rc == 0) {
        char name[MAX_NAME + 1];
        walk_budget wb = {0, 0};
        rc = walk(&vm, root, name, 0, 0, &wb, file, out);
    }
    if (rc) {
        snprintf(msg, msglen, "%s", vm.msg);
        ld_list_truncate(out, start);
    }
    pk_free(&vm);
    return rc;
}
