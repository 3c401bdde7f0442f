// Law points from CSV files: the one reader of comma-separated files with a
// header row that `xmod fit --csv`, the Chinchilla reference test and fit_bench
// use. Columns are found by name, in any order; every error names the file and
// line (and the column), and nothing is fitted from a file with an error.
#ifndef XMOD_ORCHESTRATOR_FIT_LAW_CSV_H_
#define XMOD_ORCHESTRATOR_FIT_LAW_CSV_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "orchestrator/fit/law.h"

namespace xmod {

// A CSV file read whole: the header's names and the data rows' cells, spaces
// around each cell trimmed, CR line ends and empty lines ignored. No quoting
// (law files hold numbers and scale names).
class CsvTable {
 public:
  static absl::StatusOr<CsvTable> Read(const std::string& path);

  const std::string& path() const { return path_; }
  std::optional<size_t> Column(std::string_view name) const;
  size_t rows() const { return cells_.size(); }
  size_t columns() const { return header_.size(); }
  // "path:LINE" of a data row.
  std::string Where(size_t row) const;
  // The cell as a finite number; an error "path:LINE: NAME: not a finite number"
  // when it is absent, empty or not entirely a number.
  absl::StatusOr<double> Number(size_t row, size_t column) const;
  // The cell's text ("" when the row is short).
  std::string Text(size_t row, size_t column) const;
  const std::string& Name(size_t column) const { return header_[column]; }

 private:
  std::string path_;
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> cells_;
  std::vector<int> lines_;  // file line of each data row
};

// A law CSV: N (or N_active), D, loss, and the columns the law declares
// (LawSpec::csv_columns; the xmod law: N_total, T, capacity, stride; the moe law:
// `expansion`, E / top_k, 1 for a dense run). N_total, T, capacity and stride are
// read for every law where present, a declared column no LawPoint field names
// lands in LawPoint::extra, and an optional `scale` column names the scale for
// --holdout-largest. An unknown law is INVALID_ARGUMENT.
absl::StatusOr<std::vector<LawPoint>> ReadLawCsv(const std::string& path, const std::string& law);

// The Chinchilla runs of tests/data/chinchilla_svg_extracted.csv (Epoch AI's
// extraction; columns "Model Size", "Training FLOP", "loss") as dense points with
// D = C / (6N), the `drop_highest` highest-loss runs left out.
absl::StatusOr<std::vector<LawPoint>> ReadChinchillaReference(const std::string& path,
                                                              int drop_highest);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_FIT_LAW_CSV_H_
