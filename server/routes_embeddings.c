/*
 * routes_embeddings.c — POST /v1/embeddings in the OpenAI shape:
 *   {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [floats] | "<base64>"}],
 *    "model", "usage": {"prompt_tokens", "total_tokens"}}
 * Each input is tokenized as a prompt is (BOS first) and embedded by mnemo_embed: the mean over positions of the
 * last hidden state after the final RMSNorm, L2-normalised. base64 is the little-endian float32 array, as OpenAI
 * sends it. Inputs are bounded by the slot context (--ctx); on LongLLaMA by the local window (memory is not used).
 *
 * Runs on the connection's thread in a context made for the request (sized to its longest input), one request at
 * a time: a forward pass already uses every compute thread, and concurrent requests then hold one context, not
 * one each. A request that waits longer than --timeout for its turn gets 503.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api_error.h"
#include "app.h"
#include "model_names.h"
#include "request_parse.h"
#include "text_util.h"

/* Input i's tokens, BOS first (as prompts get it); NULL when out of memory. */
static mnemo_token *input_tokens(const mnemo_model *m, const prompt_in *in, int32_t *n) {
    if (!in->is_tokens) return tokenize_alloc(m, in->text, in->text_len, true, n);
    mnemo_token bos = mnemo_model_bos(m);
    int32_t add = bos >= 0 && in->tokens[0] != bos;
    mnemo_token *t = malloc((size_t)(in->n_tokens + add) * sizeof *t);
    if (!t) return NULL;
    if (add) t[0] = bos;
    memcpy(t + add, in->tokens, (size_t)in->n_tokens * sizeof *t);
    *n = in->n_tokens + add;
    return t;
}

static json_t *vector_json(const float *v, int32_t d, bool base64) {
    if (base64) {
        unsigned char *le = malloc((size_t)d * 4);
        if (!le) return NULL;
        for (int32_t j = 0; j < d; j++) { /* little-endian float32, whatever the host */
            uint32_t u;
            memcpy(&u, &v[j], 4);
            for (int b = 0; b < 4; b++) le[4 * j + b] = (unsigned char)(u >> (8 * b));
        }
        char *s = base64_encode(le, (size_t)d * 4);
        free(le);
        json_t *o = s ? json_string(s) : NULL;
        free(s);
        return o;
    }
    json_t *a = json_array();
    for (int32_t j = 0; j < d; j++) json_array_append_new(a, json_real(v[j]));
    return a;
}

/* Waits for the embeddings turn, at most --timeout seconds (0: no limit). */
static bool take_turn(server_app *app) {
    if (app->opts.timeout_s <= 0) return pthread_mutex_lock(&app->embed_mu) == 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double t = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + app->opts.timeout_s;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    return pthread_mutex_timedlock(&app->embed_mu, &ts) == 0;
}

/* Embeds every input into data; 0, or an HTTP status with msg filled. */
static int embed_all(server_app *app, mnemo_token **toks, const int32_t *lens, int n, int32_t longest, bool base64,
                     json_t *data, char *msg, size_t msglen) {
    const mnemo_model *m = app->model;
    const int32_t d = mnemo_model_n_embd(m);
    mnemo_context_params cp = mnemo_context_default_params();
    cp.n_ctx = longest;
    cp.n_batch = app->opts.batch < longest ? app->opts.batch : longest;
    /* UIO: the decoder over raw tokens, nothing compressed (the base model's states); its contexts still need room
     * for a segment and its entries */
    const int32_t uio_min = app->uio ? app->uio_info.chunk_size + app->uio_info.num_memory : 0;
    if (cp.n_ctx < uio_min) cp.n_ctx = uio_min;
    mnemo_context *ctx = NULL;
    float *v = malloc((size_t)d * sizeof *v);
    int status = 0;
    if (!v || mnemo_context_new(app->model, &cp, &ctx) != MNEMO_OK) {
        snprintf(msg, msglen, "cannot create a context for %d tokens: %s", longest,
                 v ? mnemo_context_error(ctx) : "out of memory");
        status = 500;
    }
    for (int i = 0; !status && i < n; i++) {
        if (mnemo_embed(ctx, toks[i], lens[i], v, d) != MNEMO_OK) {
            snprintf(msg, msglen, "embedding input %d failed: %s", i, mnemo_context_error(ctx));
            status = 500;
            break;
        }
        json_t *vec = vector_json(v, d, base64);
        if (!vec) {
            snprintf(msg, msglen, "out of memory");
            status = 500;
            break;
        }
        json_t *o = json_pack("{s:s, s:i, s:o}", "object", "embedding", "index", i, "embedding", vec);
        json_array_append_new(data, o);
    }
    mnemo_context_free(ctx);
    free(v);
    return status;
}

