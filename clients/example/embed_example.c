/*
 * embed_example.c — the smallest complete program that embeds libengine: load a model, stream a greedy
 * completion, report why it stopped. Built against the installed library through pkg-config:
 *   cc embed_example.c $(pkg-config --cflags --libs libengine) -o embed_example
 */
#include <engine.h>
#include <stdio.h>

static bool print_token(const mnemo_token_event *ev, void *user) {
    (void)user;
    fwrite(ev->text, 1, ev->text_len, stdout);
    fflush(stdout);
    return true; /* false would stop generation */
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s MODEL_DIR PROMPT\n", argv[0]);
        return 2;
    }
    mnemo_model *model = NULL;
    mnemo_context *ctx = NULL;
    int rc = 1;
    if (mnemo_model_load(argv[1], NULL, &model) != MNEMO_OK) {
        fprintf(stderr, "load failed: %s\n", mnemo_model_error(model));
        goto out;
    }
    if (mnemo_context_new(model, NULL, &ctx) != MNEMO_OK) {
        fprintf(stderr, "context failed: %s\n", mnemo_context_error(ctx));
        goto out;
    }
    mnemo_generate_params gp = mnemo_generate_default_params();
    gp.sampling.temperature = 0.f; /* greedy */
    gp.max_tokens = 32;
    mnemo_generate_result res;
    if (mnemo_generate(ctx, argv[2], &gp, print_token, NULL, &res) != MNEMO_OK) {
        fprintf(stderr, "generate failed: %s\n", mnemo_context_error(ctx));
        goto out;
    }
    printf("\n[%d prompt tokens, %d generated, finish reason %d]\n", res.n_prompt_tokens, res.n_generated,
           (int)res.finish_reason);
    rc = 0;
out:
    mnemo_context_free(ctx);
    mnemo_model_free(model); /* both are no-ops on NULL */
    return rc;
}
