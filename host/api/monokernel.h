/* monokernel: the embeddable engine, C API.
 *
 * Open a Hugging Face model directory, create chat sessions, generate with a per-token callback. The model
 * runs as one persistent GPU kernel when the library was built with GPU support and a GPU is present;
 * otherwise on the CPU emulator of the same schedule (slow, but the same tokens).
 *
 *   mk_model* model;
 *   char err[512];
 *   if (mk_model_open("path/to/model", NULL, &model, err, sizeof err) != MK_OK) { puts(err); return 1; }
 *   mk_session* session;
 *   mk_session_create(model, NULL, &session);
 *   mk_generate(session, "Hello!", NULL, print_text, NULL);   // streams the reply
 *   mk_session_destroy(session);
 *   mk_model_close(model);
 *
 * Errors. Every function that can fail returns an mk_status; MK_OK is 0. The message of a failure is in
 * errbuf (mk_model_open), mk_session_last_error(session) (session functions) or mk_model_last_error()
 * (model functions). No function aborts or lets a C++ exception escape.
 *
 * Ownership. mk_model_open and mk_session_create hand out handles that the caller releases with
 * mk_model_close / mk_session_destroy. A session keeps the model's weights alive: the model handle may be
 * closed before its sessions. Strings passed in are copied; strings returned (errors, names) belong to the
 * library and stay valid until the next call on the same handle (mk_model_last_error: from the same thread).
 * The text given to a token callback is valid only during the callback.
 *
 * Threads. A model may be used from several threads: mk_tokenize, mk_detokenize, mk_session_create and the
 * accessors are thread-safe. A session is used by one thread at a time: mk_generate* or mk_session_reset
 * called while another of them runs on the session (from another thread, or from inside its token
 * callback) returns MK_ERROR_BUSY instead of racing; mk_session_stats and mk_session_last_error may be
 * called from the callback but not from another thread during a call. mk_session_cancel is the exception:
 * any thread may call it at any time while the session exists. Callbacks run on the thread that called
 * mk_generate* / mk_model_open.
 *
 * Multi-turn. A session keeps the conversation in its KV cache: each mk_generate ingests only the new turn,
 * not the history. mk_session_reset starts a new conversation.
 *
 * Hangs. When no part of the GPU kernel makes progress for 10 s, the library stops the kernel and
 * mk_generate returns MK_ERROR_BACKEND with a message naming the stuck instruction and the counter it
 * waits for (the CPU emulator reports a deadlock the same way). The session stays usable: the failed turn
 * is not part of the conversation (text already passed to the callback included), and the next
 * mk_generate rebuilds the KV cache from the conversation so far. If the kernel does not stop within
 * 5 s of being told to, the message says so: the GPU stays occupied until the process exits and every
 * later generation fails with MK_ERROR_BACKEND. The library never exits the process.
 *
 * Limits. Model files are checked against documented limits before anything is sized from them
 * (docs/limits.md); a model beyond them gets MK_ERROR_BAD_MODEL naming the file and the key.
 */
#ifndef MONOKERNEL_H
#define MONOKERNEL_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define MK_API __attribute__((visibility("default")))
#else
#define MK_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define MK_API_VERSION 1

typedef enum mk_status {
  MK_OK = 0,
  MK_ERROR_INVALID_ARGUMENT = 1, /* a NULL handle or pointer, a parameter out of range, a bad message list,
                                    a prompt whose tokens the model's vocabulary lacks */
  MK_ERROR_NOT_FOUND = 2,        /* the model directory does not exist or is not a directory */
  MK_ERROR_BAD_MODEL = 3,        /* model, tokenizer or chat template files unusable or beyond the limits (the
                                    message names the file and key) */
  MK_ERROR_CONTEXT_FULL = 4,     /* the turn does not fit the context left; the session is unchanged */
  MK_ERROR_BACKEND = 5,          /* the GPU backend failed: no GPU when one was required, out of device memory, a
                                    hung launch (see Hangs above), ... */
  MK_ERROR_BUSY = 6,             /* the session is in use by another thread */
  MK_ERROR_BUFFER_TOO_SMALL = 7, /* mk_tokenize / mk_detokenize: the needed size is in *count / *length */
  MK_ERROR_OUT_OF_MEMORY = 8,    /* the context does not fit the free host (CPU emulator) or GPU memory; checked
                                    before allocating, the message names the need and the limit */
  MK_ERROR_INTERNAL = 9
} mk_status;

/* "MK_OK", "MK_ERROR_NOT_FOUND", ... (static strings). */
MK_API const char* mk_status_name(mk_status status);
/* The library version, "0.1.0" (a static string). */
MK_API const char* mk_version(void);

