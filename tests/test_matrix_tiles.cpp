// The tensor-core tile image and packed activations (runtime/matrix_tiles.h): every element of a packed
// matrix reads back as the row-major image's (matrix_row_element), every piece lands in one place, and an
// activation's two parts carry it to the precision the engine promises.
#include "runtime/matrix_tiles.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "runtime/error.h"

namespace mk {
namespace {

std::vector<uint8_t> random_image(MatrixFormat f, int rows, int cols, std::mt19937& rng) {
  std::vector<uint8_t> img(size_t(rows) * matrix_row_bytes(f, cols));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : img) b = uint8_t(byte(rng));
  for (int r = 0; r < rows; ++r) {
    uint8_t* row = img.data() + size_t(r) * matrix_row_bytes(f, cols);
    if (f == MatrixFormat::FP8)
      for (int c = 0; c < cols; ++c)
        if ((row[c] & 0x7f) == 0x7f) row[c] = 0;  // no NaN codes
    if (matrix_format_quantized(f))
      for (int g = 0; g < scale_groups(f, cols); ++g) {
        const float s = 0.001f * float(g + 1) + 0.0001f * float(r);
        std::memcpy(row + row_value_bytes(f, cols) + 4 * g, &s, 4);
      }
    if (f == MatrixFormat::BF16 || f == MatrixFormat::F16)
      for (int c = 0; c < cols; ++c) row[2 * c + 1] &= 0xbf;  // finite 16-bit values
  }
  return img;
}

TEST(MatrixTiles, EveryElementReadsBackForEveryFormatAndShape) {
  std::mt19937 rng(5);
  for (MatrixFormat f : {MatrixFormat::BF16, MatrixFormat::F16, MatrixFormat::FP8, MatrixFormat::INT4})
    for (auto [rows, cols] : {std::pair{16, 128}, std::pair{40, 896}, std::pair{3, 1152}, std::pair{33, 2048}}) {
      const std::vector<uint8_t> img = random_image(f, rows, cols, rng);
      const std::vector<uint8_t> tiles = pack_matrix_tiles(img.data(), rows, cols, f, "test");
      const MatrixTiles shape{rows, cols, f};
      ASSERT_EQ(tiles.size(), shape.bytes());
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) {
          const float want = matrix_row_element(f, img.data() + size_t(r) * matrix_row_bytes(f, cols), cols, c);
          const float got = matrix_tiles_element(tiles.data(), shape, r, c);
          ASSERT_TRUE(std::memcmp(&want, &got, 4) == 0)
              << matrix_format_name(f) << " " << rows << "x" << cols << " element (" << r << ", " << c << "): " << got << " != " << want;
        }
      // The last tile's padding rows read as zeros (a shape with whole tiles has the same offsets).
      const MatrixTiles padded{shape.tiles() * kTileRows, cols, f};
      for (int r = rows; r < padded.rows; ++r) {
        for (int c = 0; c < cols; c += 37) ASSERT_EQ(matrix_tiles_element(tiles.data(), padded, r, c), 0.f) << r << " " << c;
      }
    }
}

TEST(MatrixTiles, PiecePlacesArePermutationsOfATileSlice) {
  for (MatrixFormat f : {MatrixFormat::BF16, MatrixFormat::FP8, MatrixFormat::INT4}) {
    const int pieces = row_value_bytes(f, tile_slice_cols(f)) / 16;
    std::set<int> places;
    for (int r = 0; r < kTileRows; ++r)
      for (int p = 0; p < pieces; ++p) places.insert(tile_piece_place(p, r));
    EXPECT_EQ(int(places.size()), kTileRows * pieces);
    EXPECT_EQ(*places.rbegin(), kTileRows * pieces - 1);
  }
}

TEST(MatrixTiles, ActivationPiecesFillEachColumnOnce) {
  for (MatrixFormat f : {MatrixFormat::BF16, MatrixFormat::FP8, MatrixFormat::INT4}) {
    std::set<int> offsets;
    for (int q = 0; q < tile_slice_cols(f) / 8; ++q)
      for (int lo = 0; lo < 2; ++lo) offsets.insert(act_piece_offset(f, 1, q, lo));
    EXPECT_EQ(int(offsets.size()), tile_slice_cols(f) / 4);
    EXPECT_EQ(*offsets.begin(), act_column_bytes(f));
    EXPECT_LT(*offsets.rbegin() + 16, 2 * act_column_bytes(f));
  }
}

TEST(MatrixTiles, ActivationPartsCarryTheValue) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int i = 0; i < 10000; ++i) {
    const float x = normal(rng) * (i % 3 == 0 ? 300.f : i % 3 == 1 ? 1.f : 1e-3f);
    const float bf = joined_activation(split_activation(x, false), false);
    const float h = joined_activation(split_activation(x, true), true);
    EXPECT_LE(std::fabs(bf - x), std::ldexp(std::fabs(x), -16)) << x;
    // f16: ~22 bits, or the low part's subnormal step (2^-25) for small values.
    EXPECT_LE(std::fabs(h - x), std::max(std::ldexp(std::fabs(x), -21), std::ldexp(1.0f, -25))) << x;
  }
}

TEST(MatrixTiles, PackedActivationsHoldBothParts) {
  const int M = 3, cols = 1152;
  std::vector<float> x(size_t(M) * cols);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * float(i % 997) - 3.f;
  for (MatrixFormat f : {MatrixFormat::BF16, MatrixFormat::INT4}) {
    const std::vector<uint8_t> packed = pack_activations(x.data(), M, cols, f);
    const MatrixTiles shape{1, cols, f};
    ASSERT_EQ(packed.size(), size_t(shape.slices()) * shape.act_slice_bytes(M));
    for (int n = 0; n < M; ++n)
      for (int c = 0; c < cols; ++c) {
        const int s = c / tile_slice_cols(f), k = c % tile_slice_cols(f);
        const uint8_t* slice = packed.data() + size_t(s) * shape.act_slice_bytes(M);
        ActParts p;
        std::memcpy(&p.hi, slice + act_piece_offset(f, n, k / 8, 0) + 2 * (k % 8), 2);
        std::memcpy(&p.lo, slice + act_piece_offset(f, n, k / 8, 1) + 2 * (k % 8), 2);
        const ActParts want = split_activation(x[size_t(n) * cols + c], tile_activations_f16(f));
        ASSERT_EQ(p.hi, want.hi) << n << " " << c;
        ASSERT_EQ(p.lo, want.lo) << n << " " << c;
      }
  }
}

TEST(MatrixTiles, ShapesItCannotTakeAreNamed) {
  std::vector<uint8_t> img(size_t(matrix_row_bytes(MatrixFormat::BF16, 200)) * 2);
  try {
    pack_matrix_tiles(img.data(), 2, 200, MatrixFormat::BF16, "layers.0.mlp.down_proj.weight");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.mlp.down_proj.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("200"), std::string::npos) << e.what();
  }
  std::vector<float> x(128);
  EXPECT_THROW(pack_activations(x.data(), kMaxActColumns + 1, 128, MatrixFormat::BF16), Error);
}

}  // namespace
}  // namespace mk
