/*
 * pickle.c — the opcode loop of the safe pickle interpreter (see pickle.h). Supports the opcodes torch.save
 * emits (protocol 2) plus the common protocol 3-5 ones; anything else is an error. The stack is split at
 * MARKs like CPython's: no opcode can pop below the innermost MARK.
 */
#include "pickle.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader_util.h"

enum {
    OP_MARK = '(', OP_STOP = '.', OP_BININT = 'J', OP_BININT1 = 'K', OP_BININT2 = 'M', OP_NONE = 'N',
    OP_BINPERSID = 'Q', OP_REDUCE = 'R', OP_BINSTRING = 'T', OP_SHORT_BINSTRING = 'U', OP_BINUNICODE = 'X',
    OP_APPEND = 'a', OP_BUILD = 'b', OP_GLOBAL = 'c', OP_DICT = 'd', OP_EMPTY_DICT = '}', OP_APPENDS = 'e',
    OP_BINGET = 'h', OP_LONG_BINGET = 'j', OP_LIST = 'l', OP_EMPTY_LIST = ']', OP_BINPUT = 'q',
    OP_LONG_BINPUT = 'r', OP_SETITEM = 's', OP_TUPLE = 't', OP_EMPTY_TUPLE = ')', OP_SETITEMS = 'u',
    OP_BINFLOAT = 'G', OP_PROTO = 0x80, OP_NEWOBJ = 0x81, OP_TUPLE1 = 0x85, OP_TUPLE2 = 0x86, OP_TUPLE3 = 0x87,
    OP_NEWTRUE = 0x88, OP_NEWFALSE = 0x89, OP_LONG1 = 0x8a, OP_SHORT_BINUNICODE = 0x8c, OP_BINUNICODE8 = 0x8d,
    OP_STACK_GLOBAL = 0x93, OP_MEMOIZE = 0x94, OP_FRAME = 0x95,
};

int pk_error(pk_vm *vm, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(vm->msg, sizeof vm->msg, fmt, ap);
    va_end(ap);
    return -1;
}

const char *pk_type_name(uint8_t type) {
    static const char *const names[] = {"None", "bool", "int", "float", "str", "tuple", "list", "dict",
                                        "callable", "storage", "tensor"};
    return type < sizeof names / sizeof names[0] ? names[type] : "?";
}

/* Grows *arr (elements of size elem) to hold need elements; false past max or out of memory. */
static bool grow(void **arr, uint32_t *cap, uint32_t need, size_t elem, uint32_t max) {
    if (need <= *cap) return true;
    if (need > max) return false;
    uint64_t c = *cap ? (uint64_t)*cap * 2 : 16;
    while (c < need) c *= 2;
    if (c > max) c = max;
    void *p = realloc(*arr, (size_t)c * elem);
    if (!p) return false;
    *arr = p;
    *cap = (uint32_t)c;
    return true;
}

uint32_t pk_new(pk_vm *vm, pk_type type) {
    if (!grow((void **)&vm->objs, &vm->capobj, vm->nobj + 1, sizeof(pk_obj), PK_MAX_OBJECTS)) {
        pk_error(vm, "pickle has too many objects (limit %u) or out of memory", PK_MAX_OBJECTS);
        return PK_NIL;
    }
    pk_obj *o = &vm->objs[vm->nobj];
    memset(o, 0, sizeof *o);
    o->type = (uint8_t)type;
    return vm->nobj++;
}

int64_t pk_new_tensor(pk_vm *vm) {
    if (!grow((void **)&vm->tensors, &vm->captensors, vm->ntensors + 1, sizeof(pk_tensor), PK_MAX_OBJECTS)) {
        pk_error(vm, "pickle has too many tensors or out of memory");
        return -1;
    }
    memset(&vm->tensors[vm->ntensors], 0, sizeof(pk_tensor));
    return vm->ntensors++;
}

void pk_free(pk_vm *vm) {
    for (uint32_t i = 0; i < vm->nobj; i++) {
        uint8_t t = vm->objs[i].type;
        if (t == PK_TUPLE || t == PK_LIST || t == PK_DICT) free(vm->objs[i].v.items);
    }
    free(vm->objs);
    free(vm->stack);
    free(vm->marks);
    free(vm->memo);
    free(vm->tensors);
    vm->objs = NULL;
    vm->stack = vm->marks = vm->memo = NULL;
    vm->tensors = NULL;
    vm->nobj = vm->nstack = vm->nmarks = vm->nmemo = vm->ntensors = 0;
}

/* ---- stack */
static uint32_t floor_of(const pk_vm *vm) { return vm->nmarks ? vm->marks[vm->nmarks - 1] : 0; }

