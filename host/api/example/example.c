/* monokernel-example MODEL_DIR [PROMPT]: the C API in one page. Opens a model directory, checks that
 * tokenizing and detokenizing the prompt round-trips, then chats two turns (greedy, 16 tokens each),
 * streaming the replies, and prints what each turn cost: the second turn ingests only its own tokens. */
#include <monokernel.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void on_notice(const char* message, void* user) {
  (void)user;
  fprintf(stderr, "notice: %s\n", message);
}

static int print_text(const char* text, size_t length, void* user) {
  (void)user;
  fwrite(text, 1, length, stdout);
  fflush(stdout);
  return 0; /* non-zero would stop the reply */
}

static int fail(const char* what, mk_status status, const char* message) {
  fprintf(stderr, "%s: %s: %s\n", what, mk_status_name(status), message);
  return 1;
}

static int round_trip(mk_model* model, const char* prompt) {
  size_t count = 0, length = 0;
  mk_status s = mk_tokenize(model, prompt, strlen(prompt), 1, NULL, 0, &count); /* ask for the size */
  if (s != MK_OK && s != MK_ERROR_BUFFER_TOO_SMALL) return fail("mk_tokenize", s, mk_model_last_error(model));
  int32_t* tokens = malloc((count + 1) * sizeof *tokens);
  char* text = malloc(strlen(prompt) + 1);
  s = mk_tokenize(model, prompt, strlen(prompt), 1, tokens, count, &count);
  if (s == MK_OK) s = mk_detokenize(model, tokens, count, text, strlen(prompt) + 1, &length);
  const int ok = s == MK_OK && strcmp(text, prompt) == 0;
  printf("round trip: %s (%zu tokens)\n", ok ? "ok" : "MISMATCH", count);
  free(tokens);
  free(text);
  return s == MK_OK && ok ? 0 : fail("round trip", s, mk_model_last_error(model));
}

static int turn(mk_session* session, const char* prompt) {
  mk_generate_params params;
  mk_generate_params_init(&params); /* greedy */
  params.max_tokens = 16;
  printf("reply: <<<");
  const mk_status s = mk_generate(session, prompt, &params, print_text, NULL);
  printf(">>>\n");
  if (s != MK_OK) return fail("mk_generate", s, mk_session_last_error(session));
  mk_stats st;
  mk_session_stats(session, &st);
  printf("turn %d: ingested %d tokens, generated %d, context %d/%d\n", st.turns, st.last_ingested_tokens,
         st.last_generated_tokens, st.context_tokens, st.context_size);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL_DIR [PROMPT]\n", argv[0]);
    return 2;
  }
  const char* prompt = argc > 2 ? argv[2] : "Hello, world";
  printf("monokernel %s\n", mk_version());

  mk_model_options options;
  mk_model_options_init(&options);
  options.context = 512;
  options.on_notice = on_notice;
  mk_model* model = NULL;
  char error[512];
  mk_status s = mk_model_open(argv[1], &options, &model, error, sizeof error);
  if (s != MK_OK) return fail("mk_model_open", s, error);
  fprintf(stderr, "backend: %s\n", mk_model_backend_name(model));

  mk_session* session = NULL;
  int rc = round_trip(model, prompt);
  if (rc == 0 && (s = mk_session_create(model, NULL, &session)) != MK_OK)
    rc = fail("mk_session_create", s, mk_model_last_error(model));
  if (rc == 0) rc = turn(session, prompt);
  if (rc == 0) rc = turn(session, "And again?");
  mk_session_destroy(session);
  mk_model_close(model);
  return rc;
}