typedef enum mk_backend_kind {
  MK_BACKEND_AUTO = 0,     /* the GPU when there is one, else the CPU emulator (with a notice) */
  MK_BACKEND_GPU = 1,      /* the GPU or MK_ERROR_BACKEND */
  MK_BACKEND_EMULATOR = 2  /* the CPU emulator */
} mk_backend_kind;

typedef enum mk_stop_reason {
  MK_STOP_NONE = 0,
  MK_STOP_EOS = 1,          /* the model ended its turn */
  MK_STOP_MAX_TOKENS = 2,   /* params.max_tokens reached */
  MK_STOP_CANCELLED = 3,    /* mk_session_cancel, or the callback returned non-zero */
  MK_STOP_CONTEXT_FULL = 4  /* the KV cache is full: reset the session to go on */
} mk_stop_reason;

/* Load-time quantization of a bf16/fp16 checkpoint's weight matrices (an fp8, AWQ or GPTQ checkpoint
 * loads as stored). Scales per 128 columns of a row. */
typedef enum mk_quantize {
  MK_QUANTIZE_NONE = 0,
  MK_QUANTIZE_FP8 = 1, /* fp8 E4M3, one scale per group */
  MK_QUANTIZE_INT4 = 2 /* 4-bit codes, one scale and zero point per group */
} mk_quantize;

typedef struct mk_model mk_model;
typedef struct mk_session mk_session;

typedef struct mk_model_options {
  mk_backend_kind backend;
  int context;          /* KV cache capacity per session in tokens; 0: min(4096, the model's max_position_embeddings);
                           at most 16777216; more than max_position_embeddings works, with a notice (on_notice) */
  int gpu_device;
  int emulator_workgroups; /* virtual workgroups of the CPU emulator (same tokens for any value), 1 to 4096 */
  /* Weight upload progress on the GPU: bytes done, bytes total, seconds so far. Called from mk_model_open
   * (and from mk_session_create when a further concurrent session needs its own copy). May be NULL. */
  void (*on_progress)(uint64_t done, uint64_t total, double seconds, void* user);
  /* Notices for the user, e.g. the fallback to the CPU emulator and why. May be NULL. */
  void (*on_notice)(const char* message, void* user);
  void* user;
  mk_quantize quantize; /* MK_QUANTIZE_NONE by default */
  int quantize_head;    /* with quantize: 1 (mk_model_options_init's default) quantizes the embedding and the LM
                           head too, 0 keeps them in 16 bits */
  double watchdog_seconds; /* GPU: a launch in which no workgroup finishes an instruction for this long is stopped
                              and the call fails naming the stuck instruction (MK_ERROR_BACKEND); 1 to 86400,
                              10 by mk_model_options_init (a very long context on a shared GPU may need more) */
} mk_model_options;

/* Fills the defaults: MK_BACKEND_AUTO, context 0, device 0, 16 emulator workgroups, no callbacks, no quantization. */
MK_API void mk_model_options_init(mk_model_options* options);

/* Loads the model directory (config.json, *.safetensors, tokenizer.json, tokenizer_config.json) and
 * prepares the backend (uploads the weights to the GPU). options may be NULL (defaults). On failure *model
 * is NULL and, if errbuf is not NULL, the message is written there (NUL-terminated, truncated to
 * errbuf_size). A directory without a chat template opens; mk_generate then fails with MK_ERROR_BAD_MODEL. */
MK_API mk_status mk_model_open(const char* path, const mk_model_options* options, mk_model** model, char* errbuf,
                               size_t errbuf_size);
/* Speculative decoding: a drafter proposes tokens that one step of several tokens verifies against the
 * model's own; the replies are token for token what they are without it. struct_size is the size of the
 * struct the caller was compiled with (mk_speculation_init sets it). Runs on the CPU emulator so far: on
 * the GPU, opening with a drafter fails with MK_ERROR_INVALID_ARGUMENT, saying so. */
typedef enum mk_drafter {
  MK_DRAFTER_NONE = 0,
  MK_DRAFTER_LOOKUP = 1 /* the continuation of the latest earlier occurrence of the newest tokens */
} mk_drafter;
typedef struct mk_speculation {
  size_t struct_size;
  mk_drafter drafter;
  int draft_max;  /* drafts a step at most, 1..15; 0: the default (4) */
  int lookup_min; /* MK_DRAFTER_LOOKUP: the shortest and longest runs of newest tokens matched, 1..16 */
  int lookup_max;
} mk_speculation;

