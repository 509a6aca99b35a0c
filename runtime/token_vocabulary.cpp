#include "runtime/token_vocabulary.h"

#include <algorithm>

namespace mk::constraint {

std::shared_ptr<const TokenVocabulary> token_vocabulary(const Tokenizer& tokenizer, int model_vocab, std::vector<int32_t> eos) {
  std::vector<std::string> bytes(size_t(std::max(model_vocab, 0)));
  for (size_t i = 0; i < bytes.size() && i < tokenizer.vocab_size(); ++i) {
    const int32_t id = int32_t(i);
    if (!tokenizer.is_special(id)) bytes[i] = std::string(tokenizer.token_bytes(id));
  }
  return std::make_shared<TokenVocabulary>(bytes, std::move(eos));
}

}  // namespace mk::constraint
