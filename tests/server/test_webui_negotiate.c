/*
 * test_webui_negotiate.c — the web page's header decisions without sockets: when a reply may be gzip
 * (Accept-Encoding q-values, "*", an explicit refusal) and when If-None-Match means the client's copy stands.
 */
#include "test_util.h"
#include "webui_negotiate.h"

static void test_accept_encoding(void) {
    CHECK(!webui_accepts_gzip(NULL), "no header: identity");
    CHECK(!webui_accepts_gzip(""), "empty: identity");
    CHECK(webui_accepts_gzip("gzip"), "gzip");
    CHECK(webui_accepts_gzip("gzip, deflate, br, zstd"), "a browser's list");
    CHECK(webui_accepts_gzip("deflate,GZIP"), "case and no space");
    CHECK(webui_accepts_gzip("br;q=1.0, gzip;q=0.8, *;q=0.1"), "a q-value");
    CHECK(webui_accepts_gzip("x-gzip"), "the old name");
    CHECK(!webui_accepts_gzip("gzip;q=0"), "refused by q=0");
    CHECK(!webui_accepts_gzip("gzip; q=0.000, *"), "an explicit refusal wins over *");
    CHECK(webui_accepts_gzip("*"), "anything");
    CHECK(!webui_accepts_gzip("*;q=0"), "nothing but identity");
    CHECK(!webui_accepts_gzip("deflate, br"), "gzip not listed");
    CHECK(!webui_accepts_gzip("gzipx, xgzip"), "names that only contain gzip");
    CHECK(!webui_accepts_gzip("identity"), "identity only");
}

static void test_if_none_match(void) {
    const char *tag = "\"0123abcd-gz\"";
    CHECK(!webui_etag_matches(NULL, tag), "no header");
    CHECK(webui_etag_matches("\"0123abcd-gz\"", tag), "the same tag");
    CHECK(webui_etag_matches("W/\"0123abcd-gz\"", tag), "a weak copy matches (weak comparison)");
    CHECK(webui_etag_matches("\"zz\", \"0123abcd-gz\" ", tag), "in a list, trailing space");
    CHECK(webui_etag_matches("*", tag), "any");
    CHECK(!webui_etag_matches("\"0123abcd\"", tag), "the other representation's tag");
    CHECK(!webui_etag_matches("\"0123abcd-gz", tag), "unterminated");
    CHECK(!webui_etag_matches("0123abcd-gz", tag), "unquoted");
    CHECK(!webui_etag_matches("", tag), "empty");
}

int main(void) {
    test_accept_encoding();
    test_if_none_match();
    return test_summary();
}
