/*
 * test_server_format.c — model-free pieces of the server: chat templates (exact renders), template detection
 * from tokenizer_config.json, UTF-8 repair, SSE framing, metrics exposition, command-line parsing.
 * Exits non-zero on any failure.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "chat_template.h"
#include "metrics.h"
#include "oai_format.h"
#include "text_util.h"
#include "test_util.h"


static int sink_text(void *u, const char *s, size_t n) {
    sb_append(u, s, n);
    return 0;
}
static int sink_special(void *u, tmpl_special w) {
    sb_puts(u, w == TMPL_TOK_BOS ? "<BOS>" : "<EOS>");
    return 0;
}

static void render(chat_template t, const chat_msg *m, int n, const char *want, const char *want_param) {
    strbuf b = {0};
    tmpl_sink sink = {sink_text, sink_special, &b};
    char err[256], param[64];
    int rc = chat_template_render(t, m, n, &sink, err, sizeof err, param, sizeof param);
    if (want) CHECK(rc == 0 && b.data && !strcmp(b.data, want), "%s render:\n%s\nwant:\n%s", chat_template_name(t),
                    b.data ? b.data : "(null)", want);
    else CHECK(rc != 0 && !strcmp(param, want_param), "%s should fail on %s (got rc %d, param %s)",
               chat_template_name(t), want_param, rc, param);
    sb_free(&b);
}

#define MSG(r, s) {r, (char *)s, sizeof s - 1}

static void test_templates(void) {
    chat_msg conv[] = {MSG(ROLE_SYSTEM, "Be brief."), MSG(ROLE_USER, " Hi <s> "), MSG(ROLE_ASSISTANT, "Hello."),
                       MSG(ROLE_USER, "Bye")};
    render(TMPL_LLAMA2, conv, 4,
           "<BOS>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi <s> [/INST] Hello. <EOS><BOS>[INST] Bye [/INST]", NULL);
    render(TMPL_LLAMA2, conv + 1, 1, "<BOS>[INST] Hi <s> [/INST]", NULL);
    render(TMPL_CHATML, conv, 2,
           "<BOS><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi <s> <|im_end|>\n<|im_start|>assistant\n",
           NULL);
    render(TMPL_PLAIN, conv, 3, "<BOS>system: Be brief.\nuser:  Hi <s> \nassistant: Hello.\nassistant:", NULL);
    chat_msg two_users[] = {MSG(ROLE_USER, "a"), MSG(ROLE_USER, "b")};
    render(TMPL_LLAMA2, two_users, 2, NULL, "messages[1].role");
    chat_msg only_sys[] = {MSG(ROLE_SYSTEM, "a")};
    render(TMPL_LLAMA2, only_sys, 1, NULL, "messages");
    chat_template t;
    CHECK(chat_template_parse("chatml", &t) == 0 && t == TMPL_CHATML, "parse chatml");
    CHECK(chat_template_parse("jinja", &t) != 0, "unknown name");
    CHECK(chat_template_stop(TMPL_CHATML) && !chat_template_stop(TMPL_LLAMA2), "template stops");
}

static void detect_case(const char *json, int want_rc, chat_template want) {
    char dir[] = "/tmp/mnemo-tmpl-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char path[256];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    if (json) {
        FILE *f = fopen(path, "w");
        fputs(json, f);
        fclose(f);
    }
    chat_template t = TMPL_PLAIN;
    char why[512];
    int rc = chat_template_detect(dir, &t, why, sizeof why);
    CHECK(rc == want_rc && (rc != 1 || t == want), "detect %s: rc %d t %d (%s)", json ? json : "(none)", rc, t, why);
    unlink(path);
    rmdir(dir);
}

static void test_detect(void) {
    detect_case(NULL, 0, TMPL_LLAMA2);
    detect_case("{\"bos_token\":\"<s>\"}", 0, TMPL_LLAMA2);
    detect_case("{\"chat_template\":\"{{ bos_token }}{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}\"}",
                1, TMPL_LLAMA2);
    detect_case("{\"chat_template\":[{\"name\":\"default\",\"template\":\"<|im_start|>{{ m }}\"}]}", 1, TMPL_CHATML);
    detect_case("{\"chat_template\":\"<|user|>\"}", -1, TMPL_LLAMA2);
    detect_case("not json", -1, TMPL_LLAMA2);
}

static void test_utf8(void) {
    CHECK(utf8_valid_prefix("h\xc3\xa9llo", 6) == 6, "valid 2-byte");
    CHECK(utf8_valid_prefix("ab\xe2\x82", 4) == 2, "truncated 3-byte");
    CHECK(utf8_valid_prefix("\xc0\xaf", 2) == 0, "overlong");
    CHECK(utf8_valid_prefix("\xed\xa0\x80", 3) == 0, "surrogate");
    CHECK(utf8_valid_prefix("\xf4\x90\x80\x80", 4) == 0, "above U+10FFFF");
    json_t *j = json_text("a\xff" "b\xe2\x82", 5);
    CHECK(j && !strcmp(json_string_value(j), "a\xef\xbf\xbd" "b\xef\xbf\xbd\xef\xbf\xbd"), "repair: %s",
          j ? json_string_value(j) : "(null)");
    json_decref(j);
}

static void test_sse(void) {
    strbuf b = {0};
    json_t *o = json_object();
    json_object_set_new(o, "a", json_integer(1));
    sse_event(&b, o);
    sse_done(&b);
    CHECK(b.data && !strcmp(b.data, "data: {\"a\":1}\n\ndata: [DONE]\n\n"), "sse: %s", b.data);
    sb_free(&b);
    ireq_choice ch = {.end = IREQ_END_OK, .finish = MNEMO_FINISH_EOS};
    CHECK(!strcmp(oai_finish_reason(&ch), "stop") && !oai_stop_reason(&ch), "eos -> stop");
    ch.finish = MNEMO_FINISH_CONTEXT;
    CHECK(!strcmp(oai_finish_reason(&ch), "length"), "context -> length");
    ch.end = IREQ_END_TIMEOUT;
    CHECK(!strcmp(oai_finish_reason(&ch), "length") && !strcmp(oai_stop_reason(&ch), "time_limit"), "timeout");
    oai_ctx c = {.chat = true, .model_name = "m", .created = 5};
    oai_make_id(&c, 7);
    json_t *chunk = oai_chunk(&c, 2, "", 0, NULL, NULL, true, true);
    char *s = json_dumps(chunk, JSON_COMPACT | JSON_SORT_KEYS);
    CHECK(strstr(s, "\"object\":\"chat.completion.chunk\"") && strstr(s, "\"delta\":{\"content\":\"\",\"role\":\"assistant\"}") &&
              strstr(s, "\"index\":2") && strstr(s, "\"usage\":null") && strstr(s, "\"finish_reason\":null"),
          "chunk: %s", s);
    free(s);
    json_decref(chunk);
}

static void test_metrics(void) {
    metrics *m = metrics_new();
    metrics_observe(m, HIST_TTFT, 0.003);
    metrics_observe(m, HIST_TTFT, 0.2);
    metrics_observe(m, HIST_TTFT, 1000);
    metrics_tokens(m, 10, 5);
    metrics_http_status(m, 200);
    metrics_request_end(m, "ok");
    metrics_gauges g = {.slots_total = 4, .slots_busy = 1, .kv_tokens_used = 32, .kv_tokens_capacity = 128,
                        .kv_bytes = -1};
    uint64_t len = 0;
    char *t = metrics_render(m, &g, &len);
    CHECK(t && strlen(t) == len, "render");
    CHECK(strstr(t, "mnemo_time_to_first_token_seconds_bucket{le=\"0.005\"} 1\n"), "bucket 0.005");
    CHECK(strstr(t, "mnemo_time_to_first_token_seconds_bucket{le=\"0.25\"} 2\n"), "bucket 0.25 cumulative");
    CHECK(strstr(t, "mnemo_time_to_first_token_seconds_bucket{le=\"+Inf\"} 3\n"), "+Inf");
    CHECK(strstr(t, "mnemo_time_to_first_token_seconds_count 3\n"), "count");
    CHECK(strstr(t, "mnemo_kv_cache_usage_ratio 0.25\n"), "ratio");
    CHECK(strstr(t, "mnemo_prompt_tokens_total 10\n") && strstr(t, "mnemo_generated_tokens_total 5\n"), "tokens");
    CHECK(strstr(t, "mnemo_http_responses_total{code=\"200\"} 1\n"), "status");
    CHECK(strstr(t, "mnemo_requests_total{outcome=\"ok\"} 1\n"), "outcome");
    CHECK(!strstr(t, "mnemo_kv_cache_bytes"), "unknown kv bytes not printed");
    free(t);
    metrics_free(m);
}

static void test_args(void) {
    server_opts o;
    char err[256];
    server_opts_defaults(&o);
    char *ok[] = {"x", "--port", "0", "--parallel=2", "--timeout", "1.5", "--max-body", "4096", "-v"};
    CHECK(server_opts_parse(&o, 9, ok, err, sizeof err) == ARGS_OK, "%s", err);
    CHECK(o.port == 0 && o.parallel == 2 && o.timeout_s == 1.5 && o.max_body == 4096 && o.verbose, "values");
    CHECK(!strcmp(o.host, "127.0.0.1"), "loopback by default");
    char *bad[][3] = {{"x", "--port", "70000"}, {"x", "--parallel", "0"}, {"x", "--bogus", "1"},
                      {"x", "--timeout", "abc"}, {"x", "--ctx", "1.5"}};
    for (int i = 0; i < 5; i++) {
        server_opts_defaults(&o);
        CHECK(server_opts_parse(&o, 3, bad[i], err, sizeof err) == ARGS_ERROR && err[0], "bad %s %s", bad[i][1],
              bad[i][2]);
    }
    char *missing[] = {"x", "--model"};
    CHECK(server_opts_parse(&o, 2, missing, err, sizeof err) == ARGS_ERROR, "missing value");
    char *help[] = {"x", "--help"};
    CHECK(server_opts_parse(&o, 2, help, err, sizeof err) == ARGS_HELP, "help");
}

int main(void) {
    test_templates();
    test_detect();
    test_utf8();
    test_sse();
    test_metrics();
    test_args();
    return test_summary();
}
