#include "orchestrator/fit/law_csv.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace xmod {
namespace {

std::string Write(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(path) << text;
  return path;
}

TEST(CsvTable, ColumnsByNameCellsTrimmedEmptyLinesAndCrIgnored) {
  const std::string path = Write("xmod_csv_a.csv", " loss , N,D\r\n1.5, 10 ,20\r\n\r\n2.5,30,40\n");
  auto t = CsvTable::Read(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->rows(), 2u);
  ASSERT_EQ(t->Column("N"), 1u);
  EXPECT_EQ(t->Column("loss"), 0u);
  EXPECT_FALSE(t->Column("T").has_value());
  EXPECT_EQ(t->Number(0, 1).value(), 10.0);
  EXPECT_EQ(t->Number(1, 0).value(), 2.5);
  EXPECT_EQ(t->Where(1), path + ":4");  // the empty line still counts
}

TEST(CsvTable, BadCellsNameTheFileLineAndColumn) {
  const std::string path = Write("xmod_csv_b.csv", "N,D,loss\n1,2\n1,x,3\n1,2e999,3\n");
  auto t = CsvTable::Read(path);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->Number(0, 2).status().message(), path + ":2: loss: not a finite number");  // short
  EXPECT_EQ(t->Number(1, 1).status().message(), path + ":3: D: not a finite number");
  EXPECT_EQ(t->Number(2, 1).status().message(), path + ":4: D: not a finite number");  // inf
  EXPECT_EQ(CsvTable::Read(Write("xmod_csv_c.csv", "")).status().message(),
            std::filesystem::temp_directory_path().string() + "/xmod_csv_c.csv:1: empty file");
  EXPECT_EQ(CsvTable::Read("/no/such.csv").status().code(), absl::StatusCode::kNotFound);
}

TEST(LawCsv, DenseAndXmodPointsAndTheirChecks) {
  auto dense = ReadLawCsv(Write("xmod_csv_d.csv", "N,D,loss,scale\n1e6,2e7,3.1,s1\n"), "dense");
  ASSERT_TRUE(dense.ok()) << dense.status();
  ASSERT_EQ(dense->size(), 1u);
  EXPECT_EQ((*dense)[0].n, 1e6);
  EXPECT_EQ((*dense)[0].scale, "s1");
  const std::string x = Write(
      "xmod_csv_e.csv", "N_active,N_total,D,T,capacity,stride,loss\n1e6,3e6,2e7,256,1.5,2,3\n");
  EXPECT_EQ(ReadLawCsv(x, "xmod").status().message(), x + ":2: capacity: must be in (0, 1]");
  EXPECT_EQ(ReadLawCsv(x, "dense").status().code(), absl::StatusCode::kInvalidArgument);
  const std::string m = Write("xmod_csv_f.csv", "N,loss\n1,2\n");
  EXPECT_EQ(ReadLawCsv(m, "dense").status().message(),
            m + ":1: header: missing column 'D' (law dense needs N,D,loss)");
}

}  // namespace
}  // namespace xmod
