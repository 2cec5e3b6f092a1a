// SafetensorsFile against hand-crafted files: a good one read in place, and
// hostile ones each refused with an error naming the file and the tensor.
#include "model/weights/safetensors.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "tests/model/weights/weights_files.h"

namespace gpubox::weights {
namespace {

using testing::file_bytes;
using testing::file_bytes_with_length;
using testing::TempDir;

// Four F32 values 1, 2, 3, 4 then one BF16 value 1.5 (0x3fc0).
std::string good_data() {
  std::string data(18, '\0');
  const float values[] = {1.0f, 2.0f, 3.0f, 4.0f};
  std::memcpy(data.data(), values, sizeof values);
  data[16] = '\xc0';
  data[17] = '\x3f';
  return data;
}

constexpr char kGoodHeader[] =
    R"({"b":{"dtype":"BF16","shape":[],"data_offsets":[16,18]},)"
    R"("a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
    R"("__metadata__":{"format":"pt"}})";

// Opens a file made of header and data; the error message, or "" when it opened.
std::string open_error(const std::string& header, const std::string& data, OpenOptions options = {}) {
  TempDir dir;
  auto path = dir.write("x.safetensors", file_bytes(header, data));
  auto file = SafetensorsFile::open(path, options);
  if (file) return "";
  EXPECT_EQ(file.status().code(), ErrorCode::invalid_request) << file.status().message();
  EXPECT_NE(file.status().message().find(path), std::string::npos) << "names the file: " << file.status().message();
  return file.status().message();
}

std::string open_bytes_error(const std::vector<std::byte>& bytes) {
  TempDir dir;
  auto path = dir.write("x.safetensors", bytes);
  auto file = SafetensorsFile::open(path);
  return file ? "" : file.status().message();
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(SafetensorsFile, ReadsAGoodFileInPlace) {
  TempDir dir;
  auto path = dir.write("good.safetensors", file_bytes(kGoodHeader, good_data()));
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file) << file.status().to_string();
  const auto& f = **file;
  EXPECT_EQ(f.path(), path);
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensors()[0].name, "a");  // data order, not header order
  EXPECT_EQ(f.tensors()[1].name, "b");
  EXPECT_EQ(f.data_bytes(), 18u);
  const TensorEntry* a = f.find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, DType::F32);
  EXPECT_EQ(a->shape, (std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(a->offset, 0u);
  EXPECT_EQ(a->size, 16u);
  EXPECT_EQ(a->element_count(), 4u);
  EXPECT_EQ(element_as_double(*a, f.bytes(*a), 3), 4.0);
  const TensorEntry* b = f.find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(b->shape.empty());
  EXPECT_EQ(b->element_count(), 1u);
  EXPECT_EQ(element_as_double(*b, f.bytes(*b), 0), 1.5);
  EXPECT_EQ(f.find("c"), nullptr);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_TRUE(f.still_intact());
}

TEST(SafetensorsFile, FromBytesChecksTheSame) {
  auto file = SafetensorsFile::from_bytes("memory", file_bytes(kGoodHeader, good_data()));
  ASSERT_TRUE(file) << file.status().to_string();
  EXPECT_EQ((*file)->tensors().size(), 2u);
  auto bad = SafetensorsFile::from_bytes("memory", file_bytes(kGoodHeader, good_data() + "x"));
  ASSERT_FALSE(bad);
  EXPECT_TRUE(contains(bad.status().message(), "memory: ")) << bad.status().message();
}

TEST(SafetensorsFile, AcceptsAnEmptyHeaderAndPadding) {
  EXPECT_EQ(open_error("{}", ""), "");
  EXPECT_EQ(open_error(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}     )", ""), "");
  EXPECT_EQ(open_error(R"({"__metadata__":null})", ""), "");
}

TEST(SafetensorsFile, RefusesATruncatedFile) {
  EXPECT_TRUE(contains(open_bytes_error({}), "too short for the 8-byte header length"));
  EXPECT_TRUE(contains(open_bytes_error({std::byte{2}, std::byte{0}, std::byte{0}}), "too short"));
  // The data section cut short: the last tensor runs past it.
  std::string data = good_data();
  auto message = open_error(kGoodHeader, data.substr(0, 17));
  EXPECT_TRUE(contains(message, "tensor 'b'")) << message;
  EXPECT_TRUE(contains(message, "past the data section")) << message;
}

TEST(SafetensorsFile, RefusesAHugeHeaderLength) {
  auto message = open_bytes_error(file_bytes_with_length(std::uint64_t{1} << 63, "{}", ""));
  EXPECT_TRUE(contains(message, "over the cap")) << message;
  OpenOptions small;
  small.max_header_bytes = 8;
  message = open_error(kGoodHeader, good_data(), small);
  EXPECT_TRUE(contains(message, "over the cap of 8 bytes")) << message;
}

TEST(SafetensorsFile, RefusesAHeaderBeyondTheFile) {
  auto message = open_bytes_error(file_bytes_with_length(1000, "{}", ""));
  EXPECT_TRUE(contains(message, "runs past the end of the file")) << message;
}

TEST(SafetensorsFile, RefusesAHeaderThatIsNotAJsonObject) {
  EXPECT_TRUE(contains(open_error("not json", ""), "not valid JSON"));
  EXPECT_TRUE(contains(open_error("", ""), "not valid JSON"));
  EXPECT_TRUE(contains(open_error("[1, 2]", ""), "not a JSON object"));
  EXPECT_TRUE(contains(open_error("\"{}\"", ""), "not a JSON object"));
  EXPECT_EQ(open_error(" \n{}", ""), "");  // the library accepts leading whitespace too
  EXPECT_TRUE(contains(open_error("{\"a\": ", ""), "not valid JSON"));
  EXPECT_TRUE(contains(open_error("{} {}", ""), "not valid JSON"));
  EXPECT_TRUE(contains(open_error(std::string("{}\0", 3), ""), "a NUL byte at offset 2"));
  EXPECT_TRUE(contains(open_error(std::string("{}\0junk", 7), ""), "NUL byte"));
  // Invalid UTF-8 inside a name.
  EXPECT_TRUE(contains(open_error("{\"\xff\":{}}", ""), "not valid JSON"));
  EXPECT_TRUE(contains(open_error(R"({"a":[1]})", ""), "tensor 'a': its entry is an array"));
}

TEST(SafetensorsFile, RefusesOverlappingTensors) {
  auto message = open_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                            R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                            std::string(12, '\0'));
  EXPECT_TRUE(contains(message, "tensor 'b': data_offsets [4, 12) overlap tensor 'a' [0, 8)")) << message;
  message = open_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                       std::string(8, '\0'));
  EXPECT_TRUE(contains(message, "overlap")) << message;
}

