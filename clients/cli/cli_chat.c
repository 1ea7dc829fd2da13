/*
 * cli_chat.c — `mnemo chat`: an interactive conversation with a model through its chat template, as llama-cli -cnv.
 *
 * Each line read from standard input is a user turn; the answer streams to standard output. The whole conversation
 * is rendered again every turn (the template decides the framing) and the context keeps the prefix it already holds
 * (mnemo_context_keep_prefix), so a turn costs its own tokens, not the conversation's. "/reset" starts over, "/exit"
 * or the end of input ends. On a terminal a "> " prompt is shown.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_args.h"
#include "cli_log.h"
#include "engine.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: mnemo chat [--model DIR|FILE.gguf] [options]   (then one user message per line on stdin)\n\n"
            "  --model DIR           checkpoint directory or GGUF file (default: $MNEMO_MODEL, else SmolLM2-135M-Instruct)\n"
            "  --system TEXT         a system message first\n"
            "  --adapter DIR         answer through a peft LoRA adapter (mnemo train's --out, a fine-tuning job's)\n"
            "  --chat-template T     auto | llama2 | chatml | llama3 | plain (default auto: the model's own, else llama2)\n"
            "  -n, --max-tokens N    tokens per answer at most (default 512)\n"
            "  --temp T              temperature, 0 = greedy (default 0.7)\n"
            "  --top-p P             nucleus sampling mass (default 0.95)\n"
            "  --seed S              sampling seed (default 42)\n"
            "  --ctx N               context length (default: the model's window)\n"
            "  --threads N           CPU threads (default: all cores)\n"
            "  -v, --verbose         log model details and each answer's timings\n\n"
            "Lines: a user message; /reset forgets the conversation; /exit (or the end of input) ends.\n\n%s\n",
            cli_default_model_help());
}

typedef struct {
    mnemo_token *v;
    int32_t n, cap;
} tokens;

static int push(tokens *t, const mnemo_token *ids, int32_t n) {
    if (t->n + n > t->cap) {
        int32_t cap = t->cap ? t->cap : 256;
        while (cap < t->n + n) cap *= 2;
        mnemo_token *p = realloc(t->v, (size_t)cap * sizeof *p);
        if (!p) return -1;
        t->v = p;
        t->cap = cap;
    }
    memcpy(t->v + t->n, ids, (size_t)n * sizeof *ids);
    t->n += n;
    return 0;
}

/* The rendered conversation as token ids: text between specials tokenized as one piece, as Hugging Face does. */
typedef struct {
    const mnemo_model *m;
    tokens out;
    int failed;
} render;

static int on_text(void *user, const char *s, size_t n, bool answer) {
    (void)answer;
    render *r = user;
    int32_t need = 0, cap = (int32_t)n + 8;
    mnemo_token *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids || mnemo_tokenize_special(r->m, s, n, false, ids, cap, &need) != MNEMO_OK || push(&r->out, ids, need)) {
        r->failed = 1;
        free(ids);
        return -1;
    }
    free(ids);
    return 0;
}

static int on_special(void *user, mnemo_chat_special which, bool answer) {
    (void)answer;
    render *r = user;
    mnemo_token id = which != MNEMO_CHAT_BOS ? mnemo_model_eos(r->m) : mnemo_model_adds_bos(r->m) ? mnemo_model_bos(r->m) : -1;
    if (id >= 0 && push(&r->out, &id, 1)) r->failed = 1;
    return r->failed;
}

static bool print_token(const mnemo_token_event *ev, void *user) {
    (void)user;
    fwrite(ev->text, 1, ev->text_len, stdout);
    fflush(stdout);
    return true;
}

typedef struct {
    mnemo_chat_msg *v;
    int32_t n, cap;
} conversation;

static int add_msg(conversation *c, mnemo_chat_role role, const char *text, size_t len) {
    if (c->n == c->cap) {
        int32_t cap = c->cap ? c->cap * 2 : 16;
        mnemo_chat_msg *p = realloc(c->v, (size_t)cap * sizeof *p);
        if (!p) return -1;
        c->v = p;
        c->cap = cap;
    }
    char *copy = malloc(len + 1);
    if (!copy) return -1;
    memcpy(copy, text, len);
    copy[len] = '\0';
    c->v[c->n++] = (mnemo_chat_msg){.role = role, .content = copy, .len = len};
    return 0;
}

static void forget_after(conversation *c, int32_t keep) {
    while (c->n > keep) free((char *)c->v[--c->n].content);
}

