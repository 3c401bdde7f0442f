// A family's own section of a sweep file (`moe:`, `deco:`, or a registered
// family's): the family declares its keys and reads their values through this
// reader into one JSON object of options (SweepSpec::family_options), which its
// sweep code reads back when it sizes points and writes job files. The reader is
// the sweep parser's: errors say "FILE:LINE: SECTION.key: ..." like every other
// field, and a bad value leaves the default in place (the sweep is refused).
#ifndef XMOD_ORCHESTRATOR_SWEEP_SECTION_H_
#define XMOD_ORCHESTRATOR_SWEEP_SECTION_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace xmod {

// The upper bounds an integer option may have (common/accounting.h says why).
enum class OptionBound { kCount, kHidden, kLayers, kExperts };

class SectionReader {
 public:
  virtual ~SectionReader() = default;
  // Every key of the section must be one of `allowed` (else "unknown key", with
  // a suggestion) and appear once.
  virtual void Keys(const std::vector<std::string>& allowed) = 0;
  // Whether the section gives `key`, and its text when it is a scalar ("" else).
  virtual bool Has(const std::string& key) const = 0;
  virtual std::string Text(const std::string& key) const = 0;
  // If given: an integer in [lo, bound], a finite number in [lo, hi] (hi excluded
  // when hi_open), or one of `known` names, stored as options()[key].
  virtual void Integer(const std::string& key, int64_t lo, OptionBound bound) = 0;
  // If given: one such integer or a list of distinct ones, stored as an array.
  virtual void IntegerList(const std::string& key, int64_t lo, OptionBound bound) = 0;
  virtual void Number(const std::string& key, double lo, double hi, bool hi_open) = 0;
  virtual void Choice(const std::string& key, const std::vector<std::string>& known) = 0;
  // A problem with `key` the family found itself.
  virtual void Error(const std::string& key, const std::string& message) = 0;
  // The options object: the family's defaults, then the values read.
  virtual nlohmann::json& options() = 0;
};

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_SWEEP_SECTION_H_