/* Fills the defaults: no drafter, draft_max 0, lookup runs of 1 to 3 tokens. */
MK_API void mk_speculation_init(mk_speculation* speculation);
/* mk_model_open with speculative decoding (speculation may be NULL: none). */
MK_API mk_status mk_model_open_speculative(const char* path, const mk_model_options* options, const mk_speculation* speculation,
                                           mk_model** model, char* errbuf, size_t errbuf_size);
/* Releases the handle (NULL is fine). Open sessions stay usable. */
MK_API void mk_model_close(mk_model* model);
/* "cpu-emulator (...)" or "gpu monokernel on ...". */
MK_API const char* mk_model_backend_name(const mk_model* model);
/* Message of the last failed model-level call (mk_tokenize, mk_detokenize, mk_session_create) made by the
 * calling thread; "" if none. */
MK_API const char* mk_model_last_error(const mk_model* model);

/* Token ids of `text` (length bytes; any bytes). parse_special: "<|im_end|>" in the text is the special
 * token (what chat prompts need) rather than plain text. Writes up to `capacity` ids to `tokens` and their
 * number to *count; if capacity is too small, returns MK_ERROR_BUFFER_TOO_SMALL with the needed count
 * (tokens may be NULL with capacity 0 to ask for it). */
MK_API mk_status mk_tokenize(mk_model* model, const char* text, size_t length, int parse_special, int32_t* tokens,
                             size_t capacity, size_t* count);
/* UTF-8 text of `tokens` (invalid sequences become U+FFFD), NUL-terminated. *length gets the text's length
 * without the NUL; with too small a capacity (it needs *length + 1), MK_ERROR_BUFFER_TOO_SMALL. */
MK_API mk_status mk_detokenize(mk_model* model, const int32_t* tokens, size_t count, char* text, size_t capacity,
                               size_t* length);

typedef struct mk_session_options {
  const char* system_prompt; /* NULL or "": none (the chat template's default, if it has one) */
  int enable_thinking;       /* Qwen3 templates: -1 template default, 0 off, 1 on */
} mk_session_options;

MK_API void mk_session_options_init(mk_session_options* options);

/* A new conversation with its own KV cache (on the GPU the first session reuses what mk_model_open
 * prepared; each further concurrent session holds another copy of the weights). options may be NULL. */
MK_API mk_status mk_session_create(mk_model* model, const mk_session_options* options, mk_session** session);
/* Releases the session (NULL is fine). Not while another thread is inside a call on it. */
MK_API void mk_session_destroy(mk_session* session);

typedef struct mk_message {
  const char* role;    /* "system", "user", "assistant" */
  const char* content;
} mk_message;

typedef struct mk_generate_params {
  int max_tokens;      /* -1: until the model ends its turn or the context is full */
  float temperature;   /* 0: greedy */
  int top_k;           /* 0: off */
  float top_p;         /* 1: off */
  float min_p;         /* 0: off */
  uint64_t seed;
} mk_generate_params;

/* Fills the defaults: max_tokens -1, greedy (temperature 0), top_k 0, top_p 1, min_p 0, seed 0. */
MK_API void mk_generate_params_init(mk_generate_params* params);

/* Receives the reply as it is generated: `length` bytes of UTF-8 (whole characters; also NUL-terminated).
 * The end-of-turn token is not passed. Return 0 to go on, non-zero to stop (like mk_session_cancel). */
typedef int (*mk_token_callback)(const char* text, size_t length, void* user);

/* A reply token's log-probabilities: the log-softmax over the whole vocabulary of the logits the sampler
 * saw (logit bias and penalties applied; before temperature, top-k, top-p, min-p, which only choose), and
 * its top_count most likely alternatives, the most likely first (ties to the lower id). */
#define MK_MAX_TOP_LOGPROBS 20
typedef struct mk_token_logprobs {
  int32_t token;
  float logprob;
  int32_t top_count;
  int32_t top_ids[MK_MAX_TOP_LOGPROBS];
  float top_logprobs[MK_MAX_TOP_LOGPROBS];
} mk_token_logprobs;

/* Receives each reply token's record before its text reaches the token callback (a token's text can
 * wait for the rest of its character); `record` is valid only during the call. Return 0 to go on,
 * non-zero to stop. */
typedef int (*mk_logprobs_callback)(const mk_token_logprobs* record, void* user);

typedef struct mk_logit_bias {
  int32_t token;
  float bias; /* added to the token's logit, -100..100 (OpenAI's logit_bias) */
} mk_logit_bias;

/* What a reply must be (docs/structured_output.md): any text, a JSON object, JSON that validates against
 * a JSON schema, or text that matches a regular expression, whole. */