TEST(SafetensorsFile, RefusesHolesAndTrailingBytes) {
  auto message = open_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(8, '\0'));
  EXPECT_TRUE(contains(message, "bytes [0, 4) of the data section belong to no tensor")) << message;
  message = open_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(8, '\0'));
  EXPECT_TRUE(contains(message, "bytes [4, 8) at the end of the data section belong to no tensor")) << message;
  message = open_error("{}", "x");
  EXPECT_TRUE(contains(message, "belong to no tensor")) << message;
}

TEST(SafetensorsFile, RefusesASizeMismatch) {
  auto message = open_error(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0'));
  EXPECT_TRUE(contains(message, "tensor 'a': its shape and dtype make 12 bytes but data_offsets [0, 8) hold 8"))
      << message;
  message = open_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", std::string(8, '\0'));
  EXPECT_TRUE(contains(message, "begin 8 is after its end 4")) << message;
}

TEST(SafetensorsFile, RefusesAShapeThatOverflows) {
  auto message = open_error(
      R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", "");
  EXPECT_TRUE(contains(message, "tensor 'a': its element count times its dtype size overflows")) << message;
  message = open_error(R"({"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}})", "");
  EXPECT_TRUE(contains(message, "overflows")) << message;
  message = open_error(R"({"a":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,0]}})", "");
  EXPECT_TRUE(contains(message, "too large")) << message;
  message = open_error(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", "");
  EXPECT_TRUE(contains(message, "a negative number")) << message;
  message = open_error(R"({"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", std::string(4, '\0'));
  EXPECT_TRUE(contains(message, "non-integer")) << message;
  message = open_error(R"({"a":{"dtype":"F32","shape":[1e30],"data_offsets":[0,4]}})", std::string(4, '\0'));
  EXPECT_TRUE(contains(message, "non-integer")) << message;
}

TEST(SafetensorsFile, RefusesAnUnknownDtype) {
  auto message = open_error(R"({"a":{"dtype":"F17","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0'));
  EXPECT_TRUE(contains(message, "tensor 'a': unknown dtype 'F17'")) << message;
  message = open_error(R"({"a":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0'));
  EXPECT_TRUE(contains(message, "unknown dtype 'f32'")) << message;
  message = open_error(R"({"a":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0'));
  EXPECT_TRUE(contains(message, "dtype is a number")) << message;
}

TEST(SafetensorsFile, RefusesDuplicateNamesAndKeys) {
  auto message = open_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                            R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                            std::string(8, '\0'));
  EXPECT_TRUE(contains(message, "tensor name 'a' appears twice")) << message;
  message = open_error(R"({"a":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0'));
  EXPECT_TRUE(contains(message, "key 'dtype' appears twice")) << message;
}

TEST(SafetensorsFile, RefusesMalformedEntries) {
  auto message = open_error(R"({"a":{"dtype":"F32","shape":[1]}})", std::string(4, '\0'));
  EXPECT_TRUE(contains(message, "tensor 'a': its entry has no 'data_offsets'")) << message;
  message = open_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", std::string(4, '\0'));
  EXPECT_TRUE(contains(message, "unexpected key 'x'")) << message;
  message = open_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,4]}})", std::string(4, '\0'));
  EXPECT_TRUE(contains(message, "two integers")) << message;
  message = open_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,"4"]}})", std::string(4, '\0'));
  EXPECT_TRUE(contains(message, "non-negative integers")) << message;
  message = open_error(R"({"a":{"dtype":"F32","shape":1,"data_offsets":[0,4]}})", std::string(4, '\0'));
  EXPECT_TRUE(contains(message, "shape is a number")) << message;
  message = open_error(R"({"a":{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}})", std::string(4, '\0'));
  EXPECT_TRUE(contains(message, "tensor 'a'")) << message;
}

