/*
 * test_chat_template.c — libengine's chat templates through engine.h alone: names, stop strings, recognition in
 * tokenizer_config.json (every status, *out always set), exact renders of llama2, chatml and plain with the
 * assistant answers marked {like this} and with or without the generation prompt, conversations a template cannot
 * take (the message named, nothing sent), and a sink that stops the render.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "test_util.h"

typedef struct {
    char s[2048];
    bool in_answer;
    int calls, stop_at; /* stop_at > 0: the stop_at-th call returns nonzero */
} rendered;

static int mark(rendered *r, bool answer) {
    if (answer != r->in_answer) strcat(r->s, answer ? "{" : "}");
    r->in_answer = answer;
    return ++r->calls == r->stop_at;
}
static int on_text(void *u, const char *s, size_t n, bool answer) {
    rendered *r = u;
    int stop = mark(r, answer);
    strncat(r->s, s, n);
    return stop;
}
static int on_special(void *u, mnemo_chat_special w, bool answer) {
    rendered *r = u;
    int stop = mark(r, answer);
    strcat(r->s, w == MNEMO_CHAT_BOS ? "<BOS>" : "<EOS>");
    return stop;
}

#define MSG(r, s) {r, s, sizeof s - 1}
static const mnemo_chat_msg CONV[] = {MSG(MNEMO_ROLE_SYSTEM, "Be brief."), MSG(MNEMO_ROLE_USER, " Hi <s> "),
                                      MSG(MNEMO_ROLE_ASSISTANT, "Hello."), MSG(MNEMO_ROLE_USER, "Bye")};

static void render(mnemo_chat_template t, const mnemo_chat_msg *m, int n, bool gen, const char *want) {
    rendered r = {0};
    mnemo_chat_sink sink = {on_text, on_special, &r};
    int32_t bad = 7;
    char err[256];
    mnemo_status st = mnemo_chat_template_render(t, m, n, gen, &sink, &bad, err, sizeof err);
    if (r.in_answer) strcat(r.s, "}");
    CHECK(st == MNEMO_OK && bad == -1 && !strcmp(r.s, want), "%s render (gen %d): %s\n%s\nwant:\n%s",
          mnemo_chat_template_name(t), gen, mnemo_status_str(st), r.s, want);
}

static void misfit(mnemo_chat_template t, const mnemo_chat_msg *m, int n, int32_t want_bad, const char *want_err) {
    rendered r = {0};
    mnemo_chat_sink sink = {on_text, on_special, &r};
    int32_t bad = 99;
    char err[256] = "";
    mnemo_status st = mnemo_chat_template_render(t, m, n, true, &sink, &bad, err, sizeof err);
    CHECK(st == MNEMO_ERR_INVALID_ARG && bad == want_bad && strstr(err, want_err) && r.calls == 0,
          "%s misfit: status %s, message %d (want %d), '%s', %d pieces sent", mnemo_chat_template_name(t),
          mnemo_status_str(st), (int)bad, (int)want_bad, err, r.calls);
}

static void test_names(void) {
    const char *names[] = {"llama2", "chatml", "plain", "llama3"};
    for (int i = 0; i < 4; i++) {
        mnemo_chat_template t = MNEMO_CHAT_PLAIN;
        CHECK(mnemo_chat_template_parse(names[i], &t) == MNEMO_OK && (int)t == i &&
                  !strcmp(mnemo_chat_template_name(t), names[i]),
              "%s round trip", names[i]);
    }
    mnemo_chat_template t = MNEMO_CHAT_CHATML;
    CHECK(mnemo_chat_template_parse("jinja", &t) == MNEMO_ERR_INVALID_ARG && t == MNEMO_CHAT_CHATML &&
              mnemo_chat_template_parse(NULL, &t) == MNEMO_ERR_INVALID_ARG,
          "unknown names refused, *out untouched");
    CHECK(!strcmp(mnemo_chat_template_name((mnemo_chat_template)9), "?"), "unknown value named ?");
    CHECK(!mnemo_chat_template_stop(MNEMO_CHAT_LLAMA2) && !strcmp(mnemo_chat_template_stop(MNEMO_CHAT_CHATML),
          "<|im_end|>") && !strcmp(mnemo_chat_template_stop(MNEMO_CHAT_PLAIN), "\nuser:") &&
          !strcmp(mnemo_chat_template_stop(MNEMO_CHAT_LLAMA3), "<|eot_id|>"), "stop strings");
    CHECK(MNEMO_CHAT_TEMPLATE_DEFAULT == MNEMO_CHAT_LLAMA2, "llama2 is the default");
}

