/*
 * kernel_settings_api.c — mnemo_kernel_setting_count / mnemo_kernel_setting: the kernels' settings table
 * (kernels.h) as the public API shows it, for help texts and docs.
 */
#include "engine.h"
#include "kernels.h"

int mnemo_kernel_setting_count(void) {
    int n = 0;
    kern_settings_table(&n);
    return n;
}

bool mnemo_kernel_setting(int i, const char **name, const char **values, const char **doc) {
    int n = 0;
    const kern_setting_info *t = kern_settings_table(&n);
    if (i < 0 || i >= n) return false;
    if (name) *name = t[i].name;
    if (values) *values = t[i].values;
    if (doc) *doc = t[i].doc;
    return true;
}
