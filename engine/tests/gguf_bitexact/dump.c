/* llama.cpp's intermediate tensors for engine/tests/gguf_bitexact.rs: runs a prompt through
 * libllama as llama-server does (flash attention auto, f16 KV cache, 2 threads, n_ctx 4096), then
 * greedy decode steps one token at a time, and writes every tensor the engine's tap names
 * (model::checkpoint::tap) through the cb_eval callback: lines "T step name op ne0 ne1 ne2 ne3",
 * each followed by the values as f32 (little-endian) and a newline. Prints the greedy tokens.
 * usage: dump MODEL OUT N_GEN TOKEN... */
#include "ggml.h"
#include "llama.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static FILE *out;
static int step;

static int wanted(const char *name) {
    static const char *keep[] = {"attn_norm-", "Qcur-", "Kcur-", "Vcur-", "kqv_out-", "attn_out-",
                                 "ffn_inp-", "ffn_norm-", "ffn_gate-", "ffn_up-", "ffn_swiglu-",
                                 "ffn_out-", "l_out-", "result_norm"};
    if (strchr(name, '(')) return 0; /* views and permutes of the same values */
    for (size_t i = 0; i < sizeof keep / sizeof *keep; i++)
        if (strncmp(name, keep[i], strlen(keep[i])) == 0) return 1;
    return 0;
}

static bool cb(struct ggml_tensor *t, bool ask, void *ud) {
    (void)ud;
    if (ask) return t->type == GGML_TYPE_F32 && wanted(ggml_get_name(t));
    fprintf(out, "T %d %s %s %lld %lld %lld %lld\n", step, ggml_get_name(t), ggml_op_desc(t),
            (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3]);
    for (int64_t i3 = 0; i3 < t->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
                for (int64_t i0 = 0; i0 < t->ne[0]; i0++) {
                    const char *p = (const char *)t->data + i0 * t->nb[0] + i1 * t->nb[1] +
                                    i2 * t->nb[2] + i3 * t->nb[3];
                    fwrite(p, sizeof(float), 1, out);
                }
    fputc('\n', out);
    return true;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: dump MODEL OUT N_GEN TOKEN...\n");
        return 2;
    }
    out = fopen(argv[2], "wb");
    if (!out) return 1;
    const int n_gen = atoi(argv[3]);
    const int n = argc - 4;
    llama_token *toks = malloc(sizeof(llama_token) * (size_t)(n + n_gen + 1));
    for (int i = 0; i < n; i++) toks[i] = atoi(argv[4 + i]);
    llama_backend_init();
    struct llama_model *m = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!m) return 1;
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 4096;
    cp.n_batch = 2048;
    cp.n_ubatch = 512;
    cp.n_threads = 2;
    cp.n_threads_batch = 2;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_AUTO;
    cp.cb_eval = cb;
    struct llama_context *ctx = llama_init_from_model(m, cp);
    if (!ctx) return 1;
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(m));
    struct llama_batch b = llama_batch_get_one(toks, n);
    for (int s = 0; s <= n_gen; s++) {
        step = s;
        if (llama_decode(ctx, b)) return 1;
        const float *lg = llama_get_logits_ith(ctx, -1);
        int best = 0;
        for (int i = 1; i < n_vocab; i++)
            if (lg[i] > lg[best]) best = i;
        printf("%d ", best);
        toks[n + s] = best;
        b = llama_batch_get_one(&toks[n + s], 1);
    }
    printf("\n");
    fclose(out);
    llama_free(ctx);
    llama_model_free(m);
    return 0;
}
