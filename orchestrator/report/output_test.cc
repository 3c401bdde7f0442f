#include "orchestrator/report/output.h"

#include <gtest/gtest.h>

#include <sstream>

namespace xmod {
namespace {

QueryResult Sample() {
  QueryResult r;
  r.columns = {"name", "n", "loss"};
  r.rows.push_back({std::string("a,b \"q\""), int64_t{3}, 2.718281828459045});
  r.rows.push_back({std::string("c"), int64_t{-1}, std::monostate{}});
  return r;
}

std::string Print(Format format) {
  std::ostringstream out;
  PrintResult(Sample(), format, out);
  return out.str();
}

TEST(Output, CsvQuotesFieldsAndKeepsFullPrecision) {
  EXPECT_EQ(Print(Format::kCsv), "name,n,loss\n\"a,b \"\"q\"\"\",3,2.718281828459045\nc,-1,\n");
}

TEST(Output, JsonKeepsTypesAndNulls) {
  EXPECT_EQ(
      Print(Format::kJson),
      "[\n  {\n    \"loss\": 2.718281828459045,\n    \"n\": 3,\n    \"name\": \"a,b "
      "\\\"q\\\"\"\n  },\n  {\n    \"loss\": null,\n    \"n\": -1,\n    \"name\": \"c\"\n  }\n]\n");
}

TEST(Output, TableAlignsColumnsWithShortReals) {
  EXPECT_EQ(Print(Format::kTable),
            "name     n   loss\n"
            "a,b \"q\"  3   2.71828\n"
            "c        -1\n");
}

TEST(Output, UnknownFormatIsRejected) {
  EXPECT_FALSE(ParseFormat("yaml").ok());
  EXPECT_EQ(ParseFormat("csv").value(), Format::kCsv);
}

}  // namespace
}  // namespace xmod
