/*
 * export_api.c — mnemo_export_merged: a checkpoint directory with a LoRA adapter merged into its weights,
 * W' = W + (alpha/r) B A for every adapted projection, each weight kept in its stored dtype (bf16/f16 rounded to
 * nearest even once, after the sum in fp32), everything else copied byte for byte into one model.safetensors with
 * the base's config.json and tokenizer files beside it — a plain LlamaForCausalLM directory that mnemo and
 * transformers load.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine_impl.h"
#include "log.h"
#include "lora.h"
#include "safetensors_write.h"

static mnemo_status fail(char *err, size_t errlen, mnemo_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return st;
}

/* Copies dir/name to out/name when it exists. 0, or -1 on an I/O error. */
static int copy_if_present(const char *dir, const char *out, const char *name) {
    char src[4200], dst[4200];
    snprintf(src, sizeof src, "%s/%s", dir, name);
    snprintf(dst, sizeof dst, "%s/%s", out, name);
    FILE *in = fopen(src, "rb");
    if (!in) return errno == ENOENT ? 0 : -1;
    FILE *o = fopen(dst, "wb");
    int rc = o ? 0 : -1;
    char buf[65536];
    for (size_t n; rc == 0 && (n = fread(buf, 1, sizeof buf, in)) > 0;) rc = fwrite(buf, 1, n, o) == n ? 0 : -1;
    if (ferror(in)) rc = -1;
    fclose(in);
    if (o && fclose(o) != 0) rc = -1;
    return rc;
}

/* The (layer, target) a checkpoint tensor name is, or -1. */
static int target_of(const char *name, int32_t *layer) {
    char mod[32], block[16];
    int end = 0;
    if (sscanf(name, "model.layers.%d.%15[a-z_].%31[a-z_].weight%n", layer, block, mod, &end) != 3 || name[end])
        return -1;
    return lora_target_parse(mod);
}

mnemo_status mnemo_export_merged(const char *model_dir, const char *adapter_dir, const char *out_dir, char *err,
                                 size_t errlen) {
    if (!model_dir || !adapter_dir || !out_dir || !err || !errlen) return MNEMO_ERR_INVALID_ARG;
    struct stat a, b;
    if (stat(out_dir, &b) == 0 && stat(model_dir, &a) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        return fail(err, errlen, MNEMO_ERR_INVALID_ARG, "the output directory %s is the model's own: choose another",
                    out_dir);
    model_config cfg;
    if (model_config_load(model_dir, &cfg, err, errlen) != 0) return MNEMO_ERR_FORMAT;
    lora_adapter ad;
    if (lora_load(&ad, adapter_dir, &cfg, kern_cpu_backend(), err, errlen) != 0) return MNEMO_ERR_FORMAT;
    weight_store *ws = NULL;
    mnemo_status st = MNEMO_OK;
    size_t n = 0;
    st_tensor *ts = NULL;
    void **merged = NULL;
    if (weight_store_open(model_dir, &ws, err, errlen) != 0) {
        st = MNEMO_ERR_FORMAT;
        goto out;
    }
    n = weight_store_count(ws);
    ts = calloc(n, sizeof *ts);
    merged = calloc(n, sizeof *merged);
    if (!ts || !merged) {
        st = fail(err, errlen, MNEMO_ERR_NOMEM, "out of memory");
        goto out;
    }
    int done = 0;
    for (size_t i = 0; i < n; i++) {
        const tensor_entry *e = weight_store_at(ws, i);
        ts[i] = (st_tensor){e->name, e->dtype, e->ndim, e->shape, e->data};
        int32_t l = -1;
        int t = target_of(e->name, &l);
        const lora_pair *p = t >= 0 && l >= 0 && l < ad.n_layer ? lora_pair_at(&ad, l, (lora_target)t) : NULL;
        if (!p) continue;
        int64_t rows, cols, r = ad.r;
        lora_target_shape(&cfg, (lora_target)t, &rows, &cols);
        kern_dtype kd;
        if (e->ndim != 2 || e->shape[0] != rows || e->shape[1] != cols || tensor_dtype_to_kern(e->dtype, &kd)) {
            st = fail(err, errlen, MNEMO_ERR_FORMAT, "%s: %s is not a [%lld, %lld] F32/F16/BF16 matrix as config.json "
                      "says", model_dir, e->name, (long long)rows, (long long)cols);
            goto out;
        }
        merged[i] = malloc((size_t)(rows * cols) * tensor_dtype_size(e->dtype));
        if (!merged[i]) {
            st = fail(err, errlen, MNEMO_ERR_NOMEM, "out of memory merging %s", e->name);
            goto out;
        }
        float *wide = e->dtype == TENSOR_F32 ? merged[i] : malloc((size_t)(rows * cols) * sizeof(float));
        if (!wide) {
            st = fail(err, errlen, MNEMO_ERR_NOMEM, "out of memory merging %s", e->name);
            goto out;
        }
        kern_cpu_widen(wide, e->data, kd, rows * cols);
        for (int64_t o = 0; o < rows; o++) /* fp32: W + (sB) A */
            for (int64_t j = 0; j < cols; j++)
                for (int64_t q = 0; q < r; q++) wide[o * cols + j] += p->b[o * r + q] * p->a[q * cols + j];
        for (size_t at = 0; e->dtype != TENSOR_F32 && at < (size_t)(rows * cols); at++)
            ((uint16_t *)merged[i])[at] = e->dtype == TENSOR_BF16 ? kern_f32_to_bf16(wide[at]) : kern_f32_to_f16(wide[at]);
        if (wide != merged[i]) free(wide);
        ts[i].data = merged[i];
        done++;
    }
    if (done != ad.n_layer * __builtin_popcount(ad.targets)) {
        st = fail(err, errlen, MNEMO_ERR_FORMAT, "%s: %d of the adapter's %d projections found among the weights",
                  model_dir, done, ad.n_layer * __builtin_popcount(ad.targets));
        goto out;
    }
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) {
        st = fail(err, errlen, MNEMO_ERR_IO, "%s: cannot create: %s", out_dir, strerror(errno));
        goto out;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
    const char *meta[] = {"format", "pt"};
    if (safetensors_write(path, ts, n, meta, 1, err, errlen) != 0) {
        st = MNEMO_ERR_IO;
        goto out;
    }
    static const char *const side[] = {"config.json", "tokenizer.model", "tokenizer_config.json",
                                       "generation_config.json", "special_tokens_map.json"};
    for (size_t i = 0; i < sizeof side / sizeof *side; i++)
        if (copy_if_present(model_dir, out_dir, side[i]) != 0) {
            st = fail(err, errlen, MNEMO_ERR_IO, "%s/%s: cannot copy: %s", out_dir, side[i], strerror(errno));
            goto out;
        }
    mnemo_log(MNEMO_LOG_INFO, "exported %s + %s merged (%d projections) to %s", model_dir, adapter_dir, done, out_dir);
out:
    for (size_t i = 0; merged && i < n; i++) free(merged[i]);
    free(merged);
    free(ts);
    weight_store_close(ws);
    lora_free(&ad);
    return st;
}
