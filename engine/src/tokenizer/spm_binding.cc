/*
 * spm_binding.cc — the SentencePiece implementation of the tokenizer seam (tokenizer_impl.h) over libsentencepiece
 * (the only C++ in libengine).
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
 *  - Long texts are encoded in pieces of about TOKENIZER_ENCODE_CHUNK bytes: SentencePiece holds ~150 bytes of working
 *    memory per input byte, so one 7 MB text took a gigabyte. A piece boundary is put only where the model can
 *    never join tokens across it: right before a single ASCII space between two other printable ASCII
 *    characters, in a model trained with split_by_whitespace (no piece crosses a word start) and whitespace as
 *    a prefix. The space then starts the next piece's first word as it would have in the whole text: with
 *    remove_extra_whitespaces the normalizer strips it and the dummy prefix puts the "▁" back; without, it is
 *    kept, and a second processor without the dummy prefix encodes every piece after the first. Models whose
 *    flags allow no such boundary are encoded whole. test_tokenizer checks whole == pieces on every fixture.
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
#include "tokenizer_impl.h"
}

struct spm_model {
    sentencepiece::SentencePieceProcessor sp;
    sentencepiece::SentencePieceProcessor sp_next; /* without the dummy prefix: pieces after the first */
    bool chunkable; /* long texts may be encoded in pieces (see the file comment) */
    bool use_next;  /* pieces after the first go through sp_next */
    int32_t vocab;
    int32_t bos, eos, unk, pad;
};

