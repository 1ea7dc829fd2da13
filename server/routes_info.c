/*
 * routes_info.c — the endpoints that do not generate: /health, /v1/models, /props, /metrics, /tokenize,
 * /detokenize. Tokenizer calls are thread-safe on the shared model, so these run on the connection's thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api_error.h"
#include "app.h"
#include "model_names.h"
#include "request_parse.h"
#include "text_util.h"

void route_health(server_app *app, const http_request *req, http_reply *rep) {
    int st = atomic_load(&app->state);
    if (st == APP_LOADING) {
        reply_error(rep, 503, "loading", NULL, NULL, "the model is still loading");
        return;
    }
    if (st >= APP_STOPPING) {
        reply_error(rep, 503, "shutting_down", NULL, NULL, "the server is shutting down");
        return;
    }
    json_t *o = json_object();
    json_object_set_new(o, "status", json_string("ok"));
    reply_json(rep, 200, o);
}

static json_t *model_object(server_app *app, const char *name) {
    json_t *m = json_object();
    json_object_set_new(m, "id", json_text(name, strlen(name)));
    json_object_set_new(m, "object", json_string("model"));
    json_object_set_new(m, "created", json_integer(app->created));
    json_object_set_new(m, "owned_by", json_string("mnemo"));
    if (atomic_load(&app->state) != APP_LOADING) { /* the model pointer is published by the state change */
        json_t *meta = json_object();
        json_object_set_new(meta, "n_vocab", json_integer(mnemo_model_n_vocab(app->model)));
        json_object_set_new(meta, "n_ctx_train", json_integer(mnemo_model_n_ctx_train(app->model)));
        json_object_set_new(meta, "n_ctx", json_integer(app->n_ctx));
        json_object_set_new(meta, "n_layer", json_integer(mnemo_model_n_layer(app->model)));
        json_object_set_new(meta, "n_embd", json_integer(mnemo_model_n_embd(app->model)));
        const char *d = mnemo_model_desc(app->model);
        json_object_set_new(meta, "desc", json_text(d, strlen(d)));
        json_object_set_new(m, "meta", meta);
    }
    return m;
}

void route_models(server_app *app, const http_request *req, http_reply *rep) {
    json_t *o = json_object();
    json_object_set_new(o, "object", json_string("list"));
    json_t *data = json_array();
    for (int i = 0; i < app->n_aliases; i++) json_array_append_new(data, model_object(app, app->aliases[i]));
    if (app->jobs) ft_jobs_models(app->jobs, data, app->created);
    json_object_set_new(o, "data", data);
    reply_json(rep, 200, o);
}

void route_model_get(server_app *app, const http_request *req, http_reply *rep) {
    const char *id = req->path + strlen("/v1/models/");
    if (!model_is_alias(app, id) && app->jobs) { /* a fine-tuned model? */
        json_t *all = json_array();
        ft_jobs_models(app->jobs, all, app->created);
        size_t i;
        json_t *m;
        json_array_foreach(all, i, m) {
            if (!strcmp(json_string_value(json_object_get(m, "id")), id)) {
                reply_json(rep, 200, json_incref(m));
                json_decref(all);
                return;
            }
        }
        json_decref(all);
    }
    if (!model_is_alias(app, id)) {
        reply_error(rep, 404, "model_not_found", "model", NULL, "the model '%s' does not exist (this server has '%s')",
                    id, app->alias);
        return;
    }
    reply_json(rep, 200, model_object(app, id));
}

json_t *memory_json(const mnemo_memory_stats *m) {
    return json_pack("{s:I, s:I, s:I, s:I, s:I}", "local_kv_bytes", (json_int_t)m->local_kv_bytes,
                     "memory_key_bytes", (json_int_t)m->mem_key_bytes, "memory_value_bytes",
                     (json_int_t)m->mem_value_bytes, "index_bytes", (json_int_t)m->mem_index_bytes, "memory_tokens",
                     (json_int_t)m->mem_tokens);
}