static int push(pk_vm *vm, uint32_t o) {
    if (o == PK_NIL) return -1;
    if (!grow((void **)&vm->stack, &vm->capstack, vm->nstack + 1, sizeof(uint32_t), PK_MAX_STACK))
        return pk_error(vm, "pickle stack too deep (limit %u) or out of memory", PK_MAX_STACK);
    vm->stack[vm->nstack++] = o;
    return 0;
}

static int pop(pk_vm *vm, uint32_t *o) {
    if (vm->nstack <= floor_of(vm)) return pk_error(vm, "malformed pickle: stack underflow at byte %zu", vm->pos);
    *o = vm->stack[--vm->nstack];
    return 0;
}

static int top(pk_vm *vm, uint32_t *o) {
    if (vm->nstack <= floor_of(vm)) return pk_error(vm, "malformed pickle: empty stack at byte %zu", vm->pos);
    *o = vm->stack[vm->nstack - 1];
    return 0;
}

static int pop_mark(pk_vm *vm, uint32_t *start) {
    if (!vm->nmarks) return pk_error(vm, "malformed pickle: no MARK at byte %zu", vm->pos);
    *start = vm->marks[--vm->nmarks];
    return 0;
}

/* Appends items to a container object. */
static int append_items(pk_vm *vm, uint32_t c, const uint32_t *items, uint32_t k) {
    pk_obj *o = &vm->objs[c];
    uint32_t slots = o->type == PK_DICT ? 2 * o->n : o->n;
    if (k > PK_MAX_OBJECTS || !grow((void **)&o->v.items, &o->cap, slots + k, sizeof(uint32_t), 2 * PK_MAX_OBJECTS))
        return pk_error(vm, "pickle container too large or out of memory");
    memcpy(o->v.items + slots, items, (size_t)k * sizeof(uint32_t));
    o->n += o->type == PK_DICT ? k / 2 : k;
    return 0;
}

/* Builds a tuple/list/dict from stack[start..] and replaces those items by it. */
static int collect(pk_vm *vm, pk_type type, uint32_t start) {
    uint32_t k = vm->nstack - start;
    if (type == PK_DICT && (k & 1)) return pk_error(vm, "malformed pickle: odd item count for a dict");
    uint32_t c = pk_new(vm, type);
    if (c == PK_NIL) return -1;
    if (k && append_items(vm, c, vm->stack + start, k)) return -1;
    vm->nstack = start;
    return push(vm, c);
}

/* ---- reading operands */
static const uint8_t *take(pk_vm *vm, uint64_t n) {
    if (n > vm->len - vm->pos) {
        pk_error(vm, "truncated pickle: operand of %llu bytes at byte %zu runs past the end", (unsigned long long)n,
                 vm->pos);
        return NULL;
    }
    const uint8_t *p = vm->buf + vm->pos;
    vm->pos += (size_t)n;
    return p;
}

static int push_int(pk_vm *vm, int64_t v) {
    uint32_t o = pk_new(vm, PK_INT);
    if (o == PK_NIL) return -1;
    vm->objs[o].v.i = v;
    return push(vm, o);
}

static int push_str(pk_vm *vm, uint64_t n) {
    const uint8_t *p = take(vm, n);
    if (!p) return -1;
    uint32_t o = pk_new(vm, PK_STR);
    if (o == PK_NIL) return -1;
    vm->objs[o].v.s.p = (const char *)p;
    vm->objs[o].v.s.len = n;
    return push(vm, o);
}

/* A "\n"-terminated line of a GLOBAL operand (at most 256 bytes). */
static const char *take_line(pk_vm *vm, size_t *n) {
    size_t avail = vm->len - vm->pos;
    const uint8_t *s = vm->buf + vm->pos, *nl = memchr(s, '\n', avail < 257 ? avail : 257);
    if (!nl) {
        pk_error(vm, "malformed pickle: unterminated GLOBAL name at byte %zu", vm->pos);
        return NULL;
    }
    *n = (size_t)(nl - s);
    vm->pos += *n + 1;
    return (const char *)s;
}

static int push_global(pk_vm *vm, const char *mod, size_t ml, const char *name, size_t nl) {
    int64_t kind;
    if (vm->hooks->find_global(vm, mod, ml, name, nl, &kind)) return -1;
    uint32_t o = pk_new(vm, PK_GLOBAL);
    if (o == PK_NIL) return -1;
    vm->objs[o].v.i = kind;
    return push(vm, o);
}

