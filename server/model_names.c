/*
 * model_names.c — the served model's names (see model_names.h).
 */
#include "model_names.h"

#include <string.h>

#include "app.h"

bool model_is_alias(const server_app *app, const char *name) {
    for (int i = 0; i < app->n_aliases; i++)
        if (!strcmp(name, app->aliases[i])) return true;
    return false;
}

model_match model_resolve(const server_app *app, const char *requested, const char **name) {
    *name = app->alias;
    if (!requested || !*requested) return MODEL_BASE;
    if (model_is_alias(app, requested)) {
        *name = requested;
        return MODEL_BASE;
    }
    if (!strncmp(requested, "ft:", 3)) {
        *name = requested;
        return MODEL_FINETUNED;
    }
    return app->opts.model_name_strict ? MODEL_NOT_FOUND : MODEL_BASE;
}
