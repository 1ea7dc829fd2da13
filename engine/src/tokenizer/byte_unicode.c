/* byte_unicode.c — see byte_unicode.h. */
#include <string.h>

#include "byte_unicode.h"

/* GPT-2 keeps the printable Latin-1 bytes as themselves and moves the rest (controls, space, DEL, NBSP, soft
 * hyphen) to U+0100 upwards in byte order. */
static bool keeps_itself(unsigned b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174; }

static uint32_t byte_cp(uint8_t b) {
    if (keeps_itself(b)) return b;
    uint32_t n = 0;
    for (unsigned x = 0; x < b; x++) n += !keeps_itself(x);
    return 256 + n;
}

size_t byte_to_unicode_utf8(uint8_t b, char out[2]) {
    uint32_t cp = byte_cp(b);
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

int unicode_to_byte(uint32_t cp) {
    if (cp < 256) return keeps_itself(cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1; /* 68 bytes are moved */
    for (unsigned b = 0, n = 0; b < 256; b++)
        if (!keeps_itself(b) && n++ == cp - 256) return (int)b;
    return -1;
}

/* Length of the valid prefix of a character at s and the length it needs (0 when s[0] cannot start one). */
static size_t utf8_valid_prefix(const unsigned char *s, size_t n, size_t *need) {
    unsigned char c = s[0], lo = 0x80, hi = 0xBF;
    if (c < 0x80) {
        *need = 1;
        return 1;
    }
    if (c >= 0xC2 && c <= 0xDF) *need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        *need = 3;
        if (c == 0xE0) lo = 0xA0; /* overlong */
        if (c == 0xED) hi = 0x9F; /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        *need = 4;
        if (c == 0xF0) lo = 0x90; /* overlong */
        if (c == 0xF4) hi = 0x8F; /* above U+10FFFF */
    } else {
        *need = 0;
        return 0;
    }
    size_t k = 1;
    if (k < n && k < *need && s[k] >= lo && s[k] <= hi) k++;
    else return k;
    while (k < n && k < *need && s[k] >= 0x80 && s[k] <= 0xBF) k++;
    return k;
}

size_t utf8_next(const unsigned char *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    size_t need, k = utf8_valid_prefix(s, n, &need);
    if (need == 0 || k < need) return 0;
    uint32_t v = need == 1 ? s[0] : need == 2 ? s[0] & 0x1F : need == 3 ? s[0] & 0x0F : s[0] & 0x07;
    for (size_t i = 1; i < need; i++) v = v << 6 | (s[i] & 0x3F);
    *cp = v;
    return need;
}

bool utf8_proper_prefix(const unsigned char *b, size_t n) {
    if (n == 0 || n > 3) return false;
    size_t need, k = utf8_valid_prefix(b, n, &need);
    return need > n && k == n;
}

size_t utf8_lossy(const unsigned char *s, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t need, k = utf8_valid_prefix(s + i, n - i, &need);
        if (need && k == need) {
            memcpy(out + o, s + i, k);
            o += k;
            i += k;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += k ? k : 1;
        }
    }
    return o;
}