static void detect_case(const char *json, mnemo_status want, mnemo_chat_template want_t, const char *want_why) {
    char dir[] = "/tmp/mnemo-chat-tmpl-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char path[256];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    if (json) {
        FILE *f = fopen(path, "w");
        fputs(json, f);
        fclose(f);
    }
    mnemo_chat_template t = MNEMO_CHAT_PLAIN; /* never the answer: *out must be written */
    char why[512] = "x";
    mnemo_status st = mnemo_chat_template_detect(dir, &t, why, sizeof why);
    CHECK(st == want && t == want_t && (want_why ? strstr(why, want_why) && strstr(why, path) : !why[0]),
          "detect %s: %s, %s (%s)", json ? json : "(no file)", mnemo_status_str(st), mnemo_chat_template_name(t),
          why);
    unlink(path);
    rmdir(dir);
}

static void test_detect(void) {
    detect_case(NULL, MNEMO_ERR_IO, MNEMO_CHAT_LLAMA2, NULL);
    detect_case("{\"bos_token\":\"<s>\"}", MNEMO_ERR_IO, MNEMO_CHAT_LLAMA2, NULL);
    detect_case("{\"chat_template\":\"{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}\"}", MNEMO_OK,
                MNEMO_CHAT_LLAMA2, NULL);
    detect_case("{\"chat_template\":[{\"name\":\"tool_use\",\"template\":\"[INST]\"},"
                "{\"name\":\"default\",\"template\":\"<|im_start|>{{ m }}\"}]}",
                MNEMO_OK, MNEMO_CHAT_CHATML, NULL);
    detect_case("{\"chat_template\":\"{{ '<|start_header_id|>' + m.role }}\"}", MNEMO_OK, MNEMO_CHAT_LLAMA3, NULL);
    detect_case("{\"chat_template\":\"<|user|>{{ m }}\"}", MNEMO_ERR_UNSUPPORTED, MNEMO_CHAT_LLAMA2,
                "is not one mnemo knows");
    detect_case("not json", MNEMO_ERR_FORMAT, MNEMO_CHAT_LLAMA2, "is not valid JSON");
    mnemo_chat_template t = MNEMO_CHAT_PLAIN;
    CHECK(mnemo_chat_template_detect("/nonexistent", &t, NULL, 0) == MNEMO_ERR_IO && t == MNEMO_CHAT_LLAMA2,
          "a missing directory: nothing to recognise");
    CHECK(mnemo_chat_template_detect(NULL, &t, NULL, 0) == MNEMO_ERR_INVALID_ARG &&
              mnemo_chat_template_detect("/tmp", NULL, NULL, 0) == MNEMO_ERR_INVALID_ARG,
          "NULL arguments");
}

