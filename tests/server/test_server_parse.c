/*
 * test_server_parse.c — table tests of server/request_parse.c: valid bodies give the expected values, invalid
 * ones the expected status and `param`. No model, no sockets. Exits non-zero on any failure.
 */
#include <stdio.h>
#include <string.h>

#include "http_door.h"
#include "request_parse.h"
#include "test_util.h"


typedef struct {
    int chat;
    const char *body;
    int status;        /* 0 = must parse */
    const char *param; /* expected param on failure ("" = none) */
} bad_case;

static const bad_case CASES[] = {
    {0, "", 400, ""},
    {0, "nope", 400, ""},
    {0, "[1,2]", 400, ""},
    {0, "{\"prompt\":\"a\",}", 400, ""},
    {0, "{\"prompt\":\"a\",\"prompt\":\"b\"}", 400, ""},
    {0, "{\"prompt\":\"a\\u0000b\"}", 400, ""},
    {0, "{}", 400, "prompt"},
    {0, "{\"prompt\":7}", 400, "prompt"},
    {0, "{\"prompt\":[]}", 400, "prompt"},
    {0, "{\"prompt\":[1,\"a\"]}", 400, "prompt"},
    {0, "{\"prompt\":[\"a\",[1]]}", 400, "prompt"},
    {0, "{\"prompt\":[[1],[]]}", 400, "prompt"},
    {0, "{\"prompt\":[512]}", 400, "prompt"},
    {0, "{\"prompt\":[-1]}", 400, "prompt"},
    {0, "{\"prompt\":[1.5]}", 400, "prompt"},
    {0, "{\"prompt\":\"a\",\"max_tokens\":\"5\"}", 400, "max_tokens"},
    {0, "{\"prompt\":\"a\",\"max_tokens\":-1}", 400, "max_tokens"},
    {0, "{\"prompt\":\"a\",\"max_tokens\":1e30}", 400, "max_tokens"},
    {0, "{\"prompt\":\"a\",\"max_tokens\":2.5}", 400, "max_tokens"},
    {0, "{\"prompt\":\"a\",\"temperature\":-0.5}", 400, "temperature"},
    {0, "{\"prompt\":\"a\",\"temperature\":\"hot\"}", 400, "temperature"},
    {0, "{\"prompt\":\"a\",\"top_p\":0}", 400, "top_p"},
    {0, "{\"prompt\":\"a\",\"top_p\":1.01}", 400, "top_p"},
    {0, "{\"prompt\":\"a\",\"top_k\":-1}", 400, "top_k"},
    {0, "{\"prompt\":\"a\",\"min_p\":1.5}", 400, "min_p"},
    {0, "{\"prompt\":\"a\",\"presence_penalty\":2.5}", 400, "presence_penalty"},
    {0, "{\"prompt\":\"a\",\"frequency_penalty\":-9}", 400, "frequency_penalty"},
    {0, "{\"prompt\":\"a\",\"repetition_penalty\":0}", 400, "repetition_penalty"},
    {0, "{\"prompt\":\"a\",\"n\":0}", 400, "n"},
    {0, "{\"prompt\":\"a\",\"n\":17}", 400, "n"},
    {0, "{\"prompt\":[\"a\",\"b\",\"c\"],\"n\":6}", 400, "n"},
    {0, "{\"prompt\":\"a\",\"stop\":5}", 400, "stop"},
    {0, "{\"prompt\":\"a\",\"stop\":[\"\"]}", 400, "stop"},
    {0, "{\"prompt\":\"a\",\"stop\":[1]}", 400, "stop"},
    {0, "{\"prompt\":\"a\",\"logprobs\":21}", 400, "logprobs"},
    {0, "{\"prompt\":\"a\",\"logprobs\":true}", 400, "logprobs"},
    {0, "{\"prompt\":\"a\",\"stream\":\"yes\"}", 400, "stream"},
    {0, "{\"prompt\":\"a\",\"stream_options\":{\"include_usage\":true}}", 400, "stream_options"},
    {0, "{\"prompt\":\"a\",\"stream\":true,\"stream_options\":{\"include_usage\":1}}", 400,
     "stream_options.include_usage"},
    {0, "{\"prompt\":\"a\",\"seed\":\"x\"}", 400, "seed"},
    {0, "{\"prompt\":\"a\",\"model\":5}", 400, "model"},
    {0, "{\"prompt\":\"a\",\"echo\":true}", 400, "echo"},
    {0, "{\"prompt\":\"a\",\"suffix\":\"z\"}", 400, "suffix"},
    {0, "{\"prompt\":\"a\",\"best_of\":2}", 400, "best_of"},
    {0, "{\"prompt\":\"a\",\"logit_bias\":{\"1\":5}}", 400, "logit_bias"},
    {0, "{\"prompt\":\"a\",\"user\":5}", 400, "user"},
    {1, "{}", 400, "messages"},
    {1, "{\"messages\":[]}", 400, "messages"},
    {1, "{\"messages\":\"hi\"}", 400, "messages"},
    {1, "{\"messages\":[5]}", 400, "messages[0]"},
    {1, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", 400, "messages[0].role"},
    {1, "{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", 400, "messages[0].role"},
    {1, "{\"messages\":[{\"content\":\"x\"}]}", 400, "messages[0].role"},
    {1, "{\"messages\":[{\"role\":\"user\"}]}", 400, "messages[0].content"},
    {1, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400, "messages[0].content"},
    {1, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", 400, "messages[0].content"},
    {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}", 400, "top_logprobs"},
    {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":3}", 400, "logprobs"},
    {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{}]}", 400, "tools"},
    {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_object\"}}", 400,
     "response_format"},
    {1, "{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{}]}]}", 400,
     "messages[0].tool_calls"},
    /* valid */
    {0, "{\"prompt\":\"a\"}", 0, ""},
    {0, "{\"prompt\":\"a\",\"max_tokens\":null,\"temperature\":null,\"stop\":null}", 0, ""},
    {0, "{\"prompt\":[1,2,3],\"n\":2,\"seed\":-5,\"logprobs\":0}", 0, ""},
    {1, "{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\","
        "\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}],\"stream\":true,\"stream_options\":{\"include_usage\":"
        "true},\"response_format\":{\"type\":\"text\"},\"tools\":[],\"max_completion_tokens\":7}",
     0, ""},
};

static void test_table(void) {
    parse_limits lim = {.n_vocab = 512};
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const bad_case *c = &CASES[i];
        infer_request r;
        api_error e;
        int rc = parse_infer_request(c->body, strlen(c->body), c->chat, &lim, &r, &e);
        if (c->status == 0) {
            CHECK(rc == 0, "case %zu (%s) should parse: %s", i, c->body, e.message);
        } else {
            CHECK(rc != 0 && e.status == c->status, "case %zu (%s): rc %d status %d", i, c->body, rc, e.status);
            CHECK(!strcmp(e.param, c->param), "case %zu (%s): param '%s', want '%s' (%s)", i, c->body, e.param,
                  c->param, e.message);
            CHECK(e.message[0] != '\0', "case %zu: empty message", i);
        }
        infer_request_free(&r);
    }
}