/* Collects the answer's text for the conversation (the stop string, if any, is not part of it). */
typedef struct {
    char *s;
    size_t n, cap;
} answer_text;

static bool collect(const mnemo_token_event *ev, void *user) {
    answer_text *a = user;
    if (a->n + ev->text_len + 1 > a->cap) {
        size_t cap = (a->n + ev->text_len + 1) * 2;
        char *p = realloc(a->s, cap);
        if (!p) return false;
        a->s = p;
        a->cap = cap;
    }
    memcpy(a->s + a->n, ev->text, ev->text_len);
    a->n += ev->text_len;
    return print_token(ev, NULL);
}

int cli_chat(int argc, char **argv) {
    const char *cmd = "chat", *model_dir = NULL, *system = NULL, *tmpl_name = "auto", *adapter_dir = NULL;
    mnemo_model_params mp = mnemo_model_default_params();
    mnemo_context_params cp = mnemo_context_default_params();
    mnemo_generate_params gp = mnemo_generate_default_params();
    gp.max_tokens = 512;
    gp.sampling.temperature = 0.7f;
    gp.sampling.top_p = 0.95f;
    gp.sampling.seed = 42;
    gp.add_bos = false; /* the template's render carries it, and later turns continue the context */
    bool verbose = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
#define VALUE() if (!(v = cli_value(cmd, argc, argv, &i))) return 2
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--model")) { VALUE(); model_dir = v; }
        else if (!strcmp(a, "--system")) { VALUE(); system = v; }
        else if (!strcmp(a, "--adapter")) { VALUE(); adapter_dir = v; }
        else if (!strcmp(a, "--chat-template")) { VALUE(); tmpl_name = v; }
        else if (!strcmp(a, "-n") || !strcmp(a, "--max-tokens")) { VALUE(); if (!cli_int(cmd, a, v, 1, 1 << 24, &gp.max_tokens)) return 2; }
        else if (!strcmp(a, "--temp")) { VALUE(); if (!cli_float(cmd, a, v, 0, 100, &gp.sampling.temperature)) return 2; }
        else if (!strcmp(a, "--top-p")) { VALUE(); if (!cli_float(cmd, a, v, 1e-6, 1, &gp.sampling.top_p)) return 2; }
        else if (!strcmp(a, "--seed")) { VALUE(); if (!cli_u64(cmd, a, v, &gp.sampling.seed)) return 2; }
        else if (!strcmp(a, "--ctx")) { VALUE(); if (!cli_int(cmd, a, v, 1, 1 << 24, &cp.n_ctx)) return 2; }
        else if (!strcmp(a, "--threads")) { VALUE(); if (!cli_int(cmd, a, v, 1, 1024, &mp.n_threads)) return 2; }
        else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) verbose = true;
        else { fprintf(stderr, "mnemo chat: unknown option '%s' (try --help)\n", a); return 2; }