static int memo_put(pk_vm *vm, uint64_t idx) {
    uint32_t o;
    if (top(vm, &o)) return -1;
    /* picklers number memo slots consecutively; anything else is malformed (and would let input pick sizes) */
    if (idx > vm->nmemo)
        return pk_error(vm, "malformed pickle: memo index %llu out of sequence", (unsigned long long)idx);
    if (idx == vm->nmemo) {
        if (!grow((void **)&vm->memo, &vm->capmemo, vm->nmemo + 1, sizeof(uint32_t), PK_MAX_MEMO))
            return pk_error(vm, "pickle memo too large (limit %u) or out of memory", PK_MAX_MEMO);
        vm->nmemo++;
    }
    vm->memo[idx] = o;
    return 0;
}

static int memo_get(pk_vm *vm, uint64_t idx) {
    if (idx >= vm->nmemo)
        return pk_error(vm, "malformed pickle: memo index %llu was never set", (unsigned long long)idx);
    return push(vm, vm->memo[idx]);
}

static int do_call(pk_vm *vm) {
    uint32_t args, fn, res;
    if (pop(vm, &args) || pop(vm, &fn)) return -1;
    if (vm->objs[fn].type != PK_GLOBAL)
        return pk_error(vm, "malformed pickle: call of a %s at byte %zu", pk_type_name(vm->objs[fn].type), vm->pos);
    if (vm->hooks->call(vm, fn, args, &res)) return -1;
    return push(vm, res);
}

