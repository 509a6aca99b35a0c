// A tokenizer's vocabulary for constrained decoding (runtime/token_automaton.h): each token's bytes,
// except special and added tokens, which a constraint never allows (EOS excepted, where it accepts).
#pragma once

#include <memory>

#include "runtime/token_automaton.h"
#include "runtime/tokenizer.h"

namespace mk::constraint {

// `model_vocab` tokens (the LM head's rows): ids past the tokenizer's are never allowed. `eos`: the ids
// that stop generation (the model's).
std::shared_ptr<const TokenVocabulary> token_vocabulary(const Tokenizer& tokenizer, int model_vocab, std::vector<int32_t> eos);

}  // namespace mk::constraint
