#include "model/tokenizer/tokenizer.h"
#include <gtest/gtest.h>
TEST(Tokenizer, Placeholder) {}
