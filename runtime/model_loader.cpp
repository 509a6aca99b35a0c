// Loading a Hugging Face model directory: config, then every weight located in the safetensors file(s)
// and checked against the shape the config implies. The views point into the mappings that Model::files
// keeps alive; nothing is copied except the int4 matrices of AWQ and GPTQ checkpoints, whose packed codes,
// transposed scales and packed zero points are unpacked into new buffers that Model::owned keeps.
#include "runtime/model.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "runtime/error.h"
#include "runtime/json_file.h"
#include "runtime/matrix_format.h"
#include "runtime/quantize.h"
#include "runtime/safetensors.h"

namespace mk {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

// exists() without the throwing overload: an unreadable directory should read as "not there" and get
// our message, not a std::filesystem_error.
bool file_exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

// The shape a tensor must have, and the config values it comes from (for the error message).
struct Expected {
  std::vector<int64_t> shape;
  std::string why;
};

// The weight dtypes the kernels read. F8_E4M3 only for the matrices of the linear layers, which come with
// scales (WeightFiles::get_matrix): neither fp8 checkpoint form quantizes the embedding, norms or biases,
// so an fp8 one there has no scale convention to follow and is rejected.
DType weight_dtype(const SafetensorsEntry& e, const fs::path& file, bool fp8_allowed) {
  for (DType t : {DType::BF16, DType::F16, DType::F32})
    if (e.dtype == dtype_name(t)) return t;
  if (fp8_allowed) {
    if (e.dtype == dtype_name(DType::F8_E4M3)) return DType::F8_E4M3;
    fail("tensor {} in {} has dtype {}; expected one of BF16, F16, F32, F8_E4M3", e.name, file.string(), e.dtype);
  }
  if (e.dtype == dtype_name(DType::F8_E4M3))
    fail("tensor {} in {} has dtype F8_E4M3; expected one of BF16, F16, F32 (fp8 is read only for the weight "
         "matrices of the linear layers: q/k/v/o_proj, gate/up/down_proj and lm_head)",
         e.name, file.string());
  fail("tensor {} in {} has dtype {}; expected one of BF16, F16, F32", e.name, file.string(), e.dtype);
}

// The dtypes a scale tensor may have: F32, as both quantizers write them, or a 16-bit float.
DType scale_dtype(const SafetensorsEntry& e, const fs::path& file) {
  for (DType t : {DType::F32, DType::BF16, DType::F16})
    if (e.dtype == dtype_name(t)) return t;
  fail("scale tensor {} in {} has dtype {}; expected one of F32, BF16, F16", e.name, file.string(), e.dtype);
}

constexpr const char* kFp8Methods =
    "quant_method \"fp8\" with X.weight_scale_inv, or \"compressed-tensors\" float-quantized with X.weight_scale";

json read_json_file(const fs::path& path) { return parse_model_json(read_model_text_file(path), path.string()); }

using Owned = std::vector<std::shared_ptr<const std::vector<uint8_t>>>;

// Little-endian 32-bit word i of a tensor's bytes (safetensors stores little-endian; the data need not
// be 4-byte aligned).
inline uint32_t word_at(const uint8_t* p, int64_t i) {
  p += 4 * i;
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// AWQ's GEMM packing (AutoAWQ WQLinear_GEMM.from_linear, AWQ_ORDER [0, 2, 4, 6, 1, 3, 5, 7]): bits
// 4i..4i+3 of a word hold the code of column 8k + AWQ_ORDER[i] of its 8 columns, so column e of the 8 sits
// in nibble [0, 4, 1, 5, 2, 6, 3, 7][e] (AWQ_REVERSE_ORDER), e.g. codes 0..7 pack into 0x75316420.
constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

// Runs f(begin, end) over [0, n) on the machine's cores when the work (n items of `cost` packed words each)
// is worth threads.
template <class F>
void parallel_ranges(int64_t n, int64_t cost, const F& f) {
  const int64_t threads = std::min<int64_t>(n, std::max(1u, std::thread::hardware_concurrency()));
  if (threads <= 1 || n * cost < (int64_t(1) << 16)) {
    f(int64_t(0), n);
    return;
  }
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back([&, t] { f(n * t / threads, n * (t + 1) / threads); });
  f(int64_t(0), n / threads);
  for (std::thread& th : pool) th.join();
}

// The safetensors files of one model and which of them holds each tensor.
class WeightFiles {
 public:
  static WeightFiles open(const fs::path& dir) {
    WeightFiles w;
    w.dir_ = dir;
    if (file_exists(dir / kSingleFile)) {
      w.open_single();
    } else if (file_exists(dir / kIndexFile)) {
      w.open_sharded();
    } else {
      fail("no weights in {}: looked for {} and {}", dir.string(), kSingleFile, kIndexFile);
    }
    return w;
  }

  // The view of tensor `name`, after checking its dtype and shape. Not fp8: see weight_dtype.
  TensorView get(const std::string& name, const Expected& expected) const { return view(name, expected, false); }

  // The view of weight matrix `name` (X.weight of a linear layer): bf16/fp16/fp32, or F8_E4M3 with its
  // scales as `q` (config.json's quantization_config) says they are stored. In an AWQ or GPTQ checkpoint a
  // quantized layer has no X.weight but X.qweight, X.qzeros and X.scales: unpacked into U4 codes with their
  // scales and zero points (int4_matrix), the new buffers kept in `owned`. `has_bias`: the architecture
  // reads a bias for this layer (else a packed layer's X.bias must be all zeros, see int4_matrix).
  TensorView get_matrix(const std::string& name, const Expected& expected, const WeightQuantization& q, Owned& owned,
                        bool has_bias = false) const {
    const std::string module = module_of(name);
    const std::string packed = module + ".qweight";
    const bool stored_packed = where_.count(packed) != 0;
    if (where_.count(name) != 0) {
      if (stored_packed && q.is_int4())
        fail("tensors {} and {} are both in {}: linear layer {} is stored twice, unquantized and packed int4", name,
             packed, dir_.string(), module);
      TensorView v = view(name, expected, true);
      if (v.dtype == DType::F8_E4M3) v.scale = scale_of(v, q);
      return v;
    }
    if (stored_packed && q.is_int4()) return int4_matrix(module, expected, q, owned, has_bias);
    const std::string config = (dir_ / "config.json").string();
    if (stored_packed)
      fail("tensor {} not found in {} (looked in: {}); the files have {}, a packed int4 matrix, but {} {} (packed "
           "int4 matrices are read with quant_method \"awq\" or \"gptq\")",
           name, dir_.string(), fmt::join(file_names_, ", "), packed, config,
           q.method == WeightQuantization::Method::None ? "has no quantization_config to say how it is packed"
                                                        : "names another quant_method");
    if (q.is_int4())
      fail("tensor {} not found in {}, nor its packed int4 form {} (quant_method \"{}\" stores a quantized linear "
           "layer as X.qweight, X.qzeros and X.scales, one it leaves unquantized as X.weight; looked in: {})",
           name, dir_.string(), packed, int4_method(q), fmt::join(file_names_, ", "));
    return view(name, expected, true);  // not found: file_of's message
  }

  std::vector<std::shared_ptr<const MappedFile>> mappings() const {
    std::vector<std::shared_ptr<const MappedFile>> out;
    for (const SafetensorsFile& f : files_) out.push_back(f.file);
    return out;
  }

 private:
  TensorView view(const std::string& name, const Expected& expected, bool fp8_allowed) const {
    const SafetensorsFile& f = file_of(name);
    const SafetensorsEntry& e = f.header.tensors.at(name);
    TensorView v;
    v.name = name;
    v.dtype = weight_dtype(e, f.file->path(), fp8_allowed);
    if (e.shape != expected.shape)
      fail("tensor {} in {} has shape [{}]; expected [{}] from config.json ({})", name, f.file->path().string(),
           fmt::join(e.shape, ", "), fmt::join(expected.shape, ", "), expected.why);
    v.shape = e.shape;
    v.data = e.data;
    return v;
  }

  const SafetensorsFile& file_of(const std::string& name) const {
    auto it = where_.find(name);
    if (it == where_.end())
      fail("tensor {} not found in {} (looked in: {})", name, dir_.string(), fmt::join(file_names_, ", "));
    return files_[it->second];
  }

  // The scales of fp8 matrix `w` [out, in], pointing into the mapped file as the values do. FineGrainedFP8:
  // X.weight_scale_inv [ceil(out / block_rows), ceil(in / block_cols)]; compressed-tensors: X.weight_scale
  // [out, 1] (strategy "channel") or [1] / [] (strategy "tensor"). Either multiplies the stored values.
  TensorScale scale_of(const TensorView& w, const WeightQuantization& q) const {
    const std::string config = (dir_ / "config.json").string();
    const std::string file = file_of(w.name).file->path().string();
    if (q.method == WeightQuantization::Method::None)
      fail("tensor {} in {} has dtype F8_E4M3, but {} has no quantization_config to say how its scales are stored "
           "(supported: {})",
           w.name, file, config, kFp8Methods);
    if (q.is_int4())
      fail("tensor {} in {} has dtype F8_E4M3, but {} says quant_method \"{}\", which stores 4-bit matrices as "
           "X.qweight (supported for F8_E4M3: {})",
           w.name, file, config, int4_method(q), kFp8Methods);
    const bool blocks = q.method == WeightQuantization::Method::FineGrainedFp8;
    const std::string module = w.name.substr(0, w.name.size() - std::string_view(".weight").size());
    const std::string scale_name = module + (blocks ? ".weight_scale_inv" : ".weight_scale");
    const std::string other_name = module + (blocks ? ".weight_scale" : ".weight_scale_inv");
    const int64_t rows = w.shape[0], cols = w.shape[1];
    if (blocks) {
      const std::string why =
          fmt::format("one scale per {}x{} block (quantization_config.weight_block_size) of the [{}, {}] matrix",
                      q.block_rows, q.block_cols, rows, cols);
      if (where_.count(scale_name) == 0)
        missing_scale(w, file, scale_name, "quant_method \"fp8\" stores " + why, other_name);
      const SafetensorsEntry& e = entry(scale_name);
      const int64_t scale_rows = (rows + q.block_rows - 1) / q.block_rows;
      const int64_t scale_cols = (cols + q.block_cols - 1) / q.block_cols;
      if (e.shape != std::vector<int64_t>{scale_rows, scale_cols})
        wrong_scale_shape(e, fmt::format("[{}, {}]", scale_rows, scale_cols), why);
      return scale(e, q.block_rows, q.block_cols, scale_cols, scale_rows * scale_cols);
    }
    if (!q.per_channel && !q.per_tensor)
      fail("tensor {} in {} has dtype F8_E4M3, but no group of quantization_config.config_groups in {} quantizes "
           "weights",
           w.name, file, config);
    std::vector<std::string> allowed;  // the shapes the config's strategies allow, for messages
    if (q.per_channel) allowed.push_back(fmt::format("[{}, 1] (strategy \"channel\": one scale per row)", rows));
    if (q.per_tensor) allowed.push_back("[1] or [] (strategy \"tensor\": one scale for the matrix)");
    const std::string expected = fmt::format("{}", fmt::join(allowed, " or "));
    if (where_.count(scale_name) == 0)
      missing_scale(w, file, scale_name, "compressed-tensors stores it with shape " + expected, other_name);
    const SafetensorsEntry& e = entry(scale_name);
    // With both strategies in the config, the shape tells which one this matrix has.
    if (q.per_channel && e.shape == std::vector<int64_t>{rows, 1}) return scale(e, 1, cols, 1, rows);
    if (q.per_tensor && (e.shape.empty() || e.shape == std::vector<int64_t>{1})) return scale(e, rows, cols, 1, 1);
    wrong_scale_shape(e, expected,
                      fmt::format("quantization_config.config_groups, for the [{}, {}] matrix", rows, cols));
  }

  const SafetensorsEntry& entry(const std::string& name) const { return file_of(name).header.tensors.at(name); }

  static std::string module_of(const std::string& weight) {
    return weight.substr(0, weight.size() - std::string_view(".weight").size());
  }
  static const char* int4_method(const WeightQuantization& q) {
    return q.method == WeightQuantization::Method::Awq ? "awq" : "gptq";
  }

  // Packed int4 linear layer `module` (nn.Linear weight [out, in] = expected.shape), in one of two forms; w =
  // (code - zero) * scale, with one scale and zero point per output row and group of group_size input columns
  // (group_size -1: the whole row):
  // - AWQ GEMM (AutoAWQ WQLinear_GEMM): X.qweight int32 [in, out / 8], the codes of output rows 8k..8k+7 at
  //   input column c in word [c][k], in the nibble order of kAwqNibble; X.qzeros int32 [in / group, out / 8],
  //   packed the same way; X.scales [in / group, out].
  // - GPTQ (AutoGPTQ QuantLinear.pack): X.qweight int32 [in / 8, out], the code of input column 8i + j of
  //   output row o at bits 4j of word [i][o]; X.qzeros int32 [ceil(in / group), out / 8], the zero point of
  //   output row 8k + j at bits 4j of word [g][k], minus 1 in checkpoint_format "gptq" (v1; the reference
  //   dequantizers add 1 back per nibble), as is in "gptq_v2"; X.scales [ceil(in / group), out]; X.g_idx
  //   int32 [in] (optional), the group of each input column.
  // Unpacked into U4 codes [out, in] in element order and scales and zero points [out, groups] (the
  // checkpoint's are transposed), in new buffers kept in `owned`. The scales keep their stored dtype.
  TensorView int4_matrix(const std::string& module, const Expected& expected, const WeightQuantization& q,
                         Owned& owned, bool has_bias) const {
    const bool awq = q.method == WeightQuantization::Method::Awq;
    const char* method = int4_method(q);
    const int64_t out = expected.shape[0], in = expected.shape[1];
    const std::string qweight_name = module + ".qweight", qzeros_name = module + ".qzeros";
    const std::string scales_name = module + ".scales", g_idx_name = module + ".g_idx";
    const std::string file = file_of(qweight_name).file->path().string();
    const std::string matrix = fmt::format("the [{}, {}] matrix ({})", out, in, expected.why);

    // The kernels read one scale and zero point per scale group of a row: a checkpoint's group must not split one.
    const int64_t group = q.group_size == -1 ? in : q.group_size;
    constexpr int kGroup = matrix_scale_group(MatrixFormat::INT4);
    if (group % kGroup != 0 && group < in)
      fail("tensor {} in {}: quantization_config.group_size = {} is not supported for {}: the int4 kernels read one "
           "scale and zero point per {} columns of a row, so a group must be a multiple of {} columns, or -1 (one "
           "group per row)",
           qweight_name, file, q.group_size, matrix, kGroup, kGroup);
    const int64_t groups = (in + group - 1) / group;
    // Whole words: eight codes of the packed dimension (and eight zero points of a row of qzeros) per int32.
    if (out % 8 != 0 || (!awq && in % 8 != 0))
      fail("tensor {} in {}: quant_method \"{}\" packs eight 4-bit codes per int32 along {}, but {} has {} of them, "
           "not a multiple of 8",
           qweight_name, file, method, out % 8 != 0 ? "the output rows" : "the input columns", matrix,
           out % 8 != 0 ? out : in);
    // Rows of whole bytes (two codes each). Every dimension of a model is some matrix's output rows, so this
    // only fails where the check above fails for another matrix.
    if (in % 2 != 0)
      fail("tensor {} in {}: {} has an odd number of input columns ({}); int4 rows hold two codes per byte",
           qweight_name, file, matrix, in);

    const std::string group_why = fmt::format(
        "group_size {} of {}", q.group_size == -1 ? "-1 (one group per row)" : std::to_string(q.group_size), matrix);
    const SafetensorsEntry& qweight =
        awq ? int4_part(qweight_name, qweight_name, "codes", {"I32"}, {in, out / 8},
                        "quant_method \"awq\" packs the codes of eight consecutive output rows into each int32, "
                        "[in, out / 8], for " + matrix)
            : int4_part(qweight_name, qweight_name, "codes", {"I32"}, {in / 8, out},
                        "quant_method \"gptq\" packs the codes of eight consecutive input columns into each int32, "
                        "[in / 8, out], for " + matrix);
    // AutoAWQ writes no symmetric GEMM form (WQLinear_GEMM.from_linear needs zero points) and its GEMM
    // kernels read qzeros whatever zero_point says, so they are read here too.
    const SafetensorsEntry& qzeros =
        int4_part(qweight_name, qzeros_name, "zero points", {"I32"}, {groups, out / 8},
                  "one zero point per group and output row, eight consecutive output rows per int32, [groups, out / "
                  "8], for " + group_why,
                  awq && !q.zero_point ? "; quantization_config.zero_point is false, but AWQ's GEMM form has no "
                                         "symmetric variant: it always stores qzeros, which its kernels read"
                                       : "");
    const SafetensorsEntry& scales =
        int4_part(qweight_name, scales_name, "scales", {"F16", "BF16", "F32"}, {groups, out},
                  "one scale per group and output row, [groups, out], for " + group_why);
    if (!awq) check_g_idx(qweight_name, g_idx_name, q, in, group);
    if (!has_bias) check_zero_bias(qweight_name, module + ".bias", out);

    // Zero points [out, groups].
    auto zeros = std::make_shared<std::vector<uint8_t>>(size_t(out * groups));
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t k = 0; k < out / 8; ++k) {
        const uint32_t word = word_at(qzeros.data, g * (out / 8) + k);
        for (int e = 0; e < 8; ++e) {
          int z = int(word >> (4 * (awq ? kAwqNibble[e] : e))) & 0xf;
          if (q.zeros_minus_one) {
            // v1 writes zero point - 1, so a stored 15 reads as zero point 16, one the 4-bit format cannot hold:
            // a zero point 0 that wrapped when packed, which the readers disagree on (AutoGPTQ and exllama add 1
            // per nibble, 16; GPTQModel adds 0x11111111 to the word, carrying into the next nibble).
            if (z == 15)
              fail("tensor {} in {}: the zero point of output row {}, group {} is stored as 15, which "
                   "checkpoint_format \"gptq\" (zero points stored minus 1) reads as 16, outside the int4 range 0..15 "
                   "(an asymmetric zero point 0 that wrapped when packed; checkpoint_format \"gptq_v2\" stores zero "
                   "points as they are)",
                   qzeros_name, entry_file(qzeros_name), 8 * k + e, g);
            z += 1;
          }
          (*zeros)[size_t((8 * k + e) * groups + g)] = uint8_t(z);
        }
      }

    // Scales [out, groups] in their stored dtype.
    const DType scale_dtype_ = scale_dtype(scales, file_of(scales_name).file->path());
    const size_t es = size_t(dtype_size(scale_dtype_));
    auto scale_bytes = std::make_shared<std::vector<uint8_t>>(size_t(out * groups) * es);
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t o = 0; o < out; ++o)
        std::memcpy(scale_bytes->data() + size_t(o * groups + g) * es, scales.data + size_t(g * out + o) * es, es);

    // Codes [out, in], two per byte in element order (DType::U4), every byte written once.
    auto codes = std::make_shared<std::vector<uint8_t>>(size_t(out * in / 2));
    uint8_t* dst = codes->data();
    const uint8_t* src = qweight.data;
    if (!awq) {
      // Word [i][o] holds elements 8i..8i+7 of row o, element 8i + j at bits 4j: in U4 order that is the
      // word's four bytes, low byte first (in is a multiple of 8, so they start a byte).
      parallel_ranges(in / 8, out, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i)
          for (int64_t o = 0; o < out; ++o) {
            const uint32_t word = word_at(src, i * out + o);
            uint8_t* d = dst + size_t(o * (in / 2) + 4 * i);
            for (int b = 0; b < 4; ++b) d[b] = uint8_t(word >> (8 * b));
          }
      });
    } else {
      // Word [c][k] holds column c of rows 8k..8k+7: two columns make the bytes of eight rows.
      parallel_ranges(out / 8, in, [&](int64_t k0, int64_t k1) {
        for (int64_t k = k0; k < k1; ++k)
          for (int64_t c = 0; c < in; c += 2) {
            const uint32_t lo = word_at(src, c * (out / 8) + k), hi = word_at(src, (c + 1) * (out / 8) + k);
            for (int e = 0; e < 8; ++e) {
              const int shift = 4 * kAwqNibble[e];
              dst[size_t((8 * k + e) * (in / 2) + c / 2)] =
                  uint8_t(((lo >> shift) & 0xf) | ((hi >> shift) & 0xf) << 4);
            }
          }
      });
    }

    TensorView v;
    v.name = qweight_name;
    v.dtype = DType::U4;
    v.shape = {out, in};
    v.data = codes->data();
    v.scale.name = scales_name;
    v.scale.dtype = scale_dtype_;
    v.scale.data = scale_bytes->data();
    v.scale.block_rows = 1;
    v.scale.block_cols = std::min(group, in);
    v.scale.cols = groups;
    v.scale.count = out * groups;
    v.scale.zero = zeros->data();
    owned.push_back(std::move(codes));
    owned.push_back(std::move(scale_bytes));
    owned.push_back(std::move(zeros));
    return v;
  }

  std::string entry_file(const std::string& name) const { return file_of(name).file->path().string(); }

  // One tensor of packed int4 matrix `qweight_name`, checked present, of one of `dtypes` and of `shape`.
  const SafetensorsEntry& int4_part(const std::string& qweight_name, const std::string& name, const char* role,
                                    std::initializer_list<const char*> dtypes, const std::vector<int64_t>& shape,
                                    const std::string& why, const std::string& missing_hint = "") const {
    if (where_.count(name) == 0)
      fail("tensor {} in {} is a packed int4 matrix, but its {} {} is not in {} (expected shape [{}]: {}; looked "
           "in: {}){}",
           qweight_name, entry_file(qweight_name), role, name, dir_.string(), fmt::join(shape, ", "), why,
           fmt::join(file_names_, ", "), missing_hint);
    const SafetensorsEntry& e = entry(name);
    if (std::none_of(dtypes.begin(), dtypes.end(), [&](const char* d) { return e.dtype == d; }))
      fail("tensor {} in {} has dtype {}; expected {} (the {} of packed int4 matrix {})", name, entry_file(name),
           e.dtype, fmt::join(dtypes, " or "), role, qweight_name);
    if (e.shape != shape)
      fail("tensor {} in {} has shape [{}]; expected [{}] from config.json ({})", name, entry_file(name),
           fmt::join(e.shape, ", "), fmt::join(shape, ", "), why);
    return e;
  }

  // GPTQ's X.g_idx: the group of each input column. The int4 format has contiguous groups (column c in group
  // c / group_size); act-order checkpoints (desc_act) permute them unless their order happens to be trivial
  // (as with one group per row).
  void check_g_idx(const std::string& qweight_name, const std::string& name, const WeightQuantization& q, int64_t in,
                   int64_t group) const {
    if (where_.count(name) == 0) {
      if (q.desc_act)
        fail("tensor {} in {} is a packed int4 matrix and quantization_config.desc_act is true (act-order), but its "
             "group index {} is not in {} (looked in: {})",
             qweight_name, entry_file(qweight_name), name, dir_.string(), fmt::join(file_names_, ", "));
      return;
    }
    const SafetensorsEntry& e = entry(name);
    if (e.dtype != "I32" && e.dtype != "I64")
      fail("tensor {} in {} has dtype {}; expected I32 or I64 (the group index of packed int4 matrix {})", name,
           entry_file(name), e.dtype, qweight_name);
    if (e.shape != std::vector<int64_t>{in})
      fail("tensor {} in {} has shape [{}]; expected [{}] from config.json (the group of each of the {} input columns "
           "of {})",
           name, entry_file(name), fmt::join(e.shape, ", "), in, in, qweight_name);
    for (int64_t c = 0; c < in; ++c) {
      int64_t g;
      if (e.dtype == "I32") {
        g = int64_t(int32_t(word_at(e.data, c)));
      } else {
        g = int64_t(uint64_t(word_at(e.data, 2 * c)) | uint64_t(word_at(e.data, 2 * c + 1)) << 32);
      }
      if (g != c / group)
        fail("tensor {} in {}: g_idx[{}] = {}, but contiguous groups of group_size {} put input column {} in group {}: "
             "act-order (desc_act {}, a permuted g_idx) is not supported, the int4 kernels read the scale and zero "
             "point of contiguous columns (re-quantize with desc_act false)",
             name, entry_file(name), c, g, q.group_size, c, c / group, q.desc_act ? "true" : "false");
    }
  }

  // A bias on a packed layer the architecture has no bias for: AutoGPTQ-era checkpoints carry all-zero ones
  // (vLLM skips them too), ignored here; a nonzero one would change the layer, so it is an error.
  void check_zero_bias(const std::string& qweight_name, const std::string& name, int64_t out) const {
    if (where_.count(name) == 0) return;
    const TensorView b = view(name, {{out}, fmt::format("the {} output rows of {}", out, qweight_name)}, false);
    for (int64_t i = 0; i < out; ++i)
      if (b.at(i) != 0.f)
        fail("tensor {} in {} has a nonzero element ([{}] = {}), but the architecture has no bias on this layer "
             "(all-zero biases, as some GPTQ checkpoints carry, are ignored)",
             name, entry_file(name), i, b.at(i));
  }

  TensorScale scale(const SafetensorsEntry& e, int64_t block_rows, int64_t block_cols, int64_t cols,
                    int64_t count) const {
    TensorScale s;
    s.name = e.name;
    s.dtype = scale_dtype(e, file_of(e.name).file->path());
    s.data = e.data;
    s.block_rows = block_rows;
    s.block_cols = block_cols;
    s.cols = cols;
    s.count = count;
    return s;
  }

  // `other_name`, the other form's scale, in the files points at a config that names the wrong method.
  [[noreturn]] void missing_scale(const TensorView& w, const std::string& file, const std::string& scale_name,
                                  const std::string& why, const std::string& other_name) const {
    const std::string hint =
        where_.count(other_name) != 0
            ? fmt::format("; the files have {} instead, which quantization_config's quant_method does not use",
                          other_name)
            : "";
    fail("tensor {} in {} has dtype F8_E4M3, but its scale tensor {} is not in {} ({}; looked in: {}){}", w.name, file,
         scale_name, dir_.string(), why, fmt::join(file_names_, ", "), hint);
  }

  [[noreturn]] void wrong_scale_shape(const SafetensorsEntry& e, const std::string& expected,
                                      const std::string& why) const {
    fail("scale tensor {} in {} has shape [{}]; expected {} ({})", e.name, file_of(e.name).file->path().string(),
         fmt::join(e.shape, ", "), expected, why);
  }

  void open_single() {
    files_.push_back(SafetensorsFile::open(dir_ / kSingleFile));
    file_names_.push_back(kSingleFile);
    for (const auto& [name, entry] : files_[0].header.tensors) where_.emplace(name, 0);
  }

  // model.safetensors.index.json: {"metadata": {...}, "weight_map": {tensor name: shard file name}}.
  void open_sharded() {
    const fs::path index_path = dir_ / kIndexFile;
    const std::string index = index_path.string();
    const json j = read_json_file(index_path);
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      fail("{}: expected an object with a 'weight_map' object", index);

    std::map<std::string, std::string> shard_of;  // tensor name -> shard file name
    std::map<std::string, size_t> shard_index;    // shard file name -> position in files_
    for (const auto& [name, shard] : j["weight_map"].items()) {
      if (!shard.is_string()) fail("{}: weight_map entry '{}' must be a file name string", index, name);
      shard_of.emplace(name, shard.get<std::string>());
      shard_index.emplace(shard.get<std::string>(), 0);
    }
    if (shard_index.empty()) fail("{}: weight_map is empty", index);
    for (auto& [file, position] : shard_index) {  // in name order, so messages list them in order
      position = files_.size();
      open_shard(index, file);
    }
    for (const auto& [name, file] : shard_of) {
      const size_t position = shard_index.at(file);
      if (files_[position].header.tensors.count(name) == 0)
        fail("{} maps tensor {} to {}, which has no such tensor", index, name, file);
      where_.emplace(name, position);
    }
  }

  void open_shard(const std::string& index, const std::string& file) {
    // Shards live next to the index; a path could make the loader map arbitrary files.
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
      fail("{}: shard name '{}' is not a plain file name", index, file);
    if (!file_exists(dir_ / file)) fail("{} references shard {}, which does not exist in {}", index, file, dir_.string());
    files_.push_back(SafetensorsFile::open(dir_ / file));
    file_names_.push_back(file);
  }

  fs::path dir_;
  std::vector<SafetensorsFile> files_;
  std::vector<std::string> file_names_;     // parallel to files_, for messages
  std::map<std::string, size_t> where_;     // tensor name -> index in files_
};