typedef enum mk_constraint_kind {
  MK_CONSTRAINT_NONE = 0,
  MK_CONSTRAINT_JSON_OBJECT = 1,
  MK_CONSTRAINT_JSON_SCHEMA = 2, /* constraint: the schema's JSON text */
  MK_CONSTRAINT_REGEX = 3        /* constraint: the regular expression */
} mk_constraint_kind;

/* mk_generate_params and what OpenAI's API adds to it. struct_size is the size of the struct the caller
 * was compiled with (mk_generate_options_init sets it): a newer library reads only those fields and gives
 * later ones their defaults, so callers built against this header keep working. */
typedef struct mk_generate_options {
  size_t struct_size;
  mk_generate_params params;
  const mk_logit_bias* logit_bias; /* logit_bias_count entries (at most 1024; a token listed twice adds both) */
  size_t logit_bias_count;
  float frequency_penalty; /* -2..2: minus this per time a token was already sampled in this reply */
  float presence_penalty;  /* -2..2: minus this once a token was sampled in this reply */
  mk_logprobs_callback on_logprobs; /* NULL: no records */
  void* logprobs_user;              /* passed to on_logprobs */
  int top_logprobs;                 /* 0..MK_MAX_TOP_LOGPROBS alternatives in each record */
  /* Since 0.2.2. The reply's constraint, applied on the GPU: the kernel masks the tokens it does not allow
   * and the reply ends where it is complete (MK_STOP_EOS). An unsupported keyword or construct, or one past
   * the limits, is MK_ERROR_INVALID_ARGUMENT naming it. Compiled once per distinct constraint (cached). */
  mk_constraint_kind constraint_kind;
  const char* constraint; /* MK_CONSTRAINT_JSON_SCHEMA / _REGEX: the text (NUL-terminated) */
} mk_generate_options;

/* Fills the defaults: struct_size, mk_generate_params_init's params, no bias, no penalties, no records, no
 * constraint. */
MK_API void mk_generate_options_init(mk_generate_options* options);

/* One user turn: adds `prompt` as a user message and generates the assistant's reply, calling `callback`
 * (may be NULL) with its text. params may be NULL (defaults). Returns MK_OK when the reply ended for any
 * of the mk_stop_reason reasons (see mk_session_stats); a reply stopped early stays in the conversation. */
MK_API mk_status mk_generate(mk_session* session, const char* prompt, const mk_generate_params* params,
                             mk_token_callback callback, void* user);
/* The same with any new messages (e.g. a "system" then a "user" message on the first turn). */
MK_API mk_status mk_generate_messages(mk_session* session, const mk_message* messages, size_t count,
                                      const mk_generate_params* params, mk_token_callback callback, void* user);
/* mk_generate_messages with mk_generate_options (NULL: the defaults). A value out of its range is
 * MK_ERROR_INVALID_ARGUMENT naming the field. */
MK_API mk_status mk_generate_with_options(mk_session* session, const mk_message* messages, size_t count,
                                          const mk_generate_options* options, mk_token_callback callback, void* user);

/* Stops the generation in progress at the next token; no effect when none is running. Any thread. */
MK_API mk_status mk_session_cancel(mk_session* session);
/* Forgets the conversation (the system prompt stays) and empties the KV cache. */
MK_API mk_status mk_session_reset(mk_session* session);

typedef struct mk_stats {
  int context_tokens;              /* tokens in the KV cache */
  int context_size;                /* its capacity */
  int turns;                       /* replies since the start or the last reset */
  int last_ingested_tokens;        /* tokens the last mk_generate ran through the model before replying:
                                      the new turn only (plus the previous reply's last token) */
  int last_generated_tokens;       /* the end-of-turn token included */
  double last_first_token_seconds; /* time to the first token */
  double last_tokens_per_second;   /* decode speed after the first token */
  double last_total_seconds;
  mk_stop_reason last_stop;
} mk_stats;

MK_API mk_status mk_session_stats(const mk_session* session, mk_stats* stats);
/* The last reply's speculative decoding: tokens drafted, and of them those the model's own tokens
 * confirmed (0 and 0 without a drafter). struct_size as for mk_speculation. */
typedef struct mk_speculation_stats {
  size_t struct_size;
  int last_drafted_tokens;
  int last_accepted_tokens;
} mk_speculation_stats;
MK_API mk_status mk_session_speculation_stats(const mk_session* session, mk_speculation_stats* stats);
/* Message of the last failed call on this session; "" if none. */
MK_API const char* mk_session_last_error(const mk_session* session);

#ifdef __cplusplus
}
#endif

#endif /* MONOKERNEL_H */
