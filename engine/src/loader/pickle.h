/*
 * pickle.h — a small, safe pickle interpreter. It builds a graph of plain values (ints, strings, tuples,
 * lists, dicts) and never runs code: GLOBAL, REDUCE, NEWOBJ, BUILD and BINPERSID are handed to hooks that
 * accept only what the caller whitelists (torch_pickle.c). Every count is bounded so hostile input cannot
 * exhaust memory or time; all reads stay inside the pickle bytes.
 */
#ifndef MNEMO_PICKLE_H
#define MNEMO_PICKLE_H

#include <stddef.h>
#include <stdint.h>

#include "tensor_index.h"

#define PK_MAX_OBJECTS (1u << 22)
#define PK_MAX_STACK (1u << 20)
#define PK_MAX_MARKS (1u << 12)
#define PK_MAX_MEMO (1u << 22)
#define PK_NIL UINT32_MAX

typedef enum {
    PK_NONE, PK_BOOL, PK_INT, PK_FLOAT, PK_STR, PK_TUPLE, PK_LIST, PK_DICT, /* plain values */
    PK_GLOBAL,                                                              /* whitelisted callable; v.i = kind */
    PK_STORAGE, PK_TENSOR                                                   /* v.i = index into vm->tensors */
} pk_type;

typedef struct {
    uint8_t type;
    uint32_t n, cap;          /* TUPLE/LIST: n items; DICT: n pairs (items holds 2n: key, value, ...) */
    union {
        int64_t i;            /* BOOL (0/1), INT, GLOBAL kind, STORAGE/TENSOR record */
        double f;
        struct { const char *p; uint64_t len; } s;   /* into the pickle bytes, not NUL-terminated */
        uint32_t *items;
    } v;
} pk_obj;

/* Storage or tensor payload, filled by the hooks. */
typedef struct {
    tensor_dtype dtype;
    int32_t ndim;
    int64_t shape[TENSOR_MAX_DIMS];
    int64_t stride[TENSOR_MAX_DIMS];
    const uint8_t *data;
    uint64_t nbytes;
    uint64_t numel;
    uint64_t offset, storage_numel; /* tensor: element offset into its storage, and the storage's size */
    int status;               /* hook-defined problem found while building, reported later with a name */
} pk_tensor;

typedef struct pk_vm pk_vm;

typedef struct {
    /* GLOBAL / STACK_GLOBAL: set *kind for an allowed callable, else -1 with a message. */
    int (*find_global)(pk_vm *vm, const char *mod, size_t mlen, const char *name, size_t nlen, int64_t *kind);
    /* REDUCE and NEWOBJ: callable is a PK_GLOBAL, args any object. */
    int (*call)(pk_vm *vm, uint32_t callable, uint32_t args, uint32_t *result);
    int (*persistent_load)(pk_vm *vm, uint32_t pid, uint32_t *result);
    int (*build)(pk_vm *vm, uint32_t obj, uint32_t state);
    void *ctx;
} pk_hooks;

struct pk_vm {
    const uint8_t *buf;
    size_t len, pos;
    pk_obj *objs;
    uint32_t nobj, capobj;
    uint32_t *stack, nstack, capstack;
    uint32_t *marks, nmarks, capmarks;
    uint32_t *memo, nmemo, capmemo;
    pk_tensor *tensors;
    uint32_t ntensors, captensors;
    const pk_hooks *hooks;
    char msg[256];
};

/* Runs the pickle in buf[0..len) to STOP; *result is the object returned. 0, or -1 with vm->msg. Call
 * pk_free afterwards in both cases (the objects stay valid until then). */
int pk_run(pk_vm *vm, const uint8_t *buf, size_t len, const pk_hooks *hooks, uint32_t *result);
void pk_free(pk_vm *vm);

/* For hooks: allocate objects and tensor records (PK_NIL / -1 with vm->msg at the limit), access them, and
 * report an error (always returns -1). */
uint32_t pk_new(pk_vm *vm, pk_type type);
int64_t pk_new_tensor(pk_vm *vm);
static inline pk_obj *pk_at(pk_vm *vm, uint32_t i) { return &vm->objs[i]; }
int pk_error(pk_vm *vm, const char *fmt, ...);
const char *pk_type_name(uint8_t type);

#endif
