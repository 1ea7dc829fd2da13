/*
 * adapter_api.c — mnemo_adapter_*: a peft LoRA adapter loaded for one model (engine/src/model/lora.c), and the
 * context's choice of adapter.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_impl.h"
#include "log.h"
#include "lora.h"

struct mnemo_adapter {
    const mnemo_model *model;
    bool failed;
    lora_adapter lora;
    char err[MNEMO_ERRLEN];
};

mnemo_status mnemo_adapter_load(const mnemo_model *model, const char *dir, mnemo_adapter **out) {
    if (!out) return MNEMO_ERR_INVALID_ARG;
    mnemo_adapter *a = calloc(1, sizeof *a);
    *out = a;
    if (!a) return MNEMO_ERR_NOMEM;
    a->model = model;
    a->failed = true;
    if (!model || model->failed || !dir) {
        snprintf(a->err, sizeof a->err, "an adapter needs a successfully loaded model and a directory");
        return MNEMO_ERR_MISUSE;
    }
    if (model->vocab_only) {
        snprintf(a->err, sizeof a->err, "the model was loaded as a vocabulary only: it has no weights to adapt");
        return MNEMO_ERR_UNSUPPORTED;
    }
    if (lora_load(&a->lora, dir, &model->cfg, model->be, a->err, sizeof a->err) != 0) {
        mnemo_log(MNEMO_LOG_ERROR, "%s", a->err);
        return strstr(a->err, "out of") ? MNEMO_ERR_NOMEM : MNEMO_ERR_FORMAT;
    }
    a->failed = false;
    mnemo_log(MNEMO_LOG_INFO, "adapter %s: LoRA r %d, scale %g, %d targets", dir, a->lora.r, (double)a->lora.scale,
              __builtin_popcount(a->lora.targets));
    return MNEMO_OK;
}

const char *mnemo_adapter_error(const mnemo_adapter *a) { return a ? a->err : "no adapter"; }

void mnemo_adapter_free(mnemo_adapter *a) {
    if (!a) return;
    lora_free(&a->lora);
    free(a);
}

mnemo_status mnemo_context_set_adapter(mnemo_context *ctx, const mnemo_adapter *a) {
    if (!ctx || ctx->failed) return MNEMO_ERR_MISUSE;
    if (a && (a->failed || a->model != ctx->model))
        return ctx_fail(ctx, MNEMO_ERR_MISUSE, "the adapter %s", a->failed ? "failed to load" : "belongs to another model");
    if (a && forward_buffers_reserve_lora(&ctx->fb, a->lora.r) != 0)
        return ctx_fail(ctx, MNEMO_ERR_NOMEM, "out of memory for an adapter of rank %d", a->lora.r);
    mnemo_context_reset(ctx);
    ctx->lora = a ? &a->lora : NULL;
    return MNEMO_OK;
}
