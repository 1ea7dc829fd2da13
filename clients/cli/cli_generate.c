/*
 * cli_generate.c — `mnemo generate`: load a model, stream a completion to stdout.
 * With --logprobs K each token is printed with its id, logprob and top-K alternatives instead of plain text;
 * --json turns every token into one JSON object per line (jansson does the escaping) plus a final summary.
 * --uio DIR loads UIO weights over the model (engine.h "UIO-LLM compression"); with -v the memory's figures follow.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_args.h"
#include "cli_memory.h"
#include "cli_log.h"
#include "cli_progress.h"
#include "cli_text_file.h"
#include "engine.h"

#define MAX_STOPS 16

static void usage(FILE *f) {
    fprintf(f,
            "usage: mnemo generate [--model DIR] (TEXT | --prompt TEXT | -f FILE) [options]\n\n"
            "  --model DIR            Hugging Face LLaMA checkpoint directory or GGUF file (default: $MNEMO_MODEL, else\n"
            "                         SmolLM2-135M-Instruct)\n"
            "  --prompt TEXT          the prompt (or give it as the one argument that is not an option)\n"
            "  -f, --file FILE        read the prompt from FILE (- = standard input), for prompts of any length\n"
            "  -n, --max-tokens N     tokens to generate (default 128)\n"
            "  --temp T               temperature, 0 = greedy (default 0.8)\n"
            "  --top-k K              keep the K most likely tokens (default 40, 0 = off)\n"
            "  --top-p P              nucleus sampling mass (default 0.95)\n"
            "  --min-p P              drop tokens below P * p_max (default 0.05)\n"
            "  --repeat-penalty R     HF repetition penalty (default 1.0 = off)\n"
            "  --presence-penalty X   OpenAI presence penalty (default 0)\n"
            "  --frequency-penalty X  OpenAI frequency penalty (default 0)\n"
            "  --seed S               sampling seed (default 42)\n"
            "  --stop TEXT            stop before TEXT (repeatable, up to %d)\n"
            "  --logprobs K           print each token's id, logprob and top-K alternatives (K <= %d)\n"
            "  --json                 one JSON object per token, then a summary object\n"
            "  --ignore-eos           keep going past end-of-sequence tokens\n"
            "  --ctx N                context length (default: the model's max_position_embeddings)\n"
            "  --threads N            CPU threads (default: all cores)\n"
            "  --device D             auto | cpu | cuda (default auto)\n"
            "  --progress             show the prompt's progress bar on stderr even when it is not a terminal (by\n"
            "                         default it shows on a terminal only: a long prompt read on a pipe prints\n"
            "                         nothing until its first token)\n"
            "  --adapter DIR          apply a peft LoRA adapter (adapter_config.json + adapter_model.safetensors)\n"
            "                         over the model's weights, unmerged\n"
            "  --uio DIR              a UIO-LLM: UIO weights over the model (uio_config.json + uio.pth or\n"
            "                         uio.safetensors) compress each chunk_size tokens into num_memory <mem> entries\n"
            "                         per layer; --ctx bounds entries + raw tokens (default max_position_embeddings)\n"
            "  --load-session FILE    continue from a saved session (the prompt is appended to it)\n"
            "  --save-session FILE    save the session (prompt + generated text) when done\n"
            "  -v, --verbose          log model details and timings\n",
            MAX_STOPS, MNEMO_MAX_LOGPROBS);
    cli_memory_usage(f, 25);
    fprintf(f, "\n%s\n", cli_default_model_help());
}

typedef struct {
    const mnemo_model *model;
    int n_logprobs;
    bool json;
} print_state;

static json_t *piece_json(const mnemo_model *m, mnemo_token id) {
    char buf[256];
    size_t len = 0;
    if (mnemo_token_to_piece(m, id, buf, sizeof buf, &len) != MNEMO_OK) return json_null();
    return json_stringn_nocheck(buf, len);
}

static bool on_token(const mnemo_token_event *ev, void *user) {
    print_state *ps = user;
    if (ps->json) {
        json_t *o = json_object();
        json_object_set_new(o, "token", json_integer(ev->token));
        json_object_set_new(o, "piece", piece_json(ps->model, ev->token));
        json_object_set_new(o, "text", json_stringn_nocheck(ev->text, ev->text_len));
        if (ps->n_logprobs > 0) {
            json_object_set_new(o, "logprob", json_real(ev->logprob));
            json_t *top = json_array();
            for (int i = 0; i < ev->n_top; i++) {
                json_t *t = json_object();
                json_object_set_new(t, "token", json_integer(ev->top[i].id));
                json_object_set_new(t, "piece", piece_json(ps->model, ev->top[i].id));
                json_object_set_new(t, "logprob", json_real(ev->top[i].logprob));
                json_array_append_new(top, t);
            }
            json_object_set_new(o, "top", top);
        }
        char *s = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
        if (s) puts(s);
        free(s);
        json_decref(o);
    } else if (ps->n_logprobs > 0) {
        char piece[256];
        size_t len = 0;
        if (mnemo_token_to_piece(ps->model, ev->token, piece, sizeof piece, &len) != MNEMO_OK) strcpy(piece, "?");
        printf("%6d %-16s %9.4f |", ev->token, piece, ev->logprob);
        for (int i = 0; i < ev->n_top; i++) {
            if (mnemo_token_to_piece(ps->model, ev->top[i].id, piece, sizeof piece, &len) != MNEMO_OK) strcpy(piece, "?");
            printf(" %d:%s(%.4f)", ev->top[i].id, piece, ev->top[i].logprob);
        }
        putchar('\n');
    } else {
        fwrite(ev->text, 1, ev->text_len, stdout);
    }
    fflush(stdout);
    return true;
}

static const char *finish_name(mnemo_finish_reason r) {
    static const char *names[] = {"length", "stop", "eos", "cancelled", "context"};
    return (unsigned)r < 5 ? names[r] : "?";
}

int cli_generate(int argc, char **argv) {
    const char *cmd = "generate", *model_dir = NULL, *prompt = NULL, *prompt_file = NULL;
    const char *stops[MAX_STOPS];
    mnemo_model_params mp = mnemo_model_default_params();
    mnemo_context_params cp = mnemo_context_default_params();
    mnemo_generate_params gp = mnemo_generate_default_params();
    gp.sampling.temperature = 0.8f;
    gp.sampling.top_k = 40;
    gp.sampling.top_p = 0.95f;
    gp.sampling.min_p = 0.05f;
    gp.sampling.seed = 42;
    bool json = false, verbose = false, progress = false;
    const char *load_session = NULL, *save_session = NULL, *adapter_dir = NULL;
    mnemo_adapter *adapter = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
#define VALUE() if (!(v = cli_value(cmd, argc, argv, &i))) return 2
        int mem = cli_memory_option(cmd, argc, argv, &i, &cp);
        if (mem < 0) return 2;
        if (mem) continue;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--model")) { VALUE(); model_dir = v; }
        else if (!strcmp(a, "--prompt")) { VALUE(); prompt = v; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { VALUE(); prompt_file = v; }
        else if (!strcmp(a, "-n") || !strcmp(a, "--max-tokens")) { VALUE(); if (!cli_int(cmd, a, v, 0, 1 << 24, &gp.max_tokens)) return 2; }
        else if (!strcmp(a, "--temp")) { VALUE(); if (!cli_float(cmd, a, v, 0, 100, &gp.sampling.temperature)) return 2; }
        else if (!strcmp(a, "--top-k")) { VALUE(); if (!cli_int(cmd, a, v, 0, 1 << 24, &gp.sampling.top_k)) return 2; }
        else if (!strcmp(a, "--top-p")) { VALUE(); if (!cli_float(cmd, a, v, 1e-6, 1, &gp.sampling.top_p)) return 2; }
        else if (!strcmp(a, "--min-p")) { VALUE(); if (!cli_float(cmd, a, v, 0, 1, &gp.sampling.min_p)) return 2; }
        else if (!strcmp(a, "--repeat-penalty")) { VALUE(); if (!cli_float(cmd, a, v, 1e-3, 100, &gp.sampling.repetition_penalty)) return 2; }
        else if (!strcmp(a, "--presence-penalty")) { VALUE(); if (!cli_float(cmd, a, v, -2, 2, &gp.sampling.presence_penalty)) return 2; }
        else if (!strcmp(a, "--frequency-penalty")) { VALUE(); if (!cli_float(cmd, a, v, -2, 2, &gp.sampling.frequency_penalty)) return 2; }
        else if (!strcmp(a, "--seed")) { VALUE(); if (!cli_u64(cmd, a, v, &gp.sampling.seed)) return 2; }
        else if (!strcmp(a, "--logprobs")) { VALUE(); if (!cli_int(cmd, a, v, 0, MNEMO_MAX_LOGPROBS, &gp.n_logprobs)) return 2; }
        else if (!strcmp(a, "--ctx")) { VALUE(); if (!cli_int(cmd, a, v, 1, 1 << 24, &cp.n_ctx)) return 2; }
        else if (!strcmp(a, "--threads")) { VALUE(); if (!cli_int(cmd, a, v, 1, 1024, &mp.n_threads)) return 2; }
        else if (!strcmp(a, "--stop")) {
            VALUE();
            if (gp.n_stop == MAX_STOPS) { fprintf(stderr, "mnemo generate: at most %d --stop strings\n", MAX_STOPS); return 2; }
            stops[gp.n_stop++] = v;
        } else if (!strcmp(a, "--device")) {
            VALUE();
            if (!strcmp(v, "auto")) mp.device = MNEMO_DEVICE_AUTO;
            else if (!strcmp(v, "cpu")) mp.device = MNEMO_DEVICE_CPU;
            else if (!strcmp(v, "cuda")) mp.device = MNEMO_DEVICE_CUDA;
            else { fprintf(stderr, "mnemo generate: --device expects auto, cpu or cuda, got '%s'\n", v); return 2; }
        }
        else if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--progress")) progress = true;
        else if (!strcmp(a, "--load-session")) { VALUE(); load_session = v; }
        else if (!strcmp(a, "--adapter")) { VALUE(); adapter_dir = v; }
        else if (!strcmp(a, "--uio")) { VALUE(); mp.uio_dir = v; }
        else if (!strcmp(a, "--save-session")) { VALUE(); save_session = v; }
        else if (!strcmp(a, "--ignore-eos")) gp.ignore_eos = true;
        else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) verbose = true;
        else if (a[0] != '-' && !prompt) prompt = a; /* `mnemo generate "To be"`, as `mnemo tokenize TEXT` */
        else if (a[0] != '-') { fprintf(stderr, "mnemo generate: one prompt only (got '%s' too)\n", a); return 2; }
        else { fprintf(stderr, "mnemo generate: unknown option '%s' (try --help)\n", a); return 2; }