/* One opcode; 1 at STOP, 0 to continue, -1 on error. */
static int step(pk_vm *vm, uint32_t *result) {
    const uint8_t *p;
    uint32_t a, b, c, start;
    uint8_t op = vm->buf[vm->pos++];
    switch (op) {
    case OP_PROTO:
        if (!(p = take(vm, 1))) return -1;
        if (p[0] > 5) return pk_error(vm, "pickle protocol %u is not supported (0..5)", p[0]);
        return 0;
    case OP_FRAME: return take(vm, 8) ? 0 : -1; /* framing is only a read-ahead hint */
    case OP_STOP:
        if (pop(vm, result)) return -1;
        return 1;
    case OP_MARK:
        if (!grow((void **)&vm->marks, &vm->capmarks, vm->nmarks + 1, sizeof(uint32_t), PK_MAX_MARKS))
            return pk_error(vm, "pickle nests MARKs too deeply (limit %u)", PK_MAX_MARKS);
        vm->marks[vm->nmarks++] = vm->nstack;
        return 0;
    case OP_NONE: return push(vm, pk_new(vm, PK_NONE));
    case OP_NEWTRUE:
    case OP_NEWFALSE:
        if ((a = pk_new(vm, PK_BOOL)) == PK_NIL) return -1;
        vm->objs[a].v.i = op == OP_NEWTRUE;
        return push(vm, a);
    case OP_BININT:
        if (!(p = take(vm, 4))) return -1;
        return push_int(vm, (int32_t)ld_le32(p));
    case OP_BININT1:
        if (!(p = take(vm, 1))) return -1;
        return push_int(vm, p[0]);
    case OP_BININT2:
        if (!(p = take(vm, 2))) return -1;
        return push_int(vm, ld_le16(p));
    case OP_LONG1: {
        if (!(p = take(vm, 1))) return -1;
        uint8_t n = p[0];
        if (n > 8) return pk_error(vm, "pickle integer of %u bytes is too large", n);
        if (!(p = take(vm, n))) return -1;
        uint64_t v = 0;
        for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
        if (n && n < 8 && (p[n - 1] & 0x80)) v |= ~(uint64_t)0 << (8 * n);
        return push_int(vm, (int64_t)v);
    }
    case OP_BINFLOAT: {
        if (!(p = take(vm, 8))) return -1;
        uint64_t u = 0;
        for (int i = 0; i < 8; i++) u = (u << 8) | p[i];
        if ((a = pk_new(vm, PK_FLOAT)) == PK_NIL) return -1;
        memcpy(&vm->objs[a].v.f, &u, sizeof u);
        return push(vm, a);
    }
    case OP_SHORT_BINUNICODE:
    case OP_SHORT_BINSTRING:
        if (!(p = take(vm, 1))) return -1;
        return push_str(vm, p[0]);
    case OP_BINUNICODE:
    case OP_BINSTRING:
        if (!(p = take(vm, 4))) return -1;
        if (op == OP_BINSTRING && (ld_le32(p) & 0x80000000u)) return pk_error(vm, "pickle string of negative length");
        return push_str(vm, ld_le32(p));
    case OP_BINUNICODE8:
        if (!(p = take(vm, 8))) return -1;
        return push_str(vm, ld_le64(p));
    case OP_EMPTY_TUPLE: return push(vm, pk_new(vm, PK_TUPLE));
    case OP_EMPTY_LIST: return push(vm, pk_new(vm, PK_LIST));
    case OP_EMPTY_DICT: return push(vm, pk_new(vm, PK_DICT));
    case OP_TUPLE: return pop_mark(vm, &start) ? -1 : collect(vm, PK_TUPLE, start);
    case OP_LIST: return pop_mark(vm, &start) ? -1 : collect(vm, PK_LIST, start);
    case OP_DICT: return pop_mark(vm, &start) ? -1 : collect(vm, PK_DICT, start);
    case OP_TUPLE1:
    case OP_TUPLE2:
    case OP_TUPLE3: {
        uint32_t k = op - OP_TUPLE1 + 1;
        if (vm->nstack - floor_of(vm) < k)
            return pk_error(vm, "malformed pickle: stack underflow at byte %zu", vm->pos);
        return collect(vm, PK_TUPLE, vm->nstack - k);
    }
    case OP_APPEND:
    case OP_SETITEM: {
        uint32_t kv[2];
        pk_type want = op == OP_APPEND ? PK_LIST : PK_DICT;
        if (pop(vm, &kv[1])) return -1;
        if (op == OP_SETITEM && pop(vm, &kv[0])) return -1;
        if (top(vm, &c)) return -1;
        if (vm->objs[c].type != want)
            return pk_error(vm, "malformed pickle: %s on a %s", op == OP_APPEND ? "APPEND" : "SETITEM",
                            pk_type_name(vm->objs[c].type));
        return op == OP_APPEND ? append_items(vm, c, &kv[1], 1) : append_items(vm, c, kv, 2);
    }
    case OP_APPENDS:
    case OP_SETITEMS: {
        pk_type want = op == OP_APPENDS ? PK_LIST : PK_DICT;
        if (pop_mark(vm, &start)) return -1;
        if (start <= floor_of(vm)) return pk_error(vm, "malformed pickle: stack underflow at byte %zu", vm->pos);
        c = vm->stack[start - 1];
        uint32_t k = vm->nstack - start;
        if (vm->objs[c].type != want)
            return pk_error(vm, "malformed pickle: %s on a %s", op == OP_APPENDS ? "APPENDS" : "SETITEMS",
                            pk_type_name(vm->objs[c].type));
        if (want == PK_DICT && (k & 1)) return pk_error(vm, "malformed pickle: odd item count for a dict");
        if (k && append_items(vm, c, vm->stack + start, k)) return -1;
        vm->nstack = start;
        return 0;
    }
    case OP_BINPUT:
        if (!(p = take(vm, 1))) return -1;
        return memo_put(vm, p[0]);
    case OP_LONG_BINPUT:
        if (!(p = take(vm, 4))) return -1;
        return memo_put(vm, ld_le32(p));
    case OP_MEMOIZE: return memo_put(vm, vm->nmemo);
    case OP_BINGET:
        if (!(p = take(vm, 1))) return -1;
        return memo_get(vm, p[0]);
    case OP_LONG_BINGET:
        if (!(p = take(vm, 4))) return -1;
        return memo_get(vm, ld_le32(p));
    case OP_GLOBAL: {
        size_t ml, nl;
        const char *mod = take_line(vm, &ml), *name = mod ? take_line(vm, &nl) : NULL;
        if (!name) return -1;
        return push_global(vm, mod, ml, name, nl);
    }
    case OP_STACK_GLOBAL:
        if (pop(vm, &b) || pop(vm, &a)) return -1;
        if (vm->objs[a].type != PK_STR || vm->objs[b].type != PK_STR)
            return pk_error(vm, "malformed pickle: STACK_GLOBAL needs two strings");
        if (vm->objs[a].v.s.len > 256 || vm->objs[b].v.s.len > 256)
            return pk_error(vm, "pickle global name too long");
        return push_global(vm, vm->objs[a].v.s.p, (size_t)vm->objs[a].v.s.len, vm->objs[b].v.s.p,
                           (size_t)vm->objs[b].v.s.len);
    case OP_REDUCE:
    case OP_NEWOBJ: return do_call(vm);
    case OP_BUILD:
        if (pop(vm, &b) || top(vm, &a)) return -1;
        return vm->hooks->build(vm, a, b);
    case OP_BINPERSID:
        if (pop(vm, &a)) return -1;
        if (vm->hooks->persistent_load(vm, a, &b)) return -1;
        return push(vm, b);
    default:
        return pk_error(vm, "unsupported pickle opcode 0x%02x at byte %zu", op, vm->pos - 1);
    }
}

int pk_run(pk_vm *vm, const uint8_t *buf, size_t len, const pk_hooks *hooks, uint32_t *result) {
    memset(vm, 0, sizeof *vm);
    vm->buf = buf;
    vm->len = len;
    vm->hooks = hooks;
    while (vm->pos < vm->len) {
        int r = step(vm, result);
        if (r) return r > 0 ? 0 : -1;
    }
    return pk_error(vm, "truncated pickle: no STOP opcode");
}
