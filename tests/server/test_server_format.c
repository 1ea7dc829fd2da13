/*
 * test_server_format.c — model-free pieces of the server: UTF-8 repair, SSE framing, metrics exposition,
 * command-line parsing. (The chat templates the server renders with are libengine's: test_chat_template.c.)
 * Exits non-zero on any failure.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "metrics.h"
#include "oai_format.h"
#include "text_util.h"
#include "test_util.h"


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
    test_utf8();
    test_sse();
    test_metrics();
    test_args();
    return test_summary();
}
