// monokernel-example-cpp MODEL_DIR [PROMPT]: one turn through the C++ wrapper (monokernel.hpp), which
// owns the handles and turns error codes into exceptions.
#include <monokernel.hpp>

#include <iostream>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: " << argv[0] << " MODEL_DIR [PROMPT]\n";
    return 2;
  }
  try {
    monokernel::ModelOptions options;
    options.context = 512;
    monokernel::Model model(argv[1], options);
    monokernel::Session session(model);
    monokernel::GenerateParams params;  // greedy
    params.max_tokens = 16;
    std::cout << "reply: <<<";
    session.generate(argc > 2 ? argv[2] : "Hello, world", params, [](std::string_view text) {
      std::cout << text << std::flush;
      return true;  // false would stop the reply
    });
    std::cout << ">>>\n";
    const monokernel::Stats s = session.stats();
    std::cout << "turn " << s.turns << ": ingested " << s.last_ingested_tokens << " tokens, generated "
              << s.last_generated_tokens << "\n";
  } catch (const monokernel::Error& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
