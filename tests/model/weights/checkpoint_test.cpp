// Checkpoint::open_dir on hand-made model directories: one file, shards, and
// indexes that point outside the directory or disagree with their shards.
#include "model/weights/checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

#include "tests/model/weights/weights_files.h"

namespace gpubox::weights {
namespace {

using testing::file_bytes;
using testing::TempDir;

// A file holding F32 tensors of one element each, named as given.
std::vector<std::byte> shard(const std::vector<std::string>& names) {
  std::string header = "{", data;
  for (std::size_t i = 0; i < names.size(); ++i) {
    header += (i ? "," : "") + std::string("\"") + names[i] + R"(":{"dtype":"F32","shape":[1],"data_offsets":[)" +
              std::to_string(4 * i) + "," + std::to_string(4 * i + 4) + "]}";
    data += std::string(4, static_cast<char>(i));
  }
  return file_bytes(header + "}", data);
}

std::string index_json(const std::string& weight_map) {
  return R"({"metadata":{"total_size":12},"weight_map":{)" + weight_map + "}}";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string open_error(const TempDir& dir) {
  auto checkpoint = Checkpoint::open_dir(dir.path());
  return checkpoint ? "" : checkpoint.status().message();
}

TEST(Checkpoint, OpensOneFile) {
  TempDir dir;
  dir.write("model.safetensors", shard({"wte", "wpe"}));
  auto checkpoint = Checkpoint::open_dir(dir.path());
  ASSERT_TRUE(checkpoint) << checkpoint.status().to_string();
  EXPECT_EQ((*checkpoint)->files().size(), 1u);
  EXPECT_EQ((*checkpoint)->names(), (std::vector<std::string>{"wpe", "wte"}));
  EXPECT_EQ((*checkpoint)->total_bytes(), 8u);
  auto found = (*checkpoint)->find("wpe");
  ASSERT_TRUE(found);
  EXPECT_EQ(found->entry->offset, 4u);
  EXPECT_EQ(found->file->path(), dir.path() + "/model.safetensors");
  EXPECT_FALSE((*checkpoint)->find("lm_head"));
}

TEST(Checkpoint, OpensShards) {
  TempDir dir;
  dir.write("model-00001-of-00002.safetensors", shard({"a", "b"}));
  dir.write("model-00002-of-00002.safetensors", shard({"c"}));
  dir.write_text("model.safetensors.index.json",
                 index_json(R"("a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors",)"
                            R"("c":"model-00002-of-00002.safetensors")"));
  auto checkpoint = Checkpoint::open_dir(dir.path());
  ASSERT_TRUE(checkpoint) << checkpoint.status().to_string();
  ASSERT_EQ((*checkpoint)->files().size(), 2u);
  EXPECT_EQ((*checkpoint)->files()[1]->path(), dir.path() + "/model-00002-of-00002.safetensors");
  EXPECT_EQ((*checkpoint)->names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ((*checkpoint)->find("c")->file, (*checkpoint)->files()[1].get());
  EXPECT_EQ((*checkpoint)->total_bytes(), 12u);
}

TEST(Checkpoint, RefusesShardsOutsideTheDirectory) {
  for (std::string name : {"../model.safetensors", "/etc/passwd", "sub/model.safetensors", "..", ".", ""}) {
    TempDir dir;
    dir.write("model-1.safetensors", shard({"a"}));
    dir.write_text("model.safetensors.index.json", index_json(R"("a":")" + name + "\""));
    auto message = open_error(dir);
    EXPECT_TRUE(contains(message, "not a file inside the model directory")) << name << ": " << message;
    EXPECT_TRUE(contains(message, "weight_map 'a'")) << message;
  }
}

TEST(Checkpoint, RefusesATensorInTwoShards) {
  TempDir dir;
  dir.write("model-1.safetensors", shard({"a", "b"}));
  dir.write("model-2.safetensors", shard({"b"}));
  dir.write_text("model.safetensors.index.json", index_json(R"("a":"model-1.safetensors","b":"model-2.safetensors")"));
  auto message = open_error(dir);
  EXPECT_TRUE(contains(message, "tensor 'b' is in two shards")) << message;
}

TEST(Checkpoint, RefusesAnIndexThatDisagreesWithItsShards) {
  {
    TempDir dir;
    dir.write("model-1.safetensors", shard({"a"}));
    dir.write_text("model.safetensors.index.json", index_json(R"("a":"model-1.safetensors","z":"model-1.safetensors")"));
    auto message = open_error(dir);
    EXPECT_TRUE(contains(message, "puts tensor 'z' in model-1.safetensors, which does not hold it")) << message;
  }
  {
    TempDir dir;
    dir.write("model-1.safetensors", shard({"a", "b"}));
    dir.write_text("model.safetensors.index.json", index_json(R"("a":"model-1.safetensors")"));
    auto message = open_error(dir);
    EXPECT_TRUE(contains(message, "tensor 'b'")) << message;
    EXPECT_TRUE(contains(message, "not in weight_map")) << message;
  }
  {
    TempDir dir;
    dir.write_text("model.safetensors.index.json", index_json(R"("a":"model-9.safetensors")"));
    auto checkpoint = Checkpoint::open_dir(dir.path());
    ASSERT_FALSE(checkpoint);
    EXPECT_EQ(checkpoint.status().code(), ErrorCode::not_found);
    EXPECT_TRUE(contains(checkpoint.status().message(), "model-9.safetensors"));
  }
}

TEST(Checkpoint, RefusesABadIndex) {
  for (std::string text : {std::string("not json"), std::string("[]"), std::string(R"({"weight_map":[]})"),
                           std::string(R"({"weight_map":{"a":1}})"),
                           std::string(R"({"weight_map":{"a":"m.safetensors","a":"n.safetensors"}})"),
                           std::string("{\"weight_map\":{}}\0junk", 22)}) {
    TempDir dir;
    dir.write_text("model.safetensors.index.json", text);
    auto message = open_error(dir);
    EXPECT_TRUE(contains(message, "model.safetensors.index.json: ")) << text << ": " << message;
  }
}

TEST(Checkpoint, RefusesACorruptShardNamingIt) {
  TempDir dir;
  dir.write("model-1.safetensors", file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "xxxx"));
  dir.write_text("model.safetensors.index.json", index_json(R"("a":"model-1.safetensors")"));
  auto message = open_error(dir);
  EXPECT_TRUE(contains(message, dir.path() + "/model-1.safetensors: tensor 'a'")) << message;
}

TEST(Checkpoint, RefusesPickleWeights) {
  TempDir dir;
  dir.write_text("pytorch_model.bin", "not unpickled");
  auto checkpoint = Checkpoint::open_dir(dir.path());
  ASSERT_FALSE(checkpoint);
  EXPECT_TRUE(contains(checkpoint.status().message(), "pickle")) << checkpoint.status().message();
  TempDir empty;
  auto none = Checkpoint::open_dir(empty.path());
  ASSERT_FALSE(none);
  EXPECT_EQ(none.status().code(), ErrorCode::not_found);
}

TEST(Checkpoint, PrefersTheSingleFile) {
  TempDir dir;
  dir.write("model.safetensors", shard({"a"}));
  dir.write_text("model.safetensors.index.json", "not even json");
  EXPECT_EQ(open_error(dir), "");
}

TEST(Checkpoint, PlainFileNames) {
  EXPECT_TRUE(is_plain_file_name("model-00001-of-00002.safetensors"));
  EXPECT_TRUE(is_plain_file_name("..model"));
  EXPECT_FALSE(is_plain_file_name("a/b"));
  EXPECT_FALSE(is_plain_file_name(std::string_view("a\0b", 3)));
}

}  // namespace
}  // namespace gpubox::weights