namespace {

void set_err(char *err, size_t errlen, const char *fmt, const char *a, const char *b) {
    if (err && errlen) std::snprintf(err, errlen, fmt, a, b);
}

bool in_range(const spm_model *tok, int32_t id) { return tok && id >= 0 && id < tok->vocab; }

const spm_model *model_of(const tokenizer *t) { return static_cast<const spm_model *>(t->impl); }

/* Copies bytes into a fresh NUL-terminated malloc'ed buffer; NULL when out of memory. */
char *dup_bytes(const char *p, size_t n) {
    char *s = static_cast<char *>(std::malloc(n + 1));
    if (!s) return nullptr;
    if (n) std::memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

/* Reads a varint at p (protobuf wire format); false past end. */
bool read_varint(const unsigned char *&p, const unsigned char *end, uint64_t &v) {
    v = 0;
    for (int shift = 0; shift < 64 && p < end; shift += 7) {
        const unsigned char b = *p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return true;
    }
    return false;
}

/* Calls f(field, value) for every varint field of a serialized message, and g(field, bytes, len) for every
 * length-delimited one; false when the bytes are not a well-formed message. */
template <class F, class G>
bool walk_proto(const unsigned char *p, const unsigned char *end, F f, G g) {
    while (p < end) {
        uint64_t key, v;
        if (!read_varint(p, end, key)) return false;
        const uint32_t field = (uint32_t)(key >> 3);
        switch (key & 7) {
        case 0:
            if (!read_varint(p, end, v)) return false;
            f(field, v);
            break;
        case 1:
            if (end - p < 8) return false;
            p += 8;
            break;
        case 2:
            if (!read_varint(p, end, v) || v > (uint64_t)(end - p)) return false;
            g(field, p, (size_t)v);
            p += v;
            break;
        case 5:
            if (end - p < 4) return false;
            p += 4;
            break;
        default:
            return false;
        }
    }
    return true;
}

/* Decides whether long texts may be encoded in pieces, from the model's normalizer and trainer flags
 * (sentencepiece_model.proto: ModelProto.trainer_spec = 2, .normalizer_spec = 3; TrainerSpec.split_by_whitespace
 * = 22, .treat_whitespace_as_suffix = 24; NormalizerSpec.add_dummy_prefix = 3, .remove_extra_whitespaces = 4;
 * proto2 defaults true, false, true, true). Debian ships no header for these messages, so the bytes are read. */
void plan_chunking(spm_model *tok) {
    tok->chunkable = tok->use_next = false;
    const std::string proto = tok->sp.serialized_model_proto();
    bool split_ws = true, ws_suffix = false, dummy = true, remove_extra = true;
    const auto *b = reinterpret_cast<const unsigned char *>(proto.data());
    const bool ok = walk_proto(
        b, b + proto.size(), [](uint32_t, uint64_t) {},
        [&](uint32_t field, const unsigned char *m, size_t n) {
            if (field == 2)
                walk_proto(m, m + n, [&](uint32_t f, uint64_t v) {
                    if (f == 22) split_ws = v != 0;
                    if (f == 24) ws_suffix = v != 0;
                }, [](uint32_t, const unsigned char *, size_t) {});
            if (field == 3)
                walk_proto(m, m + n, [&](uint32_t f, uint64_t v) {
                    if (f == 3) dummy = v != 0;
                    if (f == 4) remove_extra = v != 0;
                }, [](uint32_t, const unsigned char *, size_t) {});
        });
    if (!ok || !split_ws || ws_suffix || (remove_extra && !dummy)) return;
    if (dummy && !remove_extra) {
        /* A second NormalizerSpec field is merged into the first (protobuf's rule for repeated message
         * fields): only add_dummy_prefix = false changes. */
        static const char no_dummy[] = {0x1a, 0x02, 0x18, 0x00};
        if (!tok->sp_next.LoadFromSerializedProto(proto + std::string(no_dummy, sizeof no_dummy)).ok()) return;
        tok->use_next = true;
    }
    tok->chunkable = true;
}

bool printable_ascii(char c) { return c > ' ' && c < 0x7f; }

/* The end of the piece that starts at from: the first boundary at or past from + target, else len. */
size_t piece_end(const char *text, size_t len, size_t from, size_t target) {
    for (size_t i = from + target; i + 1 < len; i++)
        if (text[i] == ' ' && printable_ascii(text[i - 1]) && printable_ascii(text[i + 1])) return i;
    return len;
}

/* The special ids SentencePiece read from the model (-1 where the model has none). */
void take_special_ids(spm_model *m) {
    m->bos = m->sp.bos_id();
    m->eos = m->sp.eos_id();
    m->unk = m->sp.unk_id();
    m->pad = m->sp.pad_id();
}

void spm_destroy(void *impl) {
    try {
        delete static_cast<spm_model *>(impl);
    } catch (...) {
        /* Destructors should not throw; if one does, leaking beats crashing into C. */
    }
}

int spm_piece_info(const tokenizer *t, int32_t id, float *score, int *type) {
    const spm_model *tok = model_of(t);
    try {
        *score = tok->sp.GetScore(id);
        *type = tok->sp.IsUnknown(id) ? 2 : tok->sp.IsControl(id) ? 3 : tok->sp.IsUnused(id) ? 5
              : tok->sp.IsByte(id) ? 6 : 1;
        return 0;
    } catch (...) {
        return -1;
    }
}

int spm_encode(const tokenizer *t, const char *text, size_t len, bool add_bos, bool parse_special,
               size_t piece_bytes, int32_t **ids, size_t *n) {
    const spm_model *tok = model_of(t);
    if (!tok->chunkable || piece_bytes == 0) piece_bytes = len;
    int32_t *buf = nullptr;
    try {
        /* A model without BOS has nothing to prepend: add_bos is then a no-op rather than an error. */
        size_t total = (add_bos && tok->bos >= 0) ? 1 : 0, cap = total + len / 3 + 16;
        buf = static_cast<int32_t *>(std::malloc(cap * sizeof(int32_t)));
        if (!buf) return -1;
        if (total) buf[0] = tok->bos;
        std::vector<int> v;
        for (size_t from = 0; from < len || from == 0;) {
            const size_t to = piece_end(text, len, from, piece_bytes);
            const auto &sp = from > 0 && tok->use_next ? tok->sp_next : tok->sp;
            if (!sp.Encode(std::string_view(text + from, to - from), &v).ok()) {
                std::free(buf);
                return -1;
            }
            if (total + v.size() > cap) {
                cap = (total + v.size()) * 2;
                int32_t *p = static_cast<int32_t *>(std::realloc(buf, cap * sizeof(int32_t)));
                if (!p) {
                    std::free(buf);
                    return -1;
                }
                buf = p;
            }
            for (size_t i = 0; i < v.size(); i++) buf[total++] = static_cast<int32_t>(v[i]);
            if (to >= len) break;
            from = to;
        }
        *ids = buf;
        *n = total;
        return 0;
    } catch (...) {
        std::free(buf);
        return -1;
    }
}

bool spm_encodes_in_pieces(const tokenizer *t) { return model_of(t)->chunkable; }

int spm_decode(const tokenizer *t, const int32_t *ids, size_t n, char **text, size_t *len) {
    const spm_model *tok = model_of(t);
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

int spm_id_to_piece(const tokenizer *t, int32_t id, char **piece, size_t *len) {
    try {
        const std::string &p = model_of(t)->sp.IdToPiece(id);
        char *buf = dup_bytes(p.data(), p.size());
        if (!buf) return -1;
        *piece = buf;
        *len = p.size();
        return 0;
    } catch (...) {
        return -1;
    }
}

int32_t spm_piece_to_id(const tokenizer *t, const char *piece) {
    const spm_model *tok = model_of(t);
    try {
        /* PieceToId maps unknown pieces to unk: only a round trip back to the same piece is a real hit. */
        const int id = tok->sp.PieceToId(piece);
        if (!in_range(tok, id)) return -1;
        return tok->sp.IdToPiece(id) == piece ? id : -1;
    } catch (...) {
        return -1;
    }
}

bool spm_is_control(const tokenizer *t, int32_t id) {
    try {
        return model_of(t)->sp.IsControl(id);
    } catch (...) {
        return false;
    }
}

bool spm_is_byte(const tokenizer *t, int32_t id) {
    try {
        return model_of(t)->sp.IsByte(id);
    } catch (...) {
        return false;
    }
}

const tokenizer_ops spm_ops = {
    spm_destroy, spm_encode, spm_encodes_in_pieces, spm_decode, spm_id_to_piece, spm_piece_to_id,
    spm_is_control, spm_is_byte, spm_piece_info, nullptr,
};

/* Wraps a loaded model in the tokenizer seam; takes ownership. NULL (model freed) when out of memory. */
tokenizer *wrap(spm_model *m) {
    tokenizer *t = tokenizer_wrap(&spm_ops, m, TOKENIZER_SPM);
    if (!t) {
        spm_destroy(m);
        return nullptr;
    }
    t->vocab = m->vocab;
    t->bos = m->bos;
    t->eos = m->eos;
    t->unk = m->unk;
    t->pad = m->pad;
    return t;
}

}  // namespace

extern "C" {

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
    spm_model *tok = nullptr;
    try {
        tok = new (std::nothrow) spm_model();
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
        plan_chunking(tok);
        if (!(*out = wrap(tok))) {
            set_err(err, errlen, "%s: out of memory%s", model_path, "");
            return -1;
        }
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
    spm_model *tok = nullptr;
    try {
        tok = new (std::nothrow) spm_model();
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
        plan_chunking(tok);
        if (!(*out = wrap(tok))) {
            set_err(err, errlen, "%s: out of memory%s", what, "");
            return -1;
        }
        return 0;
    } catch (const std::exception &e) {
        set_err(err, errlen, "%s: not a usable SentencePiece model (%s)", what, e.what());
    } catch (...) {
        set_err(err, errlen, "%s: not a usable SentencePiece model (%s)", what, "unknown error");
    }
    delete tok;
    return -1;
}

}  // extern "C"