// Expected shapes, in terms of the config keys they derive from.
struct Shapes {
  const ModelConfig& c;

  Expected vector(int64_t n, std::string why) const { return {{n}, std::move(why)}; }
  Expected hidden_vec() const { return vector(c.hidden_size, fmt::format("hidden_size={}", c.hidden_size)); }
  Expected embedding() const {
    return {{c.vocab_size, c.hidden_size}, fmt::format("vocab_size={}, hidden_size={}", c.vocab_size, c.hidden_size)};
  }
  std::string q_why() const {
    return fmt::format("num_attention_heads={} x head_dim={}, hidden_size={}", c.num_heads, c.head_dim, c.hidden_size);
  }
  std::string kv_why() const {
    return fmt::format("num_key_value_heads={} x head_dim={}, hidden_size={}", c.num_kv_heads, c.head_dim,
                       c.hidden_size);
  }
  Expected wq() const { return {{c.q_dim(), c.hidden_size}, q_why()}; }
  Expected wkv() const { return {{c.kv_dim(), c.hidden_size}, kv_why()}; }
  Expected wo() const { return {{c.hidden_size, c.q_dim()}, q_why()}; }
  Expected bq() const { return vector(c.q_dim(), q_why()); }
  Expected bkv() const { return vector(c.kv_dim(), kv_why()); }
  Expected head_norm() const { return vector(c.head_dim, fmt::format("head_dim={}", c.head_dim)); }
  std::string mlp_why() const {
    return fmt::format("intermediate_size={}, hidden_size={}", c.intermediate_size, c.hidden_size);
  }
  Expected up() const { return {{c.intermediate_size, c.hidden_size}, mlp_why()}; }
  Expected down() const { return {{c.hidden_size, c.intermediate_size}, mlp_why()}; }
};

