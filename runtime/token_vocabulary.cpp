#include "runtime/token_vocabulary.h"

namespace mk::constraint {

std::shared_ptr<const TokenVocabulary> token_vocabulary(const Tokenizer& tokenizer) {
  std::vector<std::string> bytes(tokenizer.vocab_size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    const int32_t id = int32_t(i);
    if (!tokenizer.is_added(id)) bytes[i] = std::string(tokenizer.token_bytes(id));
  }
  return std::make_shared<TokenVocabulary>(bytes, tokenizer.eos_ids());
}

}  // namespace mk::constraint
