/*
 * spm_binding.cc — the tokenizer.h C API over libsentencepiece (the only C++ in libengine).
 *
 * Design:
 *  - A thin, boundary-only binding: every entry point is extern "C", takes and returns plain C types, and
 *    wraps its body in try/catch(...) so no C++ exception (std::bad_alloc from a std::string/vector, anything
 *    libsentencepiece throws) ever unwinds into C. Failures become -1 / false / NULL.
 *  - Results handed to C are malloc'ed copies (the caller free()s them); no C++ object escapes.
 *  - Ids are range-checked here before reaching SentencePiece: its IsControl/IsByte/IdToPiece index the
 *    model's piece array without bounds checks.
 *  - The special ids are looked up once at load; after that the struct is never written, so concurrent
 *    calls are safe (SentencePieceProcessor's Encode/Decode/lookups are const).
 */
#include <sentencepiece_processor.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include <sys/stat.h>

extern "C" {
#include "tokenizer.h"
}

struct tokenizer {
    sentencepiece::SentencePieceProcessor sp;
    int32_t vocab;
    int32_t bos, eos, unk, pad;
};

namespace {

void set_err(char *err, size_t errlen, const char *fmt, const char *a, const char *b) {
    if (err && errlen) std::snprintf(err, errlen, fmt, a, b);
}

bool in_range(const tokenizer *tok, int32_t id) { return tok && id >= 0 && id < tok->vocab; }

/* Copies bytes into a fresh NUL-terminated malloc'ed buffer; NULL when out of memory. */
char *dup_bytes(const char *p, size_t n) {
    char *s = static_cast<char *>(std::malloc(n + 1));
    if (!s) return nullptr;
    if (n) std::memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

}  // namespace

extern "C" {


/* The special ids SentencePiece read from the model (-1 where the model has none). */
static void take_special_ids(tokenizer *tok) {
    tok->bos = tok->sp.bos_id();
    tok->eos = tok->sp.eos_id();
    tok->unk = tok->sp.unk_id();
    tok->pad = tok->sp.pad_id();
}
int tokenizer_load(const char *model_path, tokenizer **out, char *err, size_t errlen) {
    if (out) *out = nullptr;
    if (!model_path || !out) {
        set_err(err, errlen, "%s%s", "tokenizer_load: NULL argument", "");
        return -1;
    }
    /* Check the file ourselves first: SentencePiece's own message for a missing file is less direct. */
    struct stat st;
    if (stat(model_path, &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            set_err(err, errlen, "%s: no such file%s", model_path, "");
        else
            set_err(err, errlen, "%s: cannot open (%s)", model_path, std::strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        set_err(err, errlen, "%s: not a regular file%s", model_path, "");
        return -1;
    }
    tokenizer *tok = nullptr;
    try {
        tok = new (std::nothrow) tokenizer();
        if (!tok) {
            set_err(err, errlen, "%s: out of memory%s", model_path, "");
            return -1;
        }
        const auto status = tok->sp.Load(model_path);
        if (!status.ok()) {
            std::string msg = status.message() ? status.message() : "";
            while (!msg.empty() && (msg.back() == ' ' || msg.back() == '\n')) msg.pop_back();  /* spm pads it */
            set_err(err, errlen, "%s: not a SentencePiece model (%s)", model_path, msg.c_str());
            delete tok;
            return -1;
        }
        /* An empty/garbage protobuf can parse "successfully"; a model without pieces is not usable. */
        const int n = tok->sp.GetPieceSize();
        if (n <= 0) {
            set_err(err, errlen, "%s: not a SentencePiece model (%s)", model_path, "empty vocabulary");
            delete tok;
            return -1;
        }
        tok->vocab = n;
        take_special_ids(tok);
        *out = tok;
        return 0;
    } catch (const std::exception &e) {
        set_err(err, errlen, "%s: not a SentencePiece model (%s)", model_path, e.what());
    } catch (...) {
        set_err(err, errlen, "%s: not a SentencePiece model (%s)", model_path, "unknown error");
    }
    delete tok;
    return -1;
}

int tokenizer_load_proto(const void *bytes, size_t len, const char *what, tokenizer **out, char *err,
                         size_t errlen) {
    if (out) *out = nullptr;
    if (!bytes || !what || !out) {
        set_err(err, errlen, "%s%s", "tokenizer_load_proto: NULL argument", "");
        return -1;
    }
    tokenizer *tok = nullptr;
    try {
        tok = new (std::nothrow) tokenizer();
        if (!tok) {
            set_err(err, errlen, "%s: out of memory%s", what, "");
            return -1;
        }
        const auto status = tok->sp.LoadFromSerializedProto(std::string_view((const char *)bytes, len));
        if (!status.ok() || tok->sp.GetPieceSize() <= 0) {
            std::string msg = status.ok() ? "empty vocabulary" : status.message() ? status.message() : "";
            while (!msg.empty() && (msg.back() == ' ' || msg.back() == '\n')) msg.pop_back();
            set_err(err, errlen, "%s: not a usable SentencePiece model (%s)", what, msg.c_str());
            delete tok;
            return -1;
        }
        tok->vocab = tok->sp.GetPieceSize();
        take_special_ids(tok);
        *out = tok;
        return 0;
    } catch (const std::exception &e) {
        set_err(err, errlen, "%s: not a usable SentencePiece model (%s)", what, e.what());
    } catch (...) {
        set_err(err, errlen, "%s: not a usable SentencePiece model (%s)", what, "unknown error");
    }
    delete tok;
    return -1;
}

int tokenizer_piece_info(const tokenizer *tok, int32_t id, float *score, int *type) {
    if (!tok || id < 0 || id >= tok->vocab) return -1;
    try {
        *score = tok->sp.GetScore(id);
        *type = tok->sp.IsUnknown(id) ? 2 : tok->sp.IsControl(id) ? 3 : tok->sp.IsUnused(id) ? 5
              : tok->sp.IsByte(id) ? 6 : 1;
        return 0;
    } catch (...) {
        return -1;
    }
}

void tokenizer_free(tokenizer *tok) {
    try {
        delete tok;
    } catch (...) {
        /* Destructors should not throw; if one does, leaking beats crashing into C. */
    }
}

int32_t tokenizer_vocab_size(const tokenizer *tok) { return tok ? tok->vocab : 0; }
int32_t tokenizer_bos_id(const tokenizer *tok) { return tok ? tok->bos : -1; }
int32_t tokenizer_eos_id(const tokenizer *tok) { return tok ? tok->eos : -1; }
int32_t tokenizer_unk_id(const tokenizer *tok) { return tok ? tok->unk : -1; }
int32_t tokenizer_pad_id(const tokenizer *tok) { return tok ? tok->pad : -1; }

int tokenizer_encode(const tokenizer *tok, const char *text, size_t len, bool add_bos, int32_t **ids,
                     size_t *n) {
    if (!tok || !ids || !n || (!text && len)) return -1;
    *ids = nullptr;
    *n = 0;
    try {
        std::vector<int> v;
        const auto status = tok->sp.Encode(std::string_view(text ? text : "", len), &v);
        if (!status.ok()) return -1;
        /* A model without BOS has nothing to prepend: add_bos is then a no-op rather than an error. */
        const size_t extra = (add_bos && tok->bos >= 0) ? 1 : 0;
        const size_t total = v.size() + extra;
        int32_t *buf = static_cast<int32_t *>(std::malloc((total ? total : 1) * sizeof(int32_t)));
        if (!buf) return -1;
        if (extra) buf[0] = tok->bos;
        for (size_t i = 0; i < v.size(); i++) buf[extra + i] = static_cast<int32_t>(v[i]);
        *ids = buf;
        *n = total;
        return 0;
    } catch (...) {
        return -1;
    }
}

int tokenizer_decode(const tokenizer *tok, const int32_t *ids, size_t n, char **text, size_t *len) {
    if (!tok || !text || !len || (!ids && n)) return -1;
    *text = nullptr;
    *len = 0;
    for (size_t i = 0; i < n; i++)
        if (!in_range(tok, ids[i])) return -1;
    try {
        std::vector<int> v(ids, ids + n);
        std::string s;
        const auto status = tok->sp.Decode(v, &s);
        if (!status.ok()) return -1;
        char *buf = dup_bytes(s.data(), s.size());
        if (!buf) return -1;
        *text = buf;
        *len = s.size();
        return 0;
    } catch (...) {
        return -1;
    }
}

int tokenizer_id_to_piece(const tokenizer *tok, int32_t id, char **piece, size_t *len) {
    if (!piece || !len) return -1;
    *piece = nullptr;
    *len = 0;
    if (!in_range(tok, id)) return -1;
    try {
        const std::string &p = tok->sp.IdToPiece(id);
        char *buf = dup_bytes(p.data(), p.size());
        if (!buf) return -1;
        *piece = buf;
        *len = p.size();
        return 0;
    } catch (...) {
        return -1;
    }
}

int32_t tokenizer_piece_to_id(const tokenizer *tok, const char *piece) {
    if (!tok || !piece) return -1;
    try {
        /* PieceToId maps unknown pieces to unk: only a round trip back to the same piece is a real hit. */
        const int id = tok->sp.PieceToId(piece);
        if (!in_range(tok, id)) return -1;
        return tok->sp.IdToPiece(id) == piece ? id : -1;
    } catch (...) {
        return -1;
    }
}

bool tokenizer_is_control(const tokenizer *tok, int32_t id) {
    if (!in_range(tok, id)) return false;
    try {
        return tok->sp.IsControl(id);
    } catch (...) {
        return false;
    }
}

bool tokenizer_is_byte(const tokenizer *tok, int32_t id) {
    if (!in_range(tok, id)) return false;
    try {
        return tok->sp.IsByte(id);
    } catch (...) {
        return false;
    }
}

}  // extern "C"