LayerWeights read_layer(const WeightFiles& files, const ModelConfig& c, int layer, Owned& owned) {
  const Shapes s{c};
  const std::string p = fmt::format("model.layers.{}.", layer);
  const WeightQuantization& q = c.quantization;
  LayerWeights w;
  w.attn_norm = files.get(p + "input_layernorm.weight", s.hidden_vec());
  w.wq = files.get_matrix(p + "self_attn.q_proj.weight", s.wq(), q, owned, c.qkv_bias);
  w.wk = files.get_matrix(p + "self_attn.k_proj.weight", s.wkv(), q, owned, c.qkv_bias);
  w.wv = files.get_matrix(p + "self_attn.v_proj.weight", s.wkv(), q, owned, c.qkv_bias);
  if (c.qkv_bias) {
    w.bq = files.get(p + "self_attn.q_proj.bias", s.bq());
    w.bk = files.get(p + "self_attn.k_proj.bias", s.bkv());
    w.bv = files.get(p + "self_attn.v_proj.bias", s.bkv());
  }
  if (c.qk_norm) {
    w.q_norm = files.get(p + "self_attn.q_norm.weight", s.head_norm());
    w.k_norm = files.get(p + "self_attn.k_norm.weight", s.head_norm());
  }
  w.wo = files.get_matrix(p + "self_attn.o_proj.weight", s.wo(), q, owned);
  if (c.post_norms) {  // Gemma 3: post_attention_layernorm normalises attention's output
    w.post_attn_norm = files.get(p + "post_attention_layernorm.weight", s.hidden_vec());
    w.mlp_norm = files.get(p + "pre_feedforward_layernorm.weight", s.hidden_vec());
    w.post_mlp_norm = files.get(p + "post_feedforward_layernorm.weight", s.hidden_vec());
  } else {
    w.mlp_norm = files.get(p + "post_attention_layernorm.weight", s.hidden_vec());
  }
  w.w_gate = files.get_matrix(p + "mlp.gate_proj.weight", s.up(), q, owned);
  w.w_up = files.get_matrix(p + "mlp.up_proj.weight", s.up(), q, owned);
  w.w_down = files.get_matrix(p + "mlp.down_proj.weight", s.down(), q, owned);
  return w;
}