#undef VALUE
    }
    if (prompt && prompt_file) {
        fprintf(stderr, "mnemo generate: give the prompt with --prompt or with --file, not both\n");
        return 2;
    }
    if (!prompt && !prompt_file) {
        fprintf(stderr, "mnemo generate: a prompt is required: TEXT, --prompt TEXT or --file FILE (try --help)\n");
        return 2;
    }
    gp.stop = stops;
    cli_log_init(verbose);

    mnemo_model *model = NULL;
    mnemo_context *ctx = NULL;
    int rc = 1;
    size_t file_len = 0;
    char *file_text = NULL; /* read before the model loads: a bad path fails fast */
    if (prompt_file && !(prompt = file_text = cli_read_text(cmd, prompt_file, &file_len))) goto out;
    if (!model_dir && !(model_dir = cli_default_model(cmd))) goto out;
    if (mnemo_model_load(model_dir, &mp, &model) != MNEMO_OK) {
        fprintf(stderr, "mnemo generate: cannot load model: %s\n", mnemo_model_error(model));
        goto out;
    }
    if (mnemo_context_new(model, &cp, &ctx) != MNEMO_OK) {
        fprintf(stderr, "mnemo generate: %s\n", mnemo_context_error(ctx));
        goto out;
    }
    if (adapter_dir && (mnemo_adapter_load(model, adapter_dir, &adapter) != MNEMO_OK ||
                        mnemo_context_set_adapter(ctx, adapter) != MNEMO_OK)) {
        fprintf(stderr, "mnemo generate: %s\n",
                mnemo_adapter_error(adapter)[0] ? mnemo_adapter_error(adapter) : mnemo_context_error(ctx));
        goto out;
    }
    if (load_session && mnemo_context_load(ctx, load_session) != MNEMO_OK) {
        fprintf(stderr, "mnemo generate: %s\n", mnemo_context_error(ctx));
        goto out;
    }
    cli_progress bar = {.label = "prompt"};
    if (cli_progress_wanted(progress)) mnemo_context_set_progress(ctx, cli_progress_report, &bar);
    print_state ps = {.model = model, .n_logprobs = gp.n_logprobs, .json = json};
    mnemo_generate_result res;
    if (mnemo_generate(ctx, prompt, &gp, on_token, &ps, &res) != MNEMO_OK) {
        fprintf(stderr, "\nmnemo generate: %s\n", mnemo_context_error(ctx));
        goto out;
    }
    if (json) {
        printf("{\"finish_reason\":\"%s\",\"prompt_tokens\":%d,\"completion_tokens\":%d,\"prefill_ms\":%.3f,"
               "\"decode_ms\":%.3f}\n",
               finish_name(res.finish_reason), res.n_prompt_tokens, res.n_generated, res.prefill_ms, res.decode_ms);
    } else if (gp.n_logprobs == 0) {
        putchar('\n');
    }
    fflush(stdout); /* the text ends before the timings on stderr, also when both go to one pipe */
    if (verbose) /* (the model's description was logged when it loaded) */
        fprintf(stderr, "mnemo: prompt %d tokens in %.1f ms (%.1f tok/s); %d tokens in %.1f ms (%.1f tok/s); finish: %s\n",
                res.n_prompt_tokens, res.prefill_ms,
                res.prefill_ms > 0 ? res.n_prompt_tokens * 1e3 / res.prefill_ms : 0.0, res.n_generated, res.decode_ms,
                res.decode_ms > 0 ? res.n_generated * 1e3 / res.decode_ms : 0.0, finish_name(res.finish_reason));
    mnemo_uio_info uio;
    mnemo_memory_stats ms;
    if (verbose && mnemo_model_uio(model, &uio) == MNEMO_OK && mnemo_context_memory(ctx, &ms) == MNEMO_OK)
        fprintf(stderr,
                "mnemo: UIO memory: %llu tokens compressed into %llu <mem> entries per layer (%d -> %d), %d raw tokens; "
                "%.1f KB of memory K/V, %.1f KB of KV cache besides\n",
                (unsigned long long)ms.mem_tokens, (unsigned long long)ms.mem_entries, uio.chunk_size, uio.num_memory,
                ms.local_tokens, (double)(ms.mem_key_bytes + ms.mem_value_bytes) / 1e3,
                (double)ms.local_kv_bytes / 1e3);
    else if (verbose && cp.memory == MNEMO_MEMORY_RETRIEVAL && mnemo_context_memory(ctx, &ms) == MNEMO_OK)
        fprintf(stderr, "mnemo: retrieval memory: %llu tokens in memory (%.1f MB of K/V and representatives, %.1f KB "
                "of index), %d tokens in the cache (%.1f MB with their keys before RoPE)\n",
                (unsigned long long)ms.mem_tokens, (double)(ms.mem_key_bytes + ms.mem_value_bytes) / 1e6,
                (double)ms.mem_index_bytes / 1e3, ms.local_tokens, (double)ms.local_kv_bytes / 1e6);
    if (save_session && mnemo_context_save(ctx, save_session) != MNEMO_OK) {
        fprintf(stderr, "mnemo generate: %s\n", mnemo_context_error(ctx));
        goto out;
    }
    rc = 0;
out:
    mnemo_context_free(ctx);
    mnemo_adapter_free(adapter);
    mnemo_model_free(model);
    free(file_text);
    return rc;
}