static void test_render(void) {
    /* the generation prompt (as mnemo-server renders): the server's own renders, answers marked */
    render(MNEMO_CHAT_LLAMA2, CONV, 4, true,
           "<BOS>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi <s> [/INST]{ Hello. <EOS>}<BOS>[INST] Bye [/INST]");
    render(MNEMO_CHAT_LLAMA2, CONV + 1, 1, true, "<BOS>[INST] Hi <s> [/INST]");
    render(MNEMO_CHAT_CHATML, CONV, 2, true,
           "<BOS><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi <s> <|im_end|>\n"
           "<|im_start|>assistant\n");
    render(MNEMO_CHAT_PLAIN, CONV, 3, true, "<BOS>system: Be brief.\nuser:  Hi <s> \nassistant:{ Hello.\n}assistant:");
    /* without it (training data): a conversation ending with the assistant */
    render(MNEMO_CHAT_LLAMA2, CONV, 3, false,
           "<BOS>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi <s> [/INST]{ Hello. <EOS>}");
    render(MNEMO_CHAT_CHATML, CONV, 3, false,
           "<BOS><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi <s> <|im_end|>\n<|im_start|>assistant\n"
           "{Hello.<|im_end|>}\n");
    render(MNEMO_CHAT_PLAIN, CONV + 1, 2, false, "<BOS>user:  Hi <s> \nassistant:{ Hello.\n}");
    /* Meta's Llama 3 template (contents trimmed), as its tokenizer_config.json renders it */
    render(MNEMO_CHAT_LLAMA3, CONV, 2, true,
           "<BOS><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user"
           "<|end_header_id|>\n\nHi <s><|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    render(MNEMO_CHAT_LLAMA3, CONV + 1, 2, false,
           "<BOS><|start_header_id|>user<|end_header_id|>\n\nHi <s><|eot_id|><|start_header_id|>assistant"
           "<|end_header_id|>\n\n{Hello.<|eot_id|>}");
    const mnemo_chat_msg two[] = {MSG(MNEMO_ROLE_USER, "a"), MSG(MNEMO_ROLE_ASSISTANT, "  b  "),
                                  MSG(MNEMO_ROLE_USER, "c"), MSG(MNEMO_ROLE_ASSISTANT, "")};
    render(MNEMO_CHAT_LLAMA2, two, 4, false, "<BOS>[INST] a [/INST]{ b <EOS>}<BOS>[INST] c [/INST]{  <EOS>}");
    render(MNEMO_CHAT_CHATML, two, 4, false,
           "<BOS><|im_start|>user\na<|im_end|>\n<|im_start|>assistant\n{  b  <|im_end|>}\n"
           "<|im_start|>user\nc<|im_end|>\n"
           "<|im_start|>assistant\n{<|im_end|>}\n");
    /* conversations that do not fit: the message named (or -1), nothing sent */
    const mnemo_chat_msg users[] = {MSG(MNEMO_ROLE_USER, "a"), MSG(MNEMO_ROLE_USER, "b")};
    misfit(MNEMO_CHAT_LLAMA2, users, 2, 1, "alternating user/assistant");
    misfit(MNEMO_CHAT_LLAMA2, CONV, 1, -1, "needs a user message after the system message");
    misfit(MNEMO_CHAT_LLAMA2, NULL, 0, -1, "needs a user message");
    const mnemo_chat_msg late_sys[] = {MSG(MNEMO_ROLE_USER, "a"), MSG(MNEMO_ROLE_ASSISTANT, "b"),
                                       MSG(MNEMO_ROLE_SYSTEM, "c")};
    misfit(MNEMO_CHAT_LLAMA2, late_sys, 3, 2, "message 2 is system");
    const mnemo_chat_msg bad_role[] = {MSG(MNEMO_ROLE_USER, "a"), {(mnemo_chat_role)5, "b", 1}};
    misfit(MNEMO_CHAT_CHATML, bad_role, 2, 1, "invalid role");
    misfit((mnemo_chat_template)9, CONV, 2, -1, "unknown chat template");
    misfit(MNEMO_CHAT_CHATML, CONV, -1, -1, "invalid arguments");
    CHECK(mnemo_chat_template_render(MNEMO_CHAT_CHATML, CONV, 2, true, NULL, NULL, NULL, 0) == MNEMO_ERR_INVALID_ARG,
          "no sink");
    /* chatml and plain take any role order */
    render(MNEMO_CHAT_CHATML, users, 2, false, "<BOS><|im_start|>user\na<|im_end|>\n<|im_start|>user\nb<|im_end|>\n");
    /* a sink that stops: cancelled, nothing after */
    for (int stop_at = 1; stop_at <= 3; stop_at++) {
        rendered r = {.stop_at = stop_at};
        mnemo_chat_sink sink = {on_text, on_special, &r};
        char err[128];
        mnemo_status st = mnemo_chat_template_render(MNEMO_CHAT_LLAMA2, CONV, 4, true, &sink, NULL, err, sizeof err);
        CHECK(st == MNEMO_ERR_CANCELLED && r.calls == stop_at, "a sink stopping at call %d: %s after %d calls",
              stop_at, mnemo_status_str(st), r.calls);
    }
}

int main(void) {
    test_names();
    test_detect();
    test_render();
    return test_summary();
}