#undef VALUE
    }
    mnemo_chat_template tmpl = MNEMO_CHAT_TEMPLATE_DEFAULT;
    bool tmpl_auto = !strcmp(tmpl_name, "auto");
    if (!tmpl_auto && mnemo_chat_template_parse(tmpl_name, &tmpl) != MNEMO_OK) {
        fprintf(stderr, "mnemo chat: --chat-template must be auto, llama2, chatml, llama3 or plain (got '%s')\n", tmpl_name);
        return 2;
    }
    cli_log_init(verbose);
    if (!model_dir && !(model_dir = cli_default_model(cmd))) return 1;
    mnemo_model *model = NULL;
    mnemo_context *ctx = NULL;
    mnemo_adapter *adapter = NULL;
    int rc = 1;
    conversation conv = {0};
    tokens held = {0};
    render r = {0};
    answer_text ans = {0};
    char *line = NULL;
    size_t line_cap = 0;
    if (mnemo_model_load(model_dir, &mp, &model) != MNEMO_OK) {
        fprintf(stderr, "mnemo chat: cannot load model: %s\n", mnemo_model_error(model));
        goto out;
    }
    if (tmpl_auto) {
        char why[512];
        mnemo_status st = mnemo_chat_template_detect(model_dir, &tmpl, why, sizeof why);
        if (st != MNEMO_OK && st != MNEMO_ERR_IO)
            fprintf(stderr, "mnemo chat: %s; using the %s template\n", why, mnemo_chat_template_name(tmpl));
    }
    if (mnemo_context_new(model, &cp, &ctx) != MNEMO_OK) {
        fprintf(stderr, "mnemo chat: %s\n", mnemo_context_error(ctx));
        goto out;
    }
    if (adapter_dir && (mnemo_adapter_load(model, adapter_dir, &adapter) != MNEMO_OK ||
                        mnemo_context_set_adapter(ctx, adapter) != MNEMO_OK)) {
        fprintf(stderr, "mnemo chat: cannot use the adapter: %s\n",
                mnemo_adapter_error(adapter)[0] ? mnemo_adapter_error(adapter) : mnemo_context_error(ctx));
        goto out;
    }
    const char *stop = mnemo_chat_template_stop(tmpl);
    gp.stop = stop ? &stop : NULL;
    gp.n_stop = stop ? 1 : 0;
    int32_t base = 0; /* messages that stay after /reset: the system message */
    if (system && add_msg(&conv, MNEMO_ROLE_SYSTEM, system, strlen(system))) goto oom;
    base = conv.n;
    bool tty = isatty(STDIN_FILENO);
    for (;;) {
        if (tty) fputs("> ", stdout), fflush(stdout);
        ssize_t len = getline(&line, &line_cap, stdin);
        if (len < 0) break;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (len == 0) continue;
        if (!strcmp(line, "/exit")) break;
        if (!strcmp(line, "/reset")) { /* the context too: the next turn starts as the first did */
            forget_after(&conv, base);
            mnemo_context_reset(ctx);
            held.n = 0;
            continue;
        }
        if (add_msg(&conv, MNEMO_ROLE_USER, line, (size_t)len)) goto oom;
        r.out.n = 0;
        r.failed = 0;
        r.m = model;
        mnemo_chat_sink sink = {on_text, on_special, &r};
        char err[256] = "";
        if (mnemo_chat_template_render(tmpl, conv.v, conv.n, true, &sink, NULL, err, sizeof err) != MNEMO_OK) {
            fprintf(stderr, "mnemo chat: %s\n", r.failed ? "cannot tokenize the conversation" : err);
            forget_after(&conv, conv.n - 1);
            continue;
        }
        /* keep what the context holds of it; at least the last token is decoded again for its logits */
        int32_t common = 0, kept = 0;
        while (common < held.n && common < r.out.n - 1 && held.v[common] == r.out.v[common]) common++;
        if (mnemo_context_keep_prefix(ctx, held.v, common, &kept) != MNEMO_OK) mnemo_context_reset(ctx), kept = 0;
        held.n = kept;
        ans.n = 0;
        mnemo_generate_result res;
        mnemo_status st = mnemo_generate_tokens(ctx, r.out.v + kept, r.out.n - kept, &gp, collect, &ans, &res);
        putchar('\n');
        fflush(stdout);
        if (st != MNEMO_OK) {
            fprintf(stderr, "mnemo chat: %s\n", mnemo_context_error(ctx));
            mnemo_context_reset(ctx);
            held.n = 0;
            forget_after(&conv, conv.n - 1);
            continue;
        }
        /* the context now holds the prompt; the answer's tokens are found again by the next render */
        if (push(&held, r.out.v + kept, r.out.n - kept)) goto oom;
        if (mnemo_context_n_past(ctx) != held.n) { /* it kept generated tokens too: cut back to the prompt */
            int32_t k = 0;
            if (mnemo_context_keep_prefix(ctx, held.v, held.n, &k) != MNEMO_OK) mnemo_context_reset(ctx), k = 0;
            held.n = k;
        }
        if (add_msg(&conv, MNEMO_ROLE_ASSISTANT, ans.s ? ans.s : "", ans.n)) goto oom;
        if (verbose)
            fprintf(stderr, "mnemo: %d prompt tokens (%d reused) in %.1f ms; %d tokens in %.1f ms (%.1f tok/s)\n",
                    r.out.n, kept, res.prefill_ms, res.n_generated, res.decode_ms,
                    res.decode_ms > 0 ? res.n_generated * 1e3 / res.decode_ms : 0.0);
    }
    rc = 0;
    goto out;
oom:
    fprintf(stderr, "mnemo chat: out of memory\n");
out:
    forget_after(&conv, 0);
    free(conv.v);
    free(held.v);
    free(r.out.v);
    free(ans.s);
    free(line);
    mnemo_context_free(ctx);
    mnemo_adapter_free(adapter);
    mnemo_model_free(model);
    return rc;
}