static void test_values(void) {
    parse_limits lim = {.n_vocab = 512};
    infer_request r;
    api_error e;
    const char *b = "{\"prompt\":[[1,2],[3]],\"n\":3,\"max_tokens\":9,\"temperature\":0.5,\"top_p\":0.9,\"top_k\":4,"
                    "\"min_p\":0.1,\"presence_penalty\":1,\"frequency_penalty\":-1,\"repeat_penalty\":1.2,"
                    "\"seed\":12345678901,\"stop\":[\"x\",\"yz\"],\"logprobs\":5,\"stream\":true,\"ignore_eos\":true}";
    CHECK(parse_infer_request(b, strlen(b), false, &lim, &r, &e) == 0, "%s", e.message);
    CHECK(r.n_prompts == 2 && r.prompts[0].is_tokens && r.prompts[0].n_tokens == 2 && r.prompts[1].tokens[0] == 3,
          "token prompts");
    CHECK(r.n == 3 && r.max_tokens == 9 && r.logprobs == 5 && r.stream && r.ignore_eos, "scalars");
    CHECK(r.sampling.temperature == 0.5f && r.sampling.top_p == 0.9f && r.sampling.top_k == 4, "sampling");
    CHECK(r.sampling.repetition_penalty == 1.2f && r.seed_set && r.sampling.seed == 12345678901ULL, "seed/penalty");
    CHECK(r.n_stop == 2 && !strcmp(r.stop[1], "yz"), "stop");
    infer_request_free(&r);

    b = "{\"messages\":[{\"role\":\"developer\",\"content\":\"s\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\","
        "\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}],\"logprobs\":true,\"top_logprobs\":3,\"max_tokens\":4,"
        "\"max_completion_tokens\":6}";
    CHECK(parse_infer_request(b, strlen(b), true, &lim, &r, &e) == 0, "%s", e.message);
    CHECK(r.n_messages == 2 && r.messages[0].role == MNEMO_ROLE_SYSTEM && !strcmp(r.messages[1].content, "a\nb"),
          "messages");
    CHECK(r.logprobs == 3 && r.max_tokens == 6, "chat logprobs %d max_tokens %d", r.logprobs, r.max_tokens);
    infer_request_free(&r);

    tokenize_request t;
    CHECK(parse_tokenize_request("{\"content\":\"hi\",\"add_special\":true}", 35, &t, &e) == 0, "%s", e.message);
    CHECK(t.add_special && !t.with_pieces && t.len == 2, "tokenize fields");
    tokenize_request_free(&t);
    CHECK(parse_tokenize_request("{\"content\":1}", 13, &t, &e) != 0 && !strcmp(e.param, "content"), "tokenize type");
    tokenize_request_free(&t);
    detokenize_request d;
    CHECK(parse_detokenize_request("{\"tokens\":[1,2,3]}", 18, &lim, &d, &e) == 0 && d.n == 3, "detokenize");
    detokenize_request_free(&d);
    CHECK(parse_detokenize_request("{\"tokens\":[1,600]}", 18, &lim, &d, &e) != 0 && !strcmp(e.param, "tokens"),
          "detokenize range");
    detokenize_request_free(&d);
}

/* The front door's verdict on a connection's first bytes. */
static void test_door(void) {
    static const struct {
        const char *bytes;
        door_verdict want;
    } cases[] = {
        {"", DOOR_MORE},          {"G", DOOR_MORE},         {"GET", DOOR_MORE},
        {"GET ", DOOR_HTTP},      {"GET /x HTTP/1.1", DOOR_HTTP}, {"M-SEARCH *", DOOR_HTTP},
        {" GET", DOOR_BAD},       {"GARBAGE\r\n", DOOR_BAD}, {"GET\r\n", DOOR_BAD},
        {"\x16\x03\x01", DOOR_BAD}, {"G\xc3\xa9T ", DOOR_BAD}, {"GE/T ", DOOR_BAD},
        {"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", DOOR_BAD}, /* 33 characters: longer than any method */
        {"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", DOOR_MORE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        CHECK(door_judge(cases[i].bytes, strlen(cases[i].bytes)) == cases[i].want, "door case %zu '%s'", i,
              cases[i].bytes);
    CHECK(door_judge("\0GET ", 5) == DOOR_BAD, "NUL first");
}

int main(void) {
    test_table();
    test_values();
    test_door();
    return test_summary();
}