/* A UIO model's settings and its memory over all slots: compressed (<mem> entries) vs raw KV, in bytes. */
static json_t *uio_json(const server_app *app, const sched_stats *ss) {
    const mnemo_uio_info *u = &app->uio_info;
    const int64_t row = ss->kv_capacity ? ss->kv_bytes / ss->kv_capacity : 0; /* one position, all layers, K + V */
    return json_pack("{s:i, s:i, s:i, s:i, s:f, s:i, s:i, s:i, s:s, s:I, s:I, s:I, s:i}", "chunk_size",
                     u->chunk_size, "num_memory", u->num_memory, "ratio", u->chunk_size / u->num_memory, "lora_rank",
                     u->lora_rank, "lora_alpha", u->lora_alpha, "keep_raw", app->opts.uio_keep_raw, "mem_budget",
                     app->opts.uio_mem_budget, "encode_batch", app->opts.uio_encode_batch, "weights_file", u->file,
                     "memory_entries", (json_int_t)ss->memory.mem_entries, "compressed_bytes",
                     (json_int_t)(ss->memory.mem_key_bytes + ss->memory.mem_value_bytes), "raw_kv_bytes",
                     (json_int_t)((int64_t)ss->memory.local_tokens * row), "raw_tokens", ss->memory.local_tokens);
}

void route_props(server_app *app, const http_request *req, http_reply *rep) {
    const server_opts *o = &app->opts;
    sched_stats ss;
    sched_get_stats(app->sched, &ss);
    json_t *gen = json_object();
    mnemo_sampler_params sp = mnemo_sampler_default_params();
    json_object_set_new(gen, "n_ctx", json_integer(app->n_ctx));
    json_object_set_new(gen, "max_tokens", json_integer(16));
    json_object_set_new(gen, "temperature", json_real(sp.temperature));
    json_object_set_new(gen, "top_k", json_integer(sp.top_k));
    json_object_set_new(gen, "top_p", json_real(sp.top_p));
    json_object_set_new(gen, "min_p", json_real(sp.min_p));
    json_object_set_new(gen, "repetition_penalty", json_real(sp.repetition_penalty));
    json_object_set_new(gen, "presence_penalty", json_real(sp.presence_penalty));
    json_object_set_new(gen, "frequency_penalty", json_real(sp.frequency_penalty));
    json_object_set_new(gen, "penalty_last_n", json_integer(sp.penalty_last_n));
    json_t *p = json_object();
    json_object_set_new(p, "default_generation_settings", gen);
    json_object_set_new(p, "model_alias", json_text(app->alias, strlen(app->alias)));
    json_object_set_new(p, "model_desc", json_text(mnemo_model_desc(app->model), strlen(mnemo_model_desc(app->model))));
    json_object_set_new(p, "n_ctx", json_integer(app->n_ctx));
    json_object_set_new(p, "n_ctx_train", json_integer(mnemo_model_n_ctx_train(app->model)));
    json_object_set_new(p, "total_slots", json_integer(o->parallel));
    json_object_set_new(p, "slots_busy", json_integer(ss.slots_busy));
    json_object_set_new(p, "requests_waiting", json_integer(ss.waiting));
    json_object_set_new(p, "queue_size", json_integer(o->queue));
    json_object_set_new(p, "batch_tokens", json_integer(o->batch));
    json_object_set_new(p, "memory", memory_json(&ss.memory)); /* by kind, over all slots */
    json_object_set_new(p, "memory_kind", json_string(app->retrieval ? "retrieval" : app->uio ? "uio"
                                                      : app->unbounded ? "longllama" : "none"));
    if (app->retrieval) /* rows and bytes are in "memory" with the others */
        json_object_set_new(p, "retrieval", json_pack("{s:i, s:i, s:i, s:i, s:i, s:s}", "sinks", o->ret_sinks, "window",
                                                      o->ret_window, "topk", o->ret_topk, "block", o->ret_block,
                                                      "reps", o->ret_reps, "dtype", o->ret_dtype));
    if (app->uio) json_object_set_new(p, "uio", uio_json(app, &ss));
    if (mnemo_model_has_memory(app->model)) { /* how LongLLaMA memory layers read their memory */
        mnemo_mem_index index = mnemo_mem_index_resolve(app->model, app->mem_index);
        bool knn = o->mem_knn > 0;
        const char *mode = !knn ? "dense" : o->mem_dense_rows > 0 ? "dense_then_knn" : "knn";
        json_t *ma = json_pack("{s:s, s:i}", "mode", mode, "knn_k", o->mem_knn);
        if (knn) {
            json_object_set_new(ma, "dense_rows", json_integer(o->mem_dense_rows)); /* dense up to here */
            json_object_set_new(ma, "index", json_string(mnemo_mem_index_name(index))); /* auto: what it became */
            if (index == MNEMO_MEM_INDEX_IVF || index == MNEMO_MEM_INDEX_IVF_GROW) /* cells scanned */
                json_object_set_new(ma, "nprobe", json_integer(o->mem_nprobe ? o->mem_nprobe : 16));
        }
        json_object_set_new(p, "memory_attention", ma);
    }
    mnemo_memory_stats sm;
    int n_sessions;
    sessions_totals(app->sessions, &sm, &n_sessions);
    json_object_set_new(p, "sessions", json_pack("{s:i, s:i, s:I, s:b, s:o}", "live", n_sessions, "max",
                                                 o->max_sessions, "max_bytes_each", (json_int_t)o->session_max_bytes,
                                                 "snapshots", o->session_dir != NULL, "memory", memory_json(&sm)));
    json_object_set_new(p, "timeout_s", json_real(o->timeout_s));
    json_object_set_new(p, "max_body_bytes", json_integer((json_int_t)o->max_body));
    json_object_set_new(p, "chat_template", json_string(mnemo_chat_template_name(app->tmpl)));
    json_object_set_new(p, "api_key_required", json_boolean(o->api_key != NULL));
    json_object_set_new(p, "build_info", json_string("mnemo-server 0.1.0"));
    json_t *adapters = json_array(); /* fine-tuned models served over the base weights */
    if (app->jobs) ft_jobs_models(app->jobs, adapters, app->created);
    json_object_set_new(p, "adapters", adapters);
    json_object_set_new(p, "fine_tuning", json_boolean(app->jobs != NULL));
    reply_json(rep, 200, p);
}