ModelWeights read_weights(const WeightFiles& files, const ModelConfig& c, Owned& owned) {
  const Shapes s{c};
  ModelWeights w;
  w.embed = files.get("model.embed_tokens.weight", s.embedding());
  w.layers.reserve(size_t(c.num_layers));
  for (int l = 0; l < c.num_layers; ++l) w.layers.push_back(read_layer(files, c, l, owned));
  w.final_norm = files.get("model.norm.weight", s.hidden_vec());
  // Tied models reuse the embedding as the output projection; some checkpoints store a copy as
  // lm_head.weight anyway, which transformers ignores too.
  w.lm_head =
      c.tie_word_embeddings ? w.embed : files.get_matrix("lm_head.weight", s.embedding(), c.quantization, owned);
  return w;
}

void check_model_dir(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) fail("model directory {} does not exist", dir.string());
  if (!fs::is_directory(dir, ec)) fail("model path {} is not a directory", dir.string());
}

}  // namespace

uint64_t Model::weight_bytes() const {
  uint64_t total = 0;
  auto add = [&](const TensorView& t) {
    if (t.present()) total += t.nbytes();
  };
  add(weights.embed);
  for (const LayerWeights& l : weights.layers)
    for (auto member : LayerWeights::kAll) add(l.*member);
  add(weights.final_norm);
  if (weights.lm_head.data != weights.embed.data) add(weights.lm_head);  // tied: the same bytes, counted once
  return total;
}

std::unique_ptr<Model> load_model(const fs::path& dir, const LoadOptions& options) {
  check_model_dir(dir);
  auto model = std::make_unique<Model>();
  model->dir = dir;
  model->config = load_model_config(dir);
  const WeightFiles files = WeightFiles::open(dir);
  model->weights = read_weights(files, model->config, model->owned);
  model->files = files.mappings();
  prepare_matrix_formats(*model, options);
  return model;
}

}  // namespace mk