void route_embeddings(server_app *app, const http_request *req, http_reply *rep) {
    embeddings_request r;
    api_error pe;
    parse_limits lim = {.n_vocab = app->n_vocab};
    mnemo_token **toks = NULL;
    int32_t *lens = NULL;
    if (parse_embeddings_request(req->body, req->body_len, &lim, &r, &pe) != 0) {
        reply_api_error(rep, &pe);
        goto out;
    }
    const char *model_name = NULL;
    if (model_resolve(app, r.model, &model_name) != MODEL_BASE) { /* fine-tuned models do not embed */
        reply_error(rep, 404, "model_not_found", "model", NULL, "the model '%s' does not exist (this server has '%s')",
                    r.model, app->alias);
        goto out;
    }
    const int32_t d = mnemo_model_n_embd(app->model);
    if (r.dimensions >= 0 && r.dimensions != d) {
        reply_error(rep, 400, "invalid_value", "dimensions", NULL,
                    "this model's embeddings have %d dimensions: 'dimensions' must be %d or omitted (truncation is "
                    "not supported)", d, d);
        goto out;
    }
    if (atomic_load(&app->state) >= APP_STOPPING) {
        rep->close = true;
        reply_error(rep, 503, "shutting_down", NULL, NULL, "the server is shutting down");
        goto out;
    }
    /* LongLLaMA: the local window, run with an empty memory (mnemo_embed); plain LLaMA and UIO (nothing compressed,
     * the base model's states): the slot context. */
    const int32_t limit = app->unbounded ? mnemo_model_n_ctx_train(app->model) : app->n_ctx;
    toks = calloc((size_t)r.n_inputs, sizeof *toks);
    lens = calloc((size_t)r.n_inputs, sizeof *lens);
    if (!toks || !lens) {
        reply_error(rep, 500, "out_of_memory", NULL, NULL, "out of memory");
        goto out;
    }
    int32_t longest = 1;
    long long total = 0;
    for (int i = 0; i < r.n_inputs; i++) {
        if (!(toks[i] = input_tokens(app->model, &r.inputs[i], &lens[i]))) {
            reply_error(rep, 500, "tokenizer_error", NULL, NULL, "tokenization failed");
            goto out;
        }
        if (lens[i] > limit) {
            char which[32] = "input";
            if (r.n_inputs > 1) snprintf(which, sizeof which, "input[%d]", i);
            reply_error(rep, 400, "context_length_exceeded", "input", NULL,
                        "%s has %d tokens but an embedding takes at most %d tokens (%s); shorten it", which, lens[i],
                        limit, app->unbounded ? "the LongLLaMA window: memory is not used for embeddings"
                                              : "the context, --ctx");
            goto out;
        }
        if (lens[i] > longest) longest = lens[i];
        total += lens[i];
    }
    if (!take_turn(app)) {
        reply_error(rep, 503, "overloaded", NULL, NULL,
                    "another embeddings request held the model longer than the time limit (%g s, --timeout)",
                    app->opts.timeout_s);
        goto out;
    }
    json_t *data = json_array();
    char msg[512];
    int status = embed_all(app, toks, lens, r.n_inputs, longest, r.base64, data, msg, sizeof msg);
    pthread_mutex_unlock(&app->embed_mu);
    if (status) {
        json_decref(data);
        reply_error(rep, status, "embedding_failed", NULL, NULL, "%s", msg);
        goto out;
    }
    json_t *o = json_pack("{s:s, s:o, s:o, s:{s:I, s:I}}", "object", "list", "data", data, "model",
                          json_text(model_name, strlen(model_name)), "usage", "prompt_tokens", (json_int_t)total,
                          "total_tokens", (json_int_t)total);
    reply_json(rep, 200, o);
out:
    for (int i = 0; toks && i < r.n_inputs; i++) free(toks[i]);
    free(toks);
    free(lens);
    embeddings_request_free(&r);
}