TEST(SafetensorsFile, RefusesMetadataThatIsNotStrings) {
  auto message = open_error(R"({"__metadata__":{"a":1}})", "");
  EXPECT_TRUE(contains(message, "__metadata__ 'a' is a number")) << message;
  message = open_error(R"({"__metadata__":["a"]})", "");
  EXPECT_TRUE(contains(message, "__metadata__ is an array")) << message;
}

TEST(SafetensorsFile, RefusesDeepNesting) {
  std::string deep = R"({"a":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
  auto message = open_error(deep, "");
  EXPECT_FALSE(message.empty());
}

TEST(SafetensorsFile, RefusesWhatIsNotARegularFile) {
  TempDir dir;
  auto fifo = dir.path() + "/fifo.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto file = SafetensorsFile::open(fifo);  // must not block waiting for a writer
  ASSERT_FALSE(file);
  EXPECT_TRUE(contains(file.status().message(), "not a regular file"));
  auto missing = SafetensorsFile::open(dir.path() + "/missing.safetensors");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.status().code(), ErrorCode::not_found);
  auto directory = SafetensorsFile::open(dir.path());
  ASSERT_FALSE(directory);
}

TEST(SafetensorsFile, NoticesAFileThatChangedSize) {
  TempDir dir;
  auto path = dir.write("x.safetensors", file_bytes(kGoodHeader, good_data()));
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file);
  ASSERT_EQ(::truncate(path.c_str(), 10), 0);
  auto status = (*file)->still_intact();
  EXPECT_EQ(status.code(), ErrorCode::input_changed);
  EXPECT_TRUE(contains(status.message(), path));
}

TEST(SafetensorsFile, BytesOfAForeignEntryAreEmpty) {
  auto file = SafetensorsFile::from_bytes("memory", file_bytes(kGoodHeader, good_data()));
  ASSERT_TRUE(file);
  TensorEntry foreign;
  foreign.offset = 10;
  foreign.size = 100;
  EXPECT_TRUE((*file)->bytes(foreign).empty());
  foreign.offset = ~std::uint64_t{0};
  foreign.size = 2;
  EXPECT_TRUE((*file)->bytes(foreign).empty());
}

}  // namespace
}  // namespace gpubox::weights