static long long rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long long pages = 0, rss = 0;
    if (f) {
        if (fscanf(f, "%lld %lld", &pages, &rss) != 2) rss = 0;
        fclose(f);
    }
    return rss * sysconf(_SC_PAGESIZE);
}

void route_metrics(server_app *app, const http_request *req, http_reply *rep) {
    bool loading = atomic_load(&app->state) == APP_LOADING;
    metrics_gauges g = {.kv_bytes = -1, .rss_bytes = rss_bytes(), .loading = loading};
    if (!loading) {
        sched_stats ss;
        sched_get_stats(app->sched, &ss);
        g.slots_total = ss.slots_total;
        g.slots_busy = ss.slots_busy;
        g.requests_waiting = ss.waiting;
        g.kv_tokens_used = ss.kv_used;
        g.kv_tokens_capacity = ss.kv_capacity;
        g.kv_bytes = ss.kv_bytes;
        g.have_memory = true;
        g.memory = ss.memory;
        g.uio = app->uio;
        g.kv_row_bytes = ss.kv_capacity ? ss.kv_bytes / ss.kv_capacity : 0;
        g.have_sessions = true;
        g.sessions_max = app->opts.max_sessions;
        sessions_totals(app->sessions, &g.session_memory, &g.sessions);
    }
    if (app->jobs) {
        ft_jobs_stats fs;
        ft_jobs_get_stats(app->jobs, &fs);
        g.have_jobs = true;
        memcpy(g.jobs_by_status, fs.by_status, sizeof g.jobs_by_status);
        g.train_tokens_per_s = fs.tokens_per_s;
        g.train_steps = fs.steps;
        g.adapters_loaded = fs.adapters_loaded;
    }
    if (app->http && app->http_stats) {
        http_stats hs;
        app->http_stats(app->http, &hs);
        g.have_http = true;
        g.http_open = hs.open;
        g.http_waiting_headers = hs.waiting_headers;
        g.http_refused_full = hs.refused_full;
        g.http_dropped_waiting = hs.dropped_waiting;
        g.http_refused_at_door = hs.refused_at_door;
        g.http_evicted_idle = hs.evicted_idle;
        g.http_body_bytes = (int64_t)hs.body_bytes_inflight;
    }
    uint64_t len = 0;
    char *text = metrics_render(app->mx, &g, &len);
    if (!text) {
        reply_error(rep, 500, "out_of_memory", NULL, NULL, "out of memory rendering metrics");
        return;
    }
    rep->status = 200;
    rep->content_type = "text/plain; version=0.0.4; charset=utf-8";
    rep->body = text;
    rep->body_len = (size_t)len;
}

