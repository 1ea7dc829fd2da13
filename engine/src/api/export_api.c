/*
 * export_api.c — mnemo_export_merged: a checkpoint directory with a LoRA adapter merged into its weights,
 * W' = W + (alpha/r) B A for every adapted projection, each weight kept in its stored dtype (bf16/f16 rounded to
 * nearest even once, after the sum in fp32), everything else copied byte for byte into one model.safetensors with
 * the base's config.json and tokenizer files beside it — a plain LlamaForCausalLM directory that mnemo and
 * transformers load.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine_impl.h"
#include "errbuf.h"
#include "log.h"
#include "checkpoint_side_files.h"
#include "lora.h"
#include "safetensors_write.h"

/* The (layer, target) a checkpoint tensor name is, or -1. */
static int target_of(const char *name, int32_t *layer) {
    char mod[32], block[16];
    int end = 0;
    if (sscanf(name, "model.layers.%d.%15[a-z_].%31[a-z_].weight%n", layer, block, mod, &end) != 3 || name[end])
        return -1;
    return lora_target_parse(mod);
}

/* LoRA+ (trainable_params.safetensors beside the adapter): each trained base tensor (fp32) replaces the checkpoint's,
 * rounded to its dtype once. merged[i] receives the new bytes of tensor i; *img the file image ts may point into. */
static mnemo_status merge_trainable_params(const char *adapter_dir, const char *model_dir, st_tensor *ts, size_t n,
                                           void **merged, uint8_t **img, char *err, size_t errlen) {
    char path[4200];
    snprintf(path, sizeof path, "%s/trainable_params.safetensors", adapter_dir);
    FILE *f = fopen(path, "rb");
    if (!f && errno == ENOENT) return MNEMO_OK;
    if (!f) return errbuf_fail(err, errlen, "%s: %s", path, strerror(errno)), MNEMO_ERR_IO;
    size_t len = 0, cap = 0;
    for (size_t got = 1; got > 0;) {
        if (len == cap) {
            uint8_t *b = realloc(*img, cap = cap ? 2 * cap : 1 << 20);
            if (!b) {
                fclose(f);
                return errbuf_fail(err, errlen, "out of memory reading %s", path), MNEMO_ERR_NOMEM;
            }
            *img = b;
        }
        got = fread(*img + len, 1, cap - len, f);
        len += got;
    }
    fclose(f);
    tensor_list tl = {0};
    if (safetensors_parse(*img, len, path, &tl, err, errlen) != 0) return MNEMO_ERR_FORMAT;
    mnemo_status st = MNEMO_OK;
    for (size_t k = 0; k < tl.count && st == MNEMO_OK; k++) {
        const tensor_entry *e = &tl.items[k];
        size_t i = 0;
        while (i < n && strcmp(ts[i].name, e->name)) i++;
        bool same_shape = i < n && e->ndim == ts[i].ndim && e->dtype == TENSOR_F32;
        for (int32_t d = 0; same_shape && d < e->ndim; d++) same_shape = e->shape[d] == ts[i].shape[d];
        if (!same_shape) {
            errbuf_fail(err, errlen, "%s: %s is %s in %s", path, e->name,
                        i < n ? "not an F32 tensor of the checkpoint's shape" : "not a tensor", model_dir);
            st = MNEMO_ERR_FORMAT;
            break;
        }
        size_t numel = (size_t)(e->nbytes / 4);
        if (ts[i].dtype == TENSOR_F32) {
            ts[i].data = e->data; /* the file image outlives the write */
            continue;
        }
        uint16_t *narrow = malloc(numel * sizeof *narrow);
        if (!narrow) {
            errbuf_fail(err, errlen, "out of memory");
            st = MNEMO_ERR_NOMEM;
            break;
        }
        const float *src = e->data;
        for (size_t j = 0; j < numel; j++)
            narrow[j] = ts[i].dtype == TENSOR_BF16 ? kern_f32_to_bf16(src[j]) : kern_f32_to_f16(src[j]);
        free(merged[i]);
        merged[i] = narrow;
        ts[i].data = narrow;
    }
    tensor_list_free(&tl);
    return st;
}

mnemo_status mnemo_export_merged(const char *model_dir, const char *adapter_dir, const char *out_dir, char *err,
                                 size_t errlen) {
    if (!model_dir || !adapter_dir || !out_dir || !err || !errlen) return MNEMO_ERR_INVALID_ARG;
    struct stat a, b;
    if (stat(out_dir, &b) == 0 && stat(model_dir, &a) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        return errbuf_fail(err, errlen, "the output directory %s is the model's own: choose another", out_dir),
               MNEMO_ERR_INVALID_ARG;
    model_config cfg;
    if (model_config_load(model_dir, &cfg, err, errlen) != 0) return MNEMO_ERR_FORMAT;
    lora_adapter ad;
    if (lora_load_for_merge(&ad, adapter_dir, &cfg, err, errlen) != 0) return MNEMO_ERR_FORMAT;
    weight_store *ws = NULL;
    uint8_t *extra_img = NULL;
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
        errbuf_fail(err, errlen, "out of memory");
        st = MNEMO_ERR_NOMEM;
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
            errbuf_fail(err, errlen, "%s: %s is not a [%lld, %lld] F32/F16/BF16 matrix as config.json "
                        "says", model_dir, e->name, (long long)rows, (long long)cols);
            st = MNEMO_ERR_FORMAT;
            goto out;
        }
        merged[i] = malloc((size_t)(rows * cols) * tensor_dtype_size(e->dtype));
        if (!merged[i]) {
            errbuf_fail(err, errlen, "out of memory merging %s", e->name);
            st = MNEMO_ERR_NOMEM;
            goto out;
        }
        float *wide = e->dtype == TENSOR_F32 ? merged[i] : malloc((size_t)(rows * cols) * sizeof(float));
        if (!wide) {
            errbuf_fail(err, errlen, "out of memory merging %s", e->name);
            st = MNEMO_ERR_NOMEM;
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
        errbuf_fail(err, errlen, "%s: %d of the adapter's %d projections found among the weights",
                    model_dir, done, ad.n_layer * __builtin_popcount(ad.targets));
        st = MNEMO_ERR_FORMAT;
        goto out;
    }
    if ((st = merge_trainable_params(adapter_dir, model_dir, ts, n, merged, &extra_img, err, errlen)) != MNEMO_OK) goto out;
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) {
        errbuf_fail(err, errlen, "%s: cannot create: %s", out_dir, strerror(errno));
        st = MNEMO_ERR_IO;
        goto out;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
    const char *meta[] = {"format", "pt"};
    if (safetensors_write(path, ts, n, meta, 1, err, errlen) != 0) {
        st = MNEMO_ERR_IO;
        goto out;
    }
    /* then the adapter's own config.json, when training wrote one (position interpolation: mnemo train --rope-scale) */
    if (checkpoint_copy_side_files(model_dir, out_dir, err, errlen) != 0 ||
        checkpoint_copy_side_files(adapter_dir, out_dir, err, errlen) != 0) {
        st = MNEMO_ERR_IO;
        goto out;
    }
    mnemo_log(MNEMO_LOG_INFO, "exported %s + %s merged (%d projections) to %s", model_dir, adapter_dir, done, out_dir);
out:
    for (size_t i = 0; merged && i < n; i++) free(merged[i]);
    free(merged);
    free(ts);
    free(extra_img);
    weight_store_close(ws);
    lora_free(&ad);
    return st;
}
