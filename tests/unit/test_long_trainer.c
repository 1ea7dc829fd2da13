/*
 * test_long_trainer.c — the long-context training methods through mnemo_trainer: LongLoRA's recipe (S²-Attn + LoRA+ + rope_scale 2)
 * and SMT (M 112, n 16, beta 1; shuffled, 2 micro-batches of 2 rows), each stopped after step 4 without a save
 * (what SIGKILL leaves: the step-3 checkpoint) and resumed: every step's loss and the final adapter bit for bit the
 * uninterrupted run's, with and without --recompute on the resumed half. Also: the written config.json (linear 2,
 * 256 positions; SMT: 129 positions, past the model's 128, RoPE unchanged).
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "test_util.h"

static char root[256], data[400], model[4600];

static int same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    for (int ca = 0, cb = 0; same && ca != EOF;) same = (ca = fgetc(fa)) == (cb = fgetc(fb));
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

static mnemo_train_params params(const char *out, int smt) {
    mnemo_train_params p = mnemo_train_default_params();
    p.data = data, p.out_dir = out, p.steps = 6, p.batch = 2, p.grad_accum = 2, p.seq_len = 32, p.lr = 1e-3;
    p.seed = 5, p.shuffle = true, p.lora_targets = "q,k,v,o", p.lora_rank = 4;
    if (smt) {
        p.smt = true, p.smt_memory = 112, p.smt_sampled = 16;
    } else {
        p.s2_attn = true, p.method = MNEMO_TRAIN_LORA_PLUS, p.rope_scale = 2;
    }
    return p;
}

/* Steps to `stop` (saving at step 3), or to the end with a final save (stop 0). Losses into loss[step-1]. */
static void run(mnemo_train_params *p, int stop, double *loss) {
    mnemo_model_params mp = mnemo_model_default_params();
    mp.device = MNEMO_DEVICE_CPU, mp.n_threads = 2;
    mnemo_trainer *t = NULL;
    mnemo_status st = mnemo_trainer_new(model, &mp, p, &t);
    while (st == MNEMO_OK && mnemo_trainer_steps_done(t) < (stop ? stop : mnemo_trainer_total_steps(t))) {
        mnemo_train_progress pr;
        if ((st = mnemo_trainer_step(t, &pr)) != MNEMO_OK) break;
        loss[pr.step - 1] = pr.loss;
        if (pr.step == 3) st = mnemo_trainer_save(t);
    }
    if (st == MNEMO_OK && !stop) st = mnemo_trainer_save(t);
    CHECK(st == MNEMO_OK, "%s: %s", p->out_dir, mnemo_trainer_error(t));
    mnemo_trainer_free(t);
}

static void check_method(int smt, int recompute) {
    char a[600], b[600], fa[700], fb[700];
    snprintf(a, sizeof a, "%s/%s_straight_%d", root, smt ? "smt" : "s2", recompute);
    snprintf(b, sizeof b, "%s/%s_resumed_%d", root, smt ? "smt" : "s2", recompute);
    double want[6], got[6];
    mnemo_train_params p = params(a, smt);
    run(&p, 0, want);
    p = params(b, smt);
    run(&p, 4, got);
    p.resume = true, p.recompute = recompute;
    run(&p, 0, got);
    int differ = 0;
    for (int i = 0; i < 6; i++) differ += memcmp(&want[i], &got[i], sizeof(double)) != 0;
    CHECK(differ == 0, "%s recompute %d: %d of 6 losses differ after a resume", smt ? "SMT" : "S2", recompute, differ);
    const char *files[3] = {"adapter_model.safetensors", "config.json", smt ? NULL : "trainable_params.safetensors"};
    for (int i = 0; i < 3 && files[i]; i++) {
        snprintf(fa, sizeof fa, "%s/%s", a, files[i]);
        snprintf(fb, sizeof fb, "%s/%s", b, files[i]);
        CHECK(same_file(fa, fb), "%s: %s differs after a resume", smt ? "SMT" : "S2", files[i]);
    }
    printf("%s%s: losses %.5f .. %.5f, resumed at step 3 bit for bit: %s\n", smt ? "SMT" : "S2-Attn + LoRA+ + PI x2",
           recompute ? " (resumed with --recompute)" : "", want[0], want[5], differ ? "no" : "yes");
    snprintf(fa, sizeof fa, "%s/config.json", a);
    json_t *c = json_load_file(fa, 0, NULL);
    json_t *rs = json_object_get(c, "rope_scaling");
    int64_t mp = json_integer_value(json_object_get(c, "max_position_embeddings"));
    if (smt)
        CHECK(mp == 112 + 32 + 1 - 16 && (!rs || json_is_null(rs)), "SMT config: %lld positions", (long long)mp);
    else
        CHECK(mp == 256 && json_real_value(json_object_get(rs, "factor")) == 2.0, "S2 config: %lld positions",
              (long long)mp);
    json_decref(c);
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/test_long_trainer_XXXXXX");
    if (!mkdtemp(root)) return 1;
    snprintf(model, sizeof model, "%s/models/gqa", test_fixtures());
    char src[4600];
    snprintf(src, sizeof src, "%s/train/data/train.txt", test_fixtures());
    snprintf(data, sizeof data, "%s/long.txt", root);
    FILE *in = fopen(src, "rb"), *out = fopen(data, "wb");
    char buf[4096];
    size_t n = in ? fread(buf, 1, sizeof buf, in) : 0;
    for (int i = 0; out && i < 8; i++) fwrite(buf, 1, n, out), fputc('\n', out);
    if (in) fclose(in);
    if (out) fclose(out);
    CHECK(n > 0, "%s", src);
    check_method(0, 0);
    check_method(0, 1);
    check_method(1, 0);
    check_method(1, 1);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", root);
    return test_summary();
}