/* One /tokenize item with its piece, as llama.cpp writes it: the piece as a string when it is valid UTF-8, else
 * its bytes. */
static void append_piece_item(strbuf *b, const mnemo_model *m, mnemo_token id) {
    char piece[256];
    size_t len = token_text(m, id, piece, sizeof piece);
    json_t *o = json_object();
    json_object_set_new(o, "id", json_integer(id));
    if (utf8_valid_prefix(piece, len) == len) {
        json_object_set_new(o, "piece", json_stringn(piece, len));
    } else {
        json_t *bytes = json_array();
        for (size_t k = 0; k < len; k++) json_array_append_new(bytes, json_integer((unsigned char)piece[k]));
        json_object_set_new(o, "piece", bytes);
    }
    char *text = json_dumps(o, JSON_COMPACT);
    if (text) sb_puts(b, text);
    else b->failed = true;
    free(text);
    json_decref(o);
}

/* The reply is written as text token by token: a JSON value per token would hold ~40 bytes each. */
void route_tokenize(server_app *app, const http_request *req, http_reply *rep) {
    tokenize_request r;
    api_error pe;
    if (parse_tokenize_request(req->body, req->body_len, &r, &pe) != 0) {
        reply_api_error(rep, &pe);
        tokenize_request_free(&r);
        return;
    }
    int32_t n = 0;
    mnemo_token *t = tokenize_alloc(app->model, r.content, r.len, r.add_special, &n);
    if (!t) {
        reply_error(rep, 500, "tokenizer_error", NULL, NULL, "tokenization failed");
        tokenize_request_free(&r);
        return;
    }
    int64_t limit = app->opts.max_prompt_tokens;
    if (limit > 0 && n > limit) {
        free(t);
        tokenize_request_free(&r);
        reply_error(rep, 413, "request_too_large", "content", NULL,
                    "the text has %d tokens, more than this server takes in one request (--max-prompt-tokens %lld)",
                    n, (long long)limit);
        return;
    }
    strbuf b = {0};
    sb_puts(&b, "{\"tokens\":[");
    for (int32_t i = 0; i < n && !b.failed; i++) {
        if (i) sb_puts(&b, ",");
        if (r.with_pieces) append_piece_item(&b, app->model, t[i]);
        else sb_printf(&b, "%d", t[i]);
    }
    sb_puts(&b, "]}");
    free(t);
    tokenize_request_free(&r);
    if (b.failed) {
        sb_free(&b);
        reply_error(rep, 500, "out_of_memory", NULL, NULL, "out of memory writing the tokens");
        return;
    }
    rep->status = 200;
    rep->content_type = "application/json";
    rep->body = b.data;
    rep->body_len = b.len;
}

void route_detokenize(server_app *app, const http_request *req, http_reply *rep) {
    detokenize_request r;
    api_error pe;
    parse_limits lim = {.n_vocab = app->n_vocab};
    if (parse_detokenize_request(req->body, req->body_len, &lim, &r, &pe) != 0) {
        reply_api_error(rep, &pe);
        detokenize_request_free(&r);
        return;
    }
    size_t cap = (size_t)r.n * 16 + 16, len = 0;
    char *out = malloc(cap);
    mnemo_status st = out ? (r.n ? mnemo_detokenize(app->model, r.tokens, r.n, out, cap, &len) : MNEMO_OK)
                          : MNEMO_ERR_NOMEM;
    if (st == MNEMO_ERR_TOO_SMALL) {
        char *p = realloc(out, len + 1);
        if (p) {
            out = p;
            st = mnemo_detokenize(app->model, r.tokens, r.n, out, len + 1, &len);
        } else {
            st = MNEMO_ERR_NOMEM;
        }
    }
    detokenize_request_free(&r);
    if (st != MNEMO_OK) {
        free(out);
        reply_error(rep, st == MNEMO_ERR_INVALID_ARG ? 400 : 500, NULL, "tokens", NULL, "detokenization failed: %s",
                    mnemo_status_str(st));
        return;
    }
    json_t *o = json_object();
    json_object_set_new(o, "content", json_text(out, len));
    free(out);
    reply_json(rep, 200, o);
}
