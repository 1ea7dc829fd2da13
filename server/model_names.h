/*
 * model_names.h — which model a request's "model" names, and the name its response carries.
 *
 * One base model is served under its names (--alias, repeatable; the first is the name /v1/models lists first,
 * default the model directory's name); fine-tuned models are "ft:BASE:SUFFIX:JOB" (finetune_jobs.c). Clients
 * written for OpenAI send names like "gpt-4o-mini": unless --model-name-strict, a name that is neither the base's
 * nor a fine-tuned one ("ft:" prefix) is served by the base model, as llama.cpp does, and the response names the
 * base as served. A response names exactly the alias or fine-tuned model that was asked for.
 */
#ifndef MNEMO_SERVER_MODEL_NAMES_H
#define MNEMO_SERVER_MODEL_NAMES_H

#include <stdbool.h>

typedef struct server_app server_app;

typedef enum {
    MODEL_BASE = 0,      /* the base model (omitted, an alias, or an unknown name when not strict) */
    MODEL_FINETUNED = 1, /* an "ft:" name: the caller looks its adapter up */
    MODEL_NOT_FOUND = 2, /* unknown, with --model-name-strict */
} model_match;

/* requested may be NULL (omitted). *name: what the response's "model" says (points into app or requested). */
model_match model_resolve(const server_app *app, const char *requested, const char **name);
/* True when name is one of the base model's names. */
bool model_is_alias(const server_app *app, const char *name);

#endif
