/*
 * rope_config.c — see rope_config.h. Written to a temporary name and renamed, like the other checkpoint files.
 */
#include "rope_config.h"

#include <jansson.h>
#include <stdio.h>

int rope_config_write(const char *model_dir, const char *out_dir, double factor, int32_t max_positions, char *err,
                      size_t errlen) {
    char src[4200], dst[4200], tmp[4300];
    snprintf(src, sizeof src, "%s/config.json", model_dir);
    snprintf(dst, sizeof dst, "%s/config.json", out_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", dst);
    json_error_t je;
    json_t *root = json_load_file(src, 0, &je);
    if (!json_is_object(root)) {
        snprintf(err, errlen, "%s: %s", src, root ? "not a JSON object" : je.text);
        json_decref(root);
        return -1;
    }
    json_t *rp = json_object_get(root, "rope_parameters"); /* transformers >= 5 reads this one: the same there */
    if (factor > 0 && json_is_object(rp))
        json_object_set_new(rp, "rope_type", json_string("linear")), json_object_set_new(rp, "factor", json_real(factor));
    int rc = (factor > 0 && json_object_set_new(root, "rope_scaling",
                                                json_pack("{s:s, s:f}", "type", "linear", "factor", factor))) ||
             json_object_set_new(root, "max_position_embeddings", json_integer(max_positions)) ||
             json_dump_file(root, tmp, JSON_INDENT(2)) || rename(tmp, dst);
    json_decref(root);
    if (rc) {
        snprintf(err, errlen, "%s: cannot write the position-interpolated config", dst);
        remove(tmp);
        return -1;
    }
    return 0;
}
